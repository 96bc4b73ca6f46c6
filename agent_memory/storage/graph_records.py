"""The SQLite side of the graph projection: each memory as the graph holds it (its session predecessor, its
entities, the turn an image was shared in, the link edges it owns), read from the rows that define them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import GraphMemory, Media, Memory, MemoryId, MemoryType


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
        result = []
        for memory in memories.values():
            previous = await self._previous_in_session(memory)
            result.append(
                GraphMemory(
                    memory_id=memory.memory_id,
                    namespace=memory.namespace,
                    memory_type=memory.memory_type,
                    created_at=memory.created_at,
                    session_id=memory.session_id,
                    previous_in_session=previous,
                    entities=memory.entities,
                    attached_to=await self._attached_to(memory),
                    links=links.get(memory.memory_id, ()),
                )
            )
        return result

    async def _attached_to(self, memory: Memory) -> MemoryId | None:
        """For an image shared in a turn: the memory that turn's text became, if it was kept."""
        if memory.media is not Media.IMAGE or memory.source_turn_id is None:
            return None
        rows = await self._fetch(
            "SELECT memory_id FROM memories WHERE source_turn_id = ? AND media = 'text' AND generation = 0 LIMIT 1",
            (memory.source_turn_id,),
        )
        return MemoryId(rows[0][0]) if rows else None

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

    async def _previous_in_session(self, memory: Memory) -> MemoryId | None:
        if memory.session_id is None:
            return None
        rows = await self._fetch(
            "SELECT p.memory_id FROM memories p, memories m WHERE m.memory_id = ? "
            "AND p.namespace = m.namespace AND p.session_id = m.session_id "
            "AND p.turn_number < m.turn_number ORDER BY p.turn_number DESC LIMIT 1",
            (memory.memory_id,),
        )
        return MemoryId(rows[0][0]) if rows else None
