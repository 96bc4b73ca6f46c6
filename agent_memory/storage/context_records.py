"""The records behind context vectors (context_vectors.py): which turn memories need one, the neighbouring turns
to read it from, and the vectors themselves, written with their outbox rows in one transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import LogPosition, Memory
from agent_memory.storage.rows import ts

# A turn memory's neighbours are the turns logged just before and after its turn in its session, kept or not. The
# basis is the memory's revision and both neighbours' turn ids: a new next turn, an update or an erased neighbour
# changes it. Notes stand alone (their neighbours are other notes, not context), and so do images, digests and
# the turn of a session of one turn (its context vector would be its own).
_WANTED = """
WITH around AS (
    SELECT turn_id,
           LAG(turn_id) OVER (PARTITION BY namespace, session_id ORDER BY turn_number) AS previous_id,
           LEAD(turn_id) OVER (PARTITION BY namespace, session_id ORDER BY turn_number) AS next_id
    FROM turns
)
SELECT m.memory_id, m.revision || '|' || coalesce(a.previous_id, '') || '|' || coalesce(a.next_id, '') AS basis,
       a.previous_id, a.next_id
FROM memories AS m JOIN around AS a ON a.turn_id = m.source_turn_id
LEFT JOIN context_vectors AS c ON c.memory_id = m.memory_id
WHERE m.generation = 0 AND m.media = 'text' AND m.status = 'active' AND m.embedding IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM notes AS n WHERE n.memory_id = m.memory_id)
  AND (a.previous_id IS NOT NULL OR a.next_id IS NOT NULL)
  AND (:max_chars = 0 OR length(m.content) <= :max_chars)
  AND (c.basis IS NULL OR c.basis != m.revision || '|' || coalesce(a.previous_id, '') || '|' || coalesce(a.next_id, ''))
ORDER BY m.rowid
"""


@dataclass(frozen=True, slots=True)
class ContextWork:
    """One memory whose context vector is missing or out of date, and where its neighbouring turns are logged."""

    memory_id: str
    basis: str
    content: str
    previous: LogPosition | None
    next: LogPosition | None


class ContextQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

    async def context_wanted(self, max_chars: int = 0) -> list[tuple[str, str, str | None, str | None]]:
        """(memory id, basis, previous turn id, next turn id) of every memory up to `max_chars` long (0: any) whose
        context vector is missing or was computed from other neighbours or another revision, oldest first. One
        pass over the turns."""
        return [(str(r[0]), str(r[1]), r[2], r[3]) for r in await self._fetch(_WANTED, {"max_chars": max_chars})]

    async def context_work(self, wanted: Sequence[tuple[str, str, str | None, str | None]]) -> list[ContextWork]:
        """The content of each wanted memory and the log positions of its neighbouring turns."""
        if not wanted:
            return []
        ids = [w[0] for w in wanted]
        turn_ids = sorted({t for w in wanted for t in w[2:] if t})
        marks = ",".join("?" * len(ids))
        contents = {
            str(r[0]): str(r[1])
            for r in await self._fetch(f"SELECT memory_id, content FROM memories WHERE memory_id IN ({marks})", ids)
        }
        positions: dict[str, LogPosition] = {}
        for start in range(0, len(turn_ids), 500):
            chunk = turn_ids[start : start + 500]
            rows = await self._fetch(
                f"SELECT turn_id, segment, offset, length FROM turns WHERE turn_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            positions.update({str(r[0]): LogPosition(int(r[1]), int(r[2]), int(r[3])) for r in rows})
        return [
            ContextWork(
                memory_id,
                basis,
                contents[memory_id],
                positions.get(previous) if previous else None,
                positions.get(following) if following else None,
            )
            for memory_id, basis, previous, following in wanted
            if memory_id in contents
        ]

    async def set_context_vectors(self, computed: Iterable[tuple[str, str, bytes]], *, now: datetime) -> int:
        """Store (memory id, basis, float32 vector) rows and queue each memory's vectors for the projector, in one
        transaction; a memory gone (erased) meanwhile is skipped. Returns how many were stored."""
        rows = list(computed)
        stored = 0
        async with self.transaction() as db:
            for memory_id, basis, blob in rows:
                cursor = await db.execute(
                    "INSERT INTO context_vectors (memory_id, vector, basis, computed_at) "
                    "SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM memories WHERE memory_id = ?) "
                    "ON CONFLICT (memory_id) DO UPDATE SET vector = excluded.vector, basis = excluded.basis, "
                    "computed_at = excluded.computed_at",
                    (memory_id, blob, basis, ts(now), memory_id),
                )
                if cursor.rowcount:
                    stored += 1
                    await db.execute(
                        "INSERT INTO outbox (op, memory_id, created_at, scope) VALUES ('upsert_memory', ?, ?, 'vectors')",
                        (memory_id, ts(now)),
                    )
        return stored

    async def drop_long_context(self, max_chars: int, *, now: datetime) -> int:
        """Delete the context vectors of memories now longer than `max_chars` (an update lengthened them, or the
        setting was lowered) and queue their points' removal; returns how many."""
        if max_chars <= 0:
            return 0
        rows = await self._fetch(
            "SELECT c.memory_id FROM context_vectors AS c JOIN memories AS m USING (memory_id) "
            "WHERE length(m.content) > ?",
            (max_chars,),
        )
        ids = [str(r[0]) for r in rows]
        if not ids:
            return 0
        async with self.transaction() as db:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                await db.execute(
                    f"DELETE FROM context_vectors WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk
                )
            await db.executemany(
                "INSERT INTO outbox (op, memory_id, created_at, scope) VALUES ('upsert_memory', ?, ?, 'vectors')",
                [(memory_id, ts(now)) for memory_id in ids],
            )
        return len(ids)

    async def stored_context_vectors(self, memories: Mapping[str, Memory]) -> dict[str, tuple[bytes, Memory]]:
        """The context vector of each of `memories` that has one, with the memory (for its payload)."""
        found: dict[str, tuple[bytes, Memory]] = {}
        ids = list(memories)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = await self._fetch(
                f"SELECT memory_id, vector FROM context_vectors WHERE memory_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            found.update({str(r[0]): (bytes(r[1]), memories[str(r[0])]) for r in rows})
        return found

    async def context_ids(self) -> set[str]:
        """The memories with a context vector: what the context collection must hold."""
        return {str(r[0]) for r in await self._fetch("SELECT memory_id FROM context_vectors")}

    async def context_counts(self, max_chars: int = 0) -> tuple[int, int]:
        """(memories with a context vector, memories waiting for one)."""
        have = await self._fetch("SELECT count(*) FROM context_vectors")
        return int(have[0][0]), len(await self.context_wanted(max_chars))
