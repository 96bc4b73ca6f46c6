"""The SQLite side of the graph projection: each memory as the graph holds it (its session predecessor, its
entities, the turn an image was shared in, the link edges it owns), read from the rows that define them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import (
    Media,
    Memory,
    MemoryId,
    MemoryType,
)
from agent_memory.projection_models import GraphMemory

ID_CHUNK = 500  # ids a query names at most (SQLite allows 32,766 parameters; other queries here use 500 too)


class GraphQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords and its other mixins

        async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

        async def get_memories(self, memory_ids: Sequence[str]) -> dict[str, Memory]: ...

        async def links_from(
            self, memory_ids: Sequence[str] | None
        ) -> dict[str, tuple[tuple[str, str, float, datetime], ...]]: ...

    async def graph_memories(self, memory_ids: Sequence[str]) -> list[GraphMemory]:
        memories = await self.get_memories(memory_ids)
        links = await self.links_from(list(memories))
        previous = await self._previous_in_session(list(memories))
        attached = await self._attached_to([m for m in memories.values() if m.media is Media.IMAGE])
        return [
            GraphMemory(
                memory_id=memory.memory_id,
                namespace=memory.namespace,
                memory_type=memory.memory_type,
                created_at=memory.created_at,
                session_id=memory.session_id,
                previous_in_session=previous.get(memory.memory_id) if memory.session_id is not None else None,
                entities=memory.entities,
                attached_to=attached.get(memory.memory_id),
                links=links.get(memory.memory_id, ()),
            )
            for memory in memories.values()
        ]

    async def _previous_in_session(self, memory_ids: Sequence[str]) -> dict[str, MemoryId]:
        """The memory just before each one in its session (any media), where there is one: one query a few hundred
        memories, not one a memory."""
        found: dict[str, MemoryId] = {}
        for start in range(0, len(memory_ids), ID_CHUNK):
            chunk = memory_ids[start : start + ID_CHUNK]
            rows = await self._fetch(
                "SELECT m.memory_id, (SELECT p.memory_id FROM memories p WHERE p.namespace = m.namespace "
                "AND p.session_id = m.session_id AND p.turn_number < m.turn_number "
                "ORDER BY p.turn_number DESC LIMIT 1) FROM memories m "
                f"WHERE m.memory_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            found.update((str(r[0]), MemoryId(r[1])) for r in rows if r[1] is not None)
        return found

    async def _attached_to(self, images: Sequence[Memory]) -> dict[str, MemoryId]:
        """For each image shared in a turn: the memory that turn's text became, if it was kept."""
        found: dict[str, MemoryId] = {}
        for image in images:
            if image.source_turn_id is None:
                continue
            rows = await self._fetch(
                "SELECT memory_id FROM memories WHERE source_turn_id = ? AND media = 'text' AND generation = 0 LIMIT 1",
                (image.source_turn_id,),
            )
            if rows:
                found[image.memory_id] = MemoryId(rows[0][0])
        return found

    async def all_graph_memories(self) -> list[GraphMemory]:
        """Every memory as the graph projects it, in one pass (a window function finds NEXT; images stand outside
        the NEXT chain and link to their turn's memory instead)."""
        rows = await self._fetch(
            "SELECT m.memory_id, m.namespace, m.memory_type, m.created_at, m.session_id, "
            "CASE WHEN m.media = 'text' THEN "
            "LAG(m.memory_id) OVER (PARTITION BY m.namespace, m.session_id, m.media ORDER BY m.turn_number) END, "
            "CASE WHEN m.media = 'image' THEN (SELECT t.memory_id FROM memories t WHERE t.source_turn_id = "
            "m.source_turn_id AND t.media = 'text' AND t.generation = 0 LIMIT 1) END FROM memories m"
        )
        links = await self.links_from(None)
        entity_rows = await self._fetch("SELECT memory_id, entity FROM memory_entities ORDER BY entity")
        entities: dict[str, list[str]] = {}
        for memory_id, entity in entity_rows:
            entities.setdefault(memory_id, []).append(entity)
        return [
            GraphMemory(
                memory_id=MemoryId(r[0]),
                namespace=r[1],
                memory_type=MemoryType(r[2]),
                created_at=datetime.fromisoformat(r[3]),
                session_id=r[4],
                previous_in_session=MemoryId(r[5]) if r[4] is not None and r[5] else None,
                entities=tuple(entities.get(r[0], ())),
                attached_to=MemoryId(r[6]) if r[6] else None,
                links=links.get(r[0], ()),
            )
            for r in rows
        ]
