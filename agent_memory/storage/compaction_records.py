"""The SQLite side of consolidation: the memories that may be merged, a merge committed on trial, its verdict,
and the lineage that leads a merged memory back to the turns it came from.

Mixed into `SqliteRecords` (records.py), which owns the connections. A merge touches only rows here; the graph
and the vectors follow through the outbox like every other change.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import Compaction, Memory
from agent_memory.storage.inserts import insert_memory
from agent_memory.storage.rows import MEMORY_COLUMNS, memory_row, ts


class CompactionQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

        async def _entities(self, memory_ids: Sequence[str]) -> dict[str, tuple[str, ...]]: ...

        def transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def merge_candidates(self, namespace: str) -> list[tuple[Memory, bool, bytes | None]]:
        """The namespace's active text memories, each with its fast-path flag and its stored vector; digests are
        left out (the digest job rewrites them as their topics grow). Without their entities: grouping and merging
        never read them (a merged memory's own come from its merged text)."""
        rows = await self._fetch(
            f"SELECT {MEMORY_COLUMNS}, fast_path, embedding FROM memories "
            "WHERE namespace = ? AND status = 'active' AND media = 'text' "
            "AND memory_id NOT IN (SELECT memory_id FROM digest_topics WHERE memory_id IS NOT NULL) ORDER BY rowid",
            (namespace,),
        )
        return [(memory_row(r, ()), bool(r[-2]), r[-1]) for r in rows]

    async def commit_merge(
        self,
        merged: Memory,
        embedding: bytes,
        embedding_model: str,
        sources: Sequence[Memory],
        *,
        method: str,
        queries: Sequence[str],
        replay_before: float,
        now: datetime,
    ) -> int:
        """The merged memory (active), its sources marked merged into it, EVOLVED_FROM links and a history row on
        trial, in one transaction. A source changed since it was read (no longer active) aborts the merge: 0."""
        ids = [m.memory_id for m in sources]
        async with self.transaction() as db:
            marks = ",".join("?" * len(ids))
            cursor = await db.execute(
                f"SELECT count(*) FROM memories WHERE memory_id IN ({marks}) AND status = 'active'", ids
            )
            (active,) = await cursor.fetchone()
            if active != len(ids):
                return 0
            await insert_memory(db, merged, embedding, embedding_model)
            await db.execute(
                f"UPDATE memories SET status = 'merged', superseded_by = ?, revision = revision + 1 "
                f"WHERE memory_id IN ({marks})",
                (merged.memory_id, *ids),
            )
            await db.executemany(
                "INSERT OR IGNORE INTO memory_links (source_id, target_id, relation, weight, created_at, reason) "
                "VALUES (?, ?, 'EVOLVED_FROM', 1, ?, 'consolidation')",
                [(merged.memory_id, i, ts(now)) for i in ids],
            )
            cursor = await db.execute(
                "INSERT INTO compaction_history (started_at, merged_into, source_ids, replay_before, accepted, "
                "reason, namespace, status, method, queries) VALUES (?, ?, ?, ?, 0, 'on trial', ?, 'trial', ?, ?)",
                (
                    ts(now),
                    merged.memory_id,
                    json.dumps(ids),
                    replay_before,
                    merged.namespace,
                    method,
                    json.dumps(queries),
                ),
            )
            await _enqueue(db, [merged.memory_id, *ids], now)
            return int(cursor.lastrowid or 0)

    async def accept_merge(self, compaction_id: int, *, replay_after: float, reason: str, now: datetime) -> None:
        async with self.transaction() as db:
            await db.execute(
                "UPDATE compaction_history SET status = 'accepted', accepted = 1, replay_after = ?, reason = ?, "
                "finished_at = ? WHERE compaction_id = ?",
                (replay_after, reason, ts(now), compaction_id),
            )

    async def undo_merge(self, compaction_id: int, *, replay_after: float | None, reason: str, now: datetime) -> None:
        """Put the sources back as they were and retire the merged memory: erased, but kept for inspection with its
        EVOLVED_FROM links (what it was merged from), so the rejected attempt can be read like an accepted one."""
        async with self.transaction() as db:
            cursor = await db.execute(
                "SELECT merged_into, source_ids FROM compaction_history WHERE compaction_id = ?", (compaction_id,)
            )
            merged_into, source_ids = await cursor.fetchone()
            sources = json.loads(source_ids)
            marks = ",".join("?" * len(sources))
            await db.execute(
                f"UPDATE memories SET status = 'active', superseded_by = NULL, revision = revision + 1 "
                f"WHERE memory_id IN ({marks}) AND superseded_by = ?",
                (*sources, merged_into),
            )
            await db.execute(
                "UPDATE memories SET status = 'erased', revision = revision + 1 WHERE memory_id = ?", (merged_into,)
            )
            await db.execute(
                "UPDATE compaction_history SET status = 'rejected', accepted = 0, replay_after = ?, reason = ?, "
                "finished_at = ? WHERE compaction_id = ?",
                (replay_after, reason, ts(now), compaction_id),
            )
            await _enqueue(db, [merged_into, *sources], now)

    async def stored_texts(self, namespace: str | None = None, *, digests: bool = False) -> list[str]:
        """The content of every active memory (of one namespace) other than the digests, what the memory holds
        now; with `digests`, the digests' content alone (they repeat what their sources say)."""
        rows = await self._fetch(
            "SELECT content FROM memories WHERE status = 'active' AND (? IS NULL OR namespace = ?) AND memory_id "
            f"{'' if digests else 'NOT '}IN (SELECT memory_id FROM digest_topics WHERE memory_id IS NOT NULL)",
            (namespace, namespace),
        )
        return [str(r[0]) for r in rows]

    async def merges_on_trial(self) -> list[int]:
        """Merges a stopped run left without a verdict."""
        rows = await self._fetch("SELECT compaction_id FROM compaction_history WHERE status = 'trial'")
        return [int(r[0]) for r in rows]

    async def compactions(self, *, status: str | None = None, limit: int = 100) -> list[Compaction]:
        """The history of merges, newest first."""
        rows = await self._fetch(
            "SELECT compaction_id, namespace, status, merged_into, source_ids, method, queries, replay_before, "
            "replay_after, reason, started_at, finished_at FROM compaction_history "
            "WHERE ? IS NULL OR status = ? ORDER BY compaction_id DESC LIMIT ?",
            (status, status, limit),
        )
        return [_compaction(r) for r in rows]

    async def lineage_turns(self, memory_ids: Sequence[str]) -> dict[str, list[tuple[str, int]]]:
        """For each memory, the (session, turn number) of every turn it came from: its own for a turn's memory,
        its sources' (recursively, through EVOLVED_FROM) for a merged one."""
        found: dict[str, list[tuple[str, int]]] = {}
        for memory_id in dict.fromkeys(memory_ids):
            rows = await self._fetch(
                "WITH RECURSIVE line(id) AS (SELECT ? UNION SELECT l.target_id FROM memory_links l "
                "JOIN line ON l.source_id = line.id WHERE l.relation = 'EVOLVED_FROM') "
                "SELECT m.session_id, m.turn_number FROM line JOIN memories m ON m.memory_id = line.id "
                "WHERE m.generation = 0 AND m.session_id IS NOT NULL AND m.turn_number IS NOT NULL "
                "ORDER BY m.event_at, m.turn_number",
                (memory_id,),
            )
            found[memory_id] = [(str(r[0]), int(r[1])) for r in rows]
        return found


async def _enqueue(db: Any, memory_ids: Sequence[str], now: datetime) -> None:
    await db.executemany(
        "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)",
        [(i, ts(now)) for i in memory_ids],
    )


def _compaction(r: sqlite3.Row) -> Compaction:
    return Compaction(
        compaction_id=int(r[0]),
        namespace=r[1],
        status=r[2],
        merged_into=r[3],
        source_ids=tuple(json.loads(r[4])),
        method=r[5],
        queries=tuple(json.loads(r[6])),
        replay_before=r[7],
        replay_after=r[8],
        reason=r[9],
        started_at=datetime.fromisoformat(r[10]),
        finished_at=datetime.fromisoformat(r[11]) if r[11] else None,
    )
