"""The SQLite side of outcome assessment and the policy export: decisions and retrievals still unlabelled, the
evidence that labels them (access, later gaps, later queries), and the labelled rows, paged."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import LogPosition
from agent_memory.storage.rows import ts

PAGE = 1000


@dataclass(frozen=True, slots=True)
class PendingDecision:
    decision_id: int
    namespace: str
    memory_id: str | None
    decided_at: datetime
    position: LogPosition


@dataclass(frozen=True, slots=True)
class PendingRetrieval:
    retrieval_id: str
    namespace: str
    query: str
    at: datetime
    results: int


class OutcomeQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def unlabelled_decisions(self, before: datetime, *, limit: int = PAGE) -> list[PendingDecision]:
        """Save decisions taken before `before` (their window has passed) that have no outcome yet."""
        rows = await self._fetch(
            "SELECT d.decision_id, t.namespace, d.memory_id, d.decided_at, t.segment, t.offset, t.length "
            "FROM save_decisions d JOIN turns t ON t.turn_id = d.turn_id "
            "WHERE d.outcome IS NULL AND d.decided_at <= ? ORDER BY d.decision_id LIMIT ?",
            (ts(before), limit),
        )
        return [
            PendingDecision(int(r[0]), str(r[1]), r[2], datetime.fromisoformat(r[3]), LogPosition(r[4], r[5], r[6]))
            for r in rows
        ]

    async def accessed(self, memory_id: str, start: datetime, end: datetime) -> bool:
        rows = await self._fetch(
            "SELECT 1 FROM access_log WHERE memory_id = ? AND accessed_at >= ? AND accessed_at <= ? LIMIT 1",
            (memory_id, ts(start), ts(end)),
        )
        return bool(rows)

    async def gap_keywords(self, namespace: str, start: datetime, end: datetime) -> list[list[str]]:
        """The keywords of every retrieval gap opened in `namespace` between `start` and `end`."""
        rows = await self._fetch(
            "SELECT keywords FROM retrieval_gaps WHERE namespace = ? AND opened_at >= ? AND opened_at <= ?",
            (namespace, ts(start), ts(end)),
        )
        return [list(json.loads(r[0])) for r in rows]

    async def unlabelled_retrievals(self, before: datetime, *, limit: int = PAGE) -> list[PendingRetrieval]:
        rows = await self._fetch(
            "SELECT retrieval_id, namespace, query, at, result_ids FROM retrieval_events "
            "WHERE outcome IS NULL AND at <= ? ORDER BY at, retrieval_id LIMIT ?",
            (ts(before), limit),
        )
        return [
            PendingRetrieval(str(r[0]), str(r[1]), str(r[2]), datetime.fromisoformat(r[3]), len(json.loads(r[4])))
            for r in rows
        ]

    async def queries_after(self, namespace: str, retrieval_id: str, start: datetime, end: datetime) -> list[str]:
        """The queries asked in `namespace` after one retrieval, up to `end`."""
        rows = await self._fetch(
            "SELECT query FROM retrieval_events WHERE namespace = ? AND at >= ? AND at <= ? AND retrieval_id != ?",
            (namespace, ts(start), ts(end), retrieval_id),
        )
        return [str(r[0]) for r in rows]

    async def label_decisions(self, labels: Sequence[tuple[int, str]], *, now: datetime) -> None:
        async with self.transaction() as db:
            await db.executemany(
                "UPDATE save_decisions SET outcome = ?, outcome_at = ? WHERE decision_id = ?",
                [(label, ts(now), decision_id) for decision_id, label in labels],
            )

    async def label_retrievals(self, labels: Sequence[tuple[str, str]], *, now: datetime) -> None:
        async with self.transaction() as db:
            await db.executemany(
                "UPDATE retrieval_events SET outcome = ?, outcome_at = ? WHERE retrieval_id = ?",
                [(label, ts(now), retrieval_id) for retrieval_id, label in labels],
            )

    # ----- export ------------------------------------------------------------------------------------

    async def decision_rows(self, *, labelled_only: bool) -> AsyncIterator[dict[str, Any]]:
        """Every save decision with its features, inputs and outcome, a page at a time."""
        after = 0
        where = "AND d.outcome IS NOT NULL" if labelled_only else ""
        while rows := await self._fetch(
            "SELECT d.decision_id, d.turn_id, d.memory_id, t.namespace, t.role, d.decided_at, d.path, d.save, "
            "d.memory_type, d.confidence, d.importance, d.reason, d.features, d.inputs, d.policy, d.outcome, "
            f"d.outcome_at FROM save_decisions d JOIN turns t ON t.turn_id = d.turn_id WHERE d.decision_id > ? {where} "
            "ORDER BY d.decision_id LIMIT ?",
            (after, PAGE),
        ):
            for r in rows:
                yield {
                    "kind": "save",
                    "decision_id": int(r[0]),
                    "turn_id": r[1],
                    "memory_id": r[2],
                    "namespace": r[3],
                    "role": r[4],
                    "decided_at": r[5],
                    "path": r[6],
                    "save": bool(r[7]),
                    "memory_type": r[8],
                    "confidence": r[9],
                    "importance": r[10],
                    "reason": r[11],
                    "features": json.loads(r[12]),
                    "inputs": json.loads(r[13]),
                    "policy": r[14],
                    "outcome": r[15],
                    "outcome_at": r[16],
                }
            after = int(rows[-1][0])

    async def retrieval_rows(self, *, labelled_only: bool) -> AsyncIterator[dict[str, Any]]:
        """Every retrieval with what it returned and its outcome, a page at a time (by time, then id)."""
        after = ("", "")
        where = "AND outcome IS NOT NULL" if labelled_only else ""
        while rows := await self._fetch(
            "SELECT retrieval_id, namespace, query, at, k, result_ids, top_score, outcome, outcome_at "
            f"FROM retrieval_events WHERE (at, retrieval_id) > (?, ?) {where} ORDER BY at, retrieval_id LIMIT ?",
            (*after, PAGE),
        ):
            for r in rows:
                results = json.loads(r[5])
                yield {
                    "kind": "retrieval",
                    "retrieval_id": r[0],
                    "namespace": r[1],
                    "query": r[2],
                    "at": r[3],
                    "k": int(r[4]),
                    "result_ids": results,
                    "features": {"results": len(results), "top_score": r[6], "query_words": len(str(r[2]).split())},
                    "outcome": r[7],
                    "outcome_at": r[8],
                }
            after = (str(rows[-1][3]), str(rows[-1][0]))
