"""The projector's queue in SQLite: outbox rows still to apply to the graph and the vectors, and memories whose
keywords are still to be derived. Mixed into `SqliteRecords` (records.py), which owns the connections."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import MemoryId
from agent_memory.projection_models import OutboxItem
from agent_memory.storage.rows import ts

# Every read drains the projector, which asks this first: it must cost nothing when nothing is pending, so it walks
# the pending rows (in id order, which is creation order) and never the memories (ORDER BY m.rowid scanned them
# all: 16 ms a read at 10k memories).
PENDING_KEYWORDS = (
    "SELECT p.memory_id, m.content FROM pending_keywords AS p JOIN memories AS m USING (memory_id) "
    "ORDER BY p.memory_id LIMIT ?"
)


class OutboxQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(
            self, *, projected: bool = True, background: bool = False
        ) -> AbstractAsyncContextManager[Any]: ...

    async def pending_outbox(self, limit: int, *, vectors: bool = False) -> list[OutboxItem]:
        """The oldest rows not yet done; with `vectors`, only those whose vector part is not applied yet."""
        pending = "vectors_at IS NULL AND done_at IS NULL" if vectors else "done_at IS NULL"
        rows = await self._fetch(
            f"SELECT outbox_id, op, memory_id, attempts, scope, vectors_at IS NOT NULL FROM outbox WHERE {pending} "
            "ORDER BY outbox_id LIMIT ?",
            (limit,),
        )
        return [OutboxItem(r[0], r[1], MemoryId(r[2]), r[3], r[4], bool(r[5])) for r in rows]

    async def has_pending_for_reads(self) -> bool:
        """Whether an outbox row's vector part or a memory's keywords wait: what a read applies before it searches."""
        rows = await self._fetch(
            "SELECT EXISTS (SELECT 1 FROM outbox WHERE vectors_at IS NULL AND done_at IS NULL) "
            "OR EXISTS (SELECT 1 FROM pending_keywords)"
        )
        return bool(rows[0][0])

    async def has_pending(self) -> bool:
        """Whether any outbox row or memory's keywords wait for the projector: one indexed probe per table, asked by
        every read before it drains."""
        rows = await self._fetch(
            "SELECT EXISTS (SELECT 1 FROM outbox WHERE done_at IS NULL) OR EXISTS (SELECT 1 FROM pending_keywords)"
        )
        return bool(rows[0][0])

    async def keywords_pending(self, memory_id: str) -> bool:
        return bool(await self._fetch("SELECT 1 FROM pending_keywords WHERE memory_id = ?", (memory_id,)))

    async def has_projected_memories(self) -> bool:
        """Whether a memory exists that no pending outbox row still has to project: one a projection must hold.
        (A projection that is empty while every memory still waits in the outbox was not lost; it lags.)"""
        rows = await self._fetch(
            "SELECT 1 FROM memories WHERE memory_id NOT IN (SELECT memory_id FROM outbox WHERE done_at IS NULL) LIMIT 1"
        )
        return bool(rows)

    async def pending_outbox_count(self) -> int:
        rows = await self._fetch("SELECT count(*) FROM outbox WHERE done_at IS NULL")
        return int(rows[0][0])

    async def pending_keywords(self, limit: int) -> list[tuple[str, str]]:
        """(memory id, content) of memories whose keywords are still to be derived, oldest first (ids sort by
        creation)."""
        rows = await self._fetch(PENDING_KEYWORDS, (limit,))
        return [(r[0], r[1]) for r in rows]

    async def set_keywords(self, found: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        """Write derived keywords, each (memory id, the content they came from, keywords), and clear the pending
        rows; a memory whose content changed since (an erasure) keeps what it has. A search does not wait for this
        write (`background`): it is the projector's own result, applied by the search's catch-up or before it."""
        async with self.transaction(background=True) as db:
            await db.executemany(
                "UPDATE memories SET keywords = ? WHERE memory_id = ? AND content = ?",
                [(json.dumps(list(keywords)), memory_id, content) for memory_id, content, keywords in found],
            )
            await db.executemany("DELETE FROM pending_keywords WHERE memory_id = ?", [(m,) for m, _, _ in found])

    async def mark_outbox(
        self,
        done: Sequence[int],
        *,
        now: datetime,
        error: str | None = None,
        vectors_only: bool = False,
        moved: Mapping[str, int] | None = None,
    ) -> None:
        """Stamp rows applied (`vectors_only`: their vector part alone), or count a failed attempt with `error`;
        `moved` adds to each collection's count of points moved out of its HNSW index (sleep/index.py). It makes
        no work for the projector, so it does not count in `commits`: background work that waits for the writers
        to pause (the vector upgrade, the context vectors) is not woken by its own projection."""
        async with self.transaction(projected=False) as db:
            if moved:
                await db.executemany(
                    "INSERT INTO vector_index_moves (collection, moved) VALUES (?, ?) "
                    "ON CONFLICT (collection) DO UPDATE SET moved = moved + excluded.moved",
                    [(collection, count) for collection, count in moved.items() if count],
                )
            if error is None and vectors_only:
                await db.executemany(
                    "UPDATE outbox SET vectors_at = ? WHERE outbox_id = ?", [(ts(now), i) for i in done]
                )
            elif error is None:
                await db.executemany(
                    "UPDATE outbox SET done_at = ?, vectors_at = coalesce(vectors_at, ?), attempts = attempts + 1 "
                    "WHERE outbox_id = ?",
                    [(ts(now), ts(now), i) for i in done],
                )
            else:
                await db.executemany(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE outbox_id = ?",
                    [(error[:2000], i) for i in done],
                )
