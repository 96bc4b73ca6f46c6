"""Versioned facts in SQLite (migration 0021): the rows of one (namespace, subject, attribute) are read, a plan is
made from them, and the plan is written, all in one transaction, so concurrent statements of one fact serialise.
Mixed into `SqliteRecords` (records.py); facts.py is the component that makes the plans."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiosqlite

from agent_memory.models import Fact, FactDecision
from agent_memory.storage.rows import dt, ts

FACT_COLUMNS = (
    "fact_id, namespace, subject, attribute, value, valid_at, invalid_at, recorded_at, expired_at, confidence, "
    "observation_count, sources"
)


@dataclass(frozen=True, slots=True)
class Observed:
    """One more observation of an existing row: its count, a source, the higher confidence."""

    fact_id: str
    source: str | None
    confidence: float


@dataclass(slots=True)
class FactPlan:
    """What one statement changes: rows retired (expired at the statement's time), rows recorded, an observation."""

    expire: list[str] = field(default_factory=list)
    record: list[Fact] = field(default_factory=list)
    observe: Observed | None = None
    result: str | None = None  # the fact_id the statement leaves standing for its value


class FactQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

    async def change_fact(
        self, key: tuple[str, str, str], at: datetime, decide: Callable[[list[Fact]], FactPlan]
    ) -> tuple[Fact, FactPlan]:
        """Read the believed rows of `key` (namespace, subject, attribute), let `decide` plan the change, write it
        (at `at`, the statement's recorded time); returns the row left standing for the stated value."""
        async with self.transaction(projected=False) as db:
            rows = await db.execute_fetchall(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE namespace = ? AND subject = ? AND attribute = ? "
                "AND expired_at IS NULL ORDER BY valid_at",
                key,
            )
            plan = decide([fact_row(r) for r in rows])
            await _write(db, plan, at)
            found = await db.execute_fetchall(f"SELECT {FACT_COLUMNS} FROM facts WHERE fact_id = ?", (plan.result,))
            return fact_row(list(found)[0]), plan

    async def log_fact_decisions(self, decisions: Sequence[FactDecision]) -> None:
        """The policy step's decisions on the write path's candidates (fact_decisions, migration 0022)."""
        async with self.transaction(projected=False) as db:
            await db.executemany(
                "INSERT INTO fact_decisions (namespace, turn_id, subject, attribute, value, action, reason, rule, "
                "fact_id, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (d.namespace, d.turn_id, d.subject, d.attribute, d.value, d.action, d.reason, d.rule, d.fact_id,
                     ts(d.decided_at))
                    for d in decisions
                ],
            )  # fmt: skip

    async def fact_decisions(self, turn_id: str) -> list[FactDecision]:
        rows = await self._fetch(
            "SELECT namespace, turn_id, subject, attribute, value, action, reason, rule, fact_id, decided_at "
            "FROM fact_decisions WHERE turn_id = ? ORDER BY decision_id",
            (turn_id,),
        )
        return [
            FactDecision(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], dt(r[9]) or datetime.min) for r in rows
        ]

    async def facts_at(
        self, namespace: str, subject: str | None, *, true_at: datetime, known_at: datetime
    ) -> list[Fact]:
        """The facts believed at `known_at` to be true at `true_at`, by subject and attribute."""
        rows = await self._fetch(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE namespace = ? AND (? IS NULL OR subject = ?) "
            "AND recorded_at <= ? AND (expired_at IS NULL OR expired_at > ?) "
            "AND valid_at <= ? AND (invalid_at IS NULL OR invalid_at > ?) ORDER BY subject, attribute, valid_at",
            (namespace, subject, subject, ts(known_at), ts(known_at), ts(true_at), ts(true_at)),
        )
        return [fact_row(r) for r in rows]

    async def believed_history(self, namespace: str, subject: str, attribute: str) -> list[Fact]:
        """Every value the store now holds for (subject, attribute), each with its interval, in world order."""
        rows = await self._fetch(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE namespace = ? AND subject = ? AND attribute = ? "
            "AND expired_at IS NULL ORDER BY valid_at, recorded_at",
            (namespace, subject, attribute),
        )
        return [fact_row(r) for r in rows]


async def _write(db: aiosqlite.Connection, plan: FactPlan, at: datetime) -> None:
    await db.executemany("UPDATE facts SET expired_at = ? WHERE fact_id = ?", [(ts(at), i) for i in plan.expire])
    await db.executemany(
        f"INSERT INTO facts ({FACT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                f.fact_id,
                f.namespace,
                f.subject,
                f.attribute,
                f.value,
                ts(f.valid_at),
                ts(f.invalid_at),
                ts(f.recorded_at),
                None,
                f.confidence,
                f.observation_count,
                json.dumps(list(f.sources)),
            )
            for f in plan.record
        ],
    )
    if plan.observe is not None:
        seen = plan.observe
        await db.execute(
            "UPDATE facts SET observation_count = observation_count + 1, confidence = max(confidence, ?), "
            "sources = CASE WHEN ? IS NULL OR EXISTS (SELECT 1 FROM json_each(sources) WHERE value = ?) THEN sources "
            "ELSE json_insert(sources, '$[#]', ?) END WHERE fact_id = ?",
            (seen.confidence, seen.source, seen.source, seen.source, seen.fact_id),
        )


def fact_row(r: sqlite3.Row | tuple[Any, ...]) -> Fact:
    valid, recorded = dt(r[5]), dt(r[7])
    assert valid is not None and recorded is not None
    return Fact(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        valid,
        dt(r[6]),
        recorded,
        dt(r[8]),
        float(r[9]),
        int(r[10]),
        tuple(json.loads(r[11])),
    )
