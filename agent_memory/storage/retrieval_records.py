"""The retrievals' own records: events (their trigger writes the accesses) and retrieval gaps, opened and closed.

Mixed into `SqliteRecords` (records.py), which owns the connections; kept apart so each file stays readable.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import RetrievalGap
from agent_memory.storage.rows import gap_row, ts


class RetrievalQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

    async def record_retrieval(
        self,
        retrieval_id: str,
        namespace: str,
        query: str,
        *,
        at: datetime,
        k: int,
        results: Sequence[tuple[str, float]],
    ) -> None:
        """One retrieval event (`record_retrievals`)."""
        await self.record_retrievals([(retrieval_id, namespace, query, at, k, results)], [])

    async def record_retrievals(
        self,
        events: Sequence[tuple[str, str, str, datetime, int, Sequence[tuple[str, float]]]],
        gaps: Sequence[tuple[RetrievalGap, bytes | None]],
        *,
        batch: int | None = None,
    ) -> None:
        """Retrieval events, each (id, namespace, query, at, k, results best first), and the gaps they opened, in
        one transaction. An event's trigger (migration 0015) writes one access per result and bumps each result's
        access count and last access. A result that no longer exists fails it all: nothing is written. `batch`,
        when given, becomes the number of the last batch written (retrieval_batches, migration 0017)."""
        async with self.transaction(projected=False) as db:
            await db.executemany(
                "INSERT INTO retrieval_events (retrieval_id, namespace, query, at, k, result_ids, top_score) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (rid, ns, q, ts(at), k, json.dumps([r[0] for r in results]), results[0][1] if results else None)
                    for rid, ns, q, at, k, results in events
                ],
            )
            if gaps:
                await db.executemany(_OPEN_GAP, [_gap_params(gap, vector) for gap, vector in gaps])
            if batch is not None:
                await db.execute("UPDATE retrieval_batches SET last = ?", (batch,))

    async def last_retrieval_batch(self) -> int:
        """The number of the last batch of retrieval records written (0 before the first)."""
        return int((await self._fetch("SELECT last FROM retrieval_batches"))[0][0])

    async def open_gap(self, gap: RetrievalGap, vector: bytes | None) -> None:
        async with self.transaction(projected=False) as db:
            await db.execute(_OPEN_GAP, _gap_params(gap, vector))

    async def open_gaps(self, namespace: str, *, now: datetime) -> list[tuple[RetrievalGap, bytes | None]]:
        """Gaps still open and not expired at `now`, newest first, with their query vectors."""
        rows = await self._fetch(
            "SELECT gap_id, namespace, query, keywords, best_score, opened_at, expires_at, vector "
            "FROM retrieval_gaps WHERE namespace = ? AND closed_at IS NULL AND expires_at > ? ORDER BY opened_at DESC",
            (namespace, ts(now)),
        )
        return [(gap_row(r), bytes(r[7]) if r[7] is not None else None) for r in rows]

    async def close_gap(self, gap_id: str, *, now: datetime, closed_by: str) -> None:
        async with self.transaction() as db:
            await db.execute(
                "UPDATE retrieval_gaps SET closed_at = ?, closed_by = ? WHERE gap_id = ? AND closed_at IS NULL",
                (ts(now), closed_by, gap_id),
            )


_OPEN_GAP = (
    "INSERT INTO retrieval_gaps (gap_id, namespace, query, keywords, vector, best_score, opened_at, expires_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def _gap_params(gap: RetrievalGap, vector: bytes | None) -> tuple[Any, ...]:
    return (
        gap.gap_id,
        gap.namespace,
        gap.query,
        json.dumps(list(gap.keywords)),
        vector,
        gap.best_score,
        ts(gap.opened_at),
        ts(gap.expires_at),
    )
