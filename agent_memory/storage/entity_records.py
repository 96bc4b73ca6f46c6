"""The records behind the entity refresh (entity_refresh.py): the memories whose entities their words define, a
batch at a time in memory_id order, and their new entities written with the graph rows that carry them to Kuzu."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.storage.inserts import ENTITY_OF
from agent_memory.storage.rows import ts

EXTRACTED = "generation = 0 AND media = 'text'"  # a turn's, a chunk's, a note's words: what the write path extracted
_GRAPH_ONLY = (  # the vector part stamped done as it is written: the vectors did not change (outbox.py)
    "INSERT INTO outbox (op, memory_id, created_at, scope, vectors_at) VALUES ('upsert_memory', ?, ?, 'all', ?)"
)


@dataclass(frozen=True, slots=True)
class EntityState:
    rules: str
    """The rules every memory up to `cursor` follows."""
    cursor: str | None
    """The last memory done; None: every memory follows `rules`."""


@dataclass(frozen=True, slots=True)
class WordsRead:
    memory_id: str
    content: str
    entities: frozenset[str]


class EntityQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(
            self, *, projected: bool = True, background: bool = False
        ) -> AbstractAsyncContextManager[Any]: ...

    async def entity_state(self) -> EntityState:
        rows = await self._fetch("SELECT rules, cursor FROM entity_refresh WHERE id = 1")
        return EntityState(str(rows[0][0]), rows[0][1])

    async def words_after(self, after: str, limit: int) -> list[WordsRead]:
        """The next `limit` memories after `after` (memory_id order) whose entities their words define, with those
        words and the entities stored."""
        rows = await self._fetch(
            f"SELECT m.memory_id, m.content, (SELECT json_group_array(e.entity) FROM memory_entities AS e "
            f"WHERE e.memory_id = m.memory_id) FROM memories AS m WHERE m.memory_id > ? AND {EXTRACTED} "
            "ORDER BY m.memory_id LIMIT ?",
            (after, limit),
        )
        return [WordsRead(str(r[0]), str(r[1]), frozenset(_names(r[2]))) for r in rows]

    async def words_left(self, after: str) -> int:
        rows = await self._fetch(f"SELECT count(*) FROM memories WHERE memory_id > ? AND {EXTRACTED}", (after,))
        return int(rows[0][0])

    async def refresh_entities(
        self, changed: Sequence[tuple[WordsRead, Sequence[str]]], state: EntityState, now: datetime
    ) -> int:
        """Each memory's new entities (found in the words read) and a graph row for it, and `state`, in one
        transaction. A memory whose words changed since they were read (revised meanwhile: its revision wrote the
        entities of its new words) keeps what it has. Returns how many memories were changed."""
        now_at = ts(now)
        async with self.transaction(background=True) as db:  # nothing a search waits for
            ids = [read.memory_id for read, _ in changed]
            current: dict[str, str] = {}
            for part in range(0, len(ids), 500):  # under SQLite's limit on bound parameters
                some = ids[part : part + 500]
                marks = ",".join("?" * len(some))
                async with db.execute(
                    f"SELECT memory_id, content FROM memories WHERE memory_id IN ({marks})", some
                ) as cur:
                    current.update((str(r[0]), str(r[1])) for r in await cur.fetchall())
            kept = [(read, entities) for read, entities in changed if current.get(read.memory_id) == read.content]
            await db.executemany("DELETE FROM memory_entities WHERE memory_id = ?", [(r.memory_id,) for r, _ in kept])
            await db.executemany(ENTITY_OF, [(r.memory_id, e, r.memory_id) for r, found in kept for e in found])
            await db.executemany(_GRAPH_ONLY, [(r.memory_id, now_at, now_at) for r, _ in kept])
            await db.execute(
                "UPDATE entity_refresh SET rules = ?, cursor = ? WHERE id = 1", (state.rules, state.cursor)
            )
        return len(kept)


def _names(found: str | None) -> list[str]:
    return [str(name) for name in json.loads(found or "[]")]
