"""The SQLite side of the sleep jobs: pages of memories to score, score and tier updates (with the outbox rows a
tier change needs, since the tier is in the vector payload), and the job report rows."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.models import JobRun, Tier
from agent_memory.storage.rows import dt, ts


@dataclass(frozen=True, slots=True)
class DecayRow:
    """What decay and tiering need of one active memory."""

    rowid: int
    memory_id: str
    event_at: datetime
    last_accessed_at: datetime | None
    access_count: int
    arousal: float
    surprise: float
    generation: int
    tier: Tier
    decay_score: float


class SleepQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(
            self, *, projected: bool = True, background: bool = False
        ) -> AbstractAsyncContextManager[Any]: ...

    async def decay_page(self, after_rowid: int, limit: int) -> list[DecayRow]:
        """The next `limit` active memories after `after_rowid`, in rowid order: the jobs walk the store in pages."""
        rows = await self._fetch(
            "SELECT rowid, memory_id, event_at, last_accessed_at, access_count, arousal, surprise, generation, tier, "
            "decay_score FROM memories WHERE status = 'active' AND rowid > ? ORDER BY rowid LIMIT ?",
            (after_rowid, limit),
        )
        return [
            DecayRow(
                int(r[0]),
                str(r[1]),
                datetime.fromisoformat(r[2]),
                dt(r[3]),
                int(r[4]),
                float(r[5]),
                float(r[6]),
                int(r[7]),
                Tier(r[8]),
                float(r[9]),
            )
            for r in rows
        ]

    async def set_decay_scores(self, scores: Sequence[tuple[str, float]]) -> None:
        async with self.transaction() as db:
            await db.executemany("UPDATE memories SET decay_score = ? WHERE memory_id = ?", [(s, m) for m, s in scores])

    async def set_tiers(self, tiers: Sequence[tuple[str, Tier]], *, now: datetime) -> None:
        """New tiers, and an outbox row each so the vector payload (which carries the tier) follows; the graph
        holds no tier, so the row asks for the payload only."""
        async with self.transaction() as db:
            await db.executemany("UPDATE memories SET tier = ? WHERE memory_id = ?", [(t.value, m) for m, t in tiers])
            await db.executemany(
                "INSERT INTO outbox (op, memory_id, created_at, scope) VALUES ('upsert_memory', ?, ?, 'payload')",
                [(m, ts(now)) for m, _ in tiers],
            )

    async def payload_states(self, memory_ids: Sequence[str]) -> list[tuple[str, str, str, float, bool, bool, bool]]:
        """(memory_id, tier, status, event time in seconds since the epoch, has a text vector, has an image vector,
        has a context vector) of each memory still there."""
        marks = ",".join("?" * len(memory_ids))
        rows = await self._fetch(
            "SELECT memory_id, tier, status, event_at, embedding IS NOT NULL, image_embedding IS NOT NULL, "
            "EXISTS (SELECT 1 FROM context_vectors AS c WHERE c.memory_id = m.memory_id) FROM memories AS m "
            f"WHERE memory_id IN ({marks})",
            memory_ids,
        )
        return [
            (
                str(r[0]),
                str(r[1]),
                str(r[2]),
                datetime.fromisoformat(r[3]).timestamp(),
                bool(r[4]),
                bool(r[5]),
                bool(r[6]),
            )
            for r in rows
        ]

    async def searched_payloads(self) -> dict[str, dict[str, Any]]:
        """The payload fields a search filters on (namespace, status, tier, event time) of every memory, as
        SQLite has them: what each of its vector points must carry (`agent-memory doctor`)."""
        rows = await self._fetch("SELECT memory_id, namespace, status, tier, event_at FROM memories")

        def payloads() -> dict[str, dict[str, Any]]:
            return {
                str(r[0]): {
                    "namespace": r[1],
                    "status": r[2],
                    "tier": r[3],
                    "event_at": datetime.fromisoformat(r[4]).timestamp(),
                }
                for r in rows
            }

        return await asyncio.to_thread(payloads)  # 100k rows: about 0.15 s, off the event loop

    async def tier_counts(self) -> dict[str, int]:
        rows = await self._fetch("SELECT tier, count(*) FROM memories WHERE status = 'active' GROUP BY tier")
        return {str(r[0]): int(r[1]) for r in rows}

    # ----- keyword reweighting -----------------------------------------------------------------------

    async def memory_namespaces(self) -> list[str]:
        rows = await self._fetch("SELECT DISTINCT namespace FROM memories WHERE status = 'active'")
        return [str(r[0]) for r in rows]

    async def keyword_rows(self, namespace: str) -> list[tuple[str, str | None, int | None, list[str]]]:
        """(memory id, session, turn number, keywords) of the namespace's active memories."""
        rows = await self._fetch(
            "SELECT memory_id, session_id, turn_number, keywords FROM memories WHERE namespace = ? "
            "AND status = 'active'",
            (namespace,),
        )
        return [(str(r[0]), r[1], r[2], list(json.loads(r[3]))) for r in rows]

    async def entity_members(self, namespace: str) -> dict[str, list[str]]:
        """Entity -> the active memories of the namespace that mention it."""
        rows = await self._fetch(
            "SELECT e.entity, e.memory_id FROM memory_entities e JOIN memories m ON m.memory_id = e.memory_id "
            "WHERE m.namespace = ? AND m.status = 'active'",
            (namespace,),
        )
        members: dict[str, list[str]] = {}
        for entity, memory_id in rows:
            members.setdefault(str(entity), []).append(str(memory_id))
        return members

    async def replace_keyword_weights(
        self, namespace: str, weights: Sequence[tuple[str, float, int, int]], *, now: datetime
    ) -> None:
        """The namespace's weights, all at once: (word, weight, memories, connected)."""
        async with self.transaction() as db:
            await db.execute("DELETE FROM keyword_weights WHERE namespace = ?", (namespace,))
            await db.executemany(
                "INSERT INTO keyword_weights (namespace, word, weight, memories, connected, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(namespace, w, weight, n, c, ts(now)) for w, weight, n, c in weights],
            )

    # ----- link edges --------------------------------------------------------------------------------

    async def add_links(self, links: Sequence[tuple[str, str, str, float, str]], *, now: datetime) -> int:
        """(source, target, relation, weight, reason) rows, and an outbox row per source so the graph gets them;
        a link that exists already is left as it is. Returns how many were new."""
        async with self.transaction() as db:
            before = db.total_changes
            await db.executemany(
                "INSERT OR IGNORE INTO memory_links (source_id, target_id, relation, weight, created_at, reason) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(s, t, rel, w, ts(now), why) for s, t, rel, w, why in links],
            )
            added = db.total_changes - before
            await db.executemany(
                "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)",
                [(source, ts(now)) for source in dict.fromkeys(s for s, *_ in links)],
            )
            return int(added)

    async def links_from(
        self, memory_ids: Sequence[str] | None
    ) -> dict[str, tuple[tuple[str, str, float, datetime], ...]]:
        """The links these memories own (all links when None): source -> ((target, relation, weight, at), ...)."""
        columns = "SELECT source_id, target_id, relation, weight, created_at FROM memory_links"
        if memory_ids is None:
            rows = await self._fetch(columns)
        else:
            marks = ",".join("?" * len(memory_ids))
            rows = await self._fetch(f"{columns} WHERE source_id IN ({marks})", memory_ids)
        found: dict[str, list[tuple[str, str, float, datetime]]] = {}
        for source, target, relation, weight, at in rows:
            found.setdefault(str(source), []).append(
                (str(target), str(relation), float(weight), datetime.fromisoformat(at))
            )
        return {k: tuple(sorted(v)) for k, v in found.items()}

    async def link_neighbours(self, memory_id: str) -> list[str]:
        """The memories joined to this one by a link edge, either way."""
        rows = await self._fetch(
            "SELECT target_id FROM memory_links WHERE source_id = ? UNION SELECT source_id FROM memory_links "
            "WHERE target_id = ?",
            (memory_id, memory_id),
        )
        return [str(r[0]) for r in rows]

    async def dream_pool(self, namespace: str) -> list[tuple[str, str | None]]:
        """(memory id, session) of the namespace's active text memories that have a vector."""
        rows = await self._fetch(
            "SELECT memory_id, session_id FROM memories WHERE namespace = ? AND status = 'active' "
            "AND media = 'text' AND embedding IS NOT NULL ORDER BY rowid",
            (namespace,),
        )
        return [(str(r[0]), r[1]) for r in rows]

    async def linked_pairs(self, namespace: str) -> set[frozenset[str]]:
        """Every pair of the namespace's memories joined by a link edge, either way."""
        rows = await self._fetch(
            "SELECT l.source_id, l.target_id FROM memory_links l JOIN memories m ON m.memory_id = l.source_id "
            "WHERE m.namespace = ?",
            (namespace,),
        )
        return {frozenset((str(a), str(b))) for a, b in rows}

    # ----- the outbox around an index build --------------------------------------------------------

    async def index_moves(self) -> dict[str, int]:
        """Per vector collection, the points a payload change moved out of its HNSW index since the index was last
        built: Qdrant still counts them as indexed (sleep/index.py)."""
        return {str(r[0]): int(r[1]) for r in await self._fetch("SELECT collection, moved FROM vector_index_moves")}

    async def index_built(self, collection: str, moved: int) -> None:
        """The index of `collection` was built from a copy taken when `moved` points had been moved: those are in
        it now (moves counted since stay counted)."""
        async with self.transaction(projected=False) as db:  # no work for the projector
            await db.execute(
                "UPDATE vector_index_moves SET moved = max(0, moved - ?) WHERE collection = ?", (moved, collection)
            )

    async def outbox_mark(self) -> int:
        """The newest outbox row's id: what a copy of the projections taken now has seen."""
        rows = await self._fetch("SELECT coalesce(max(outbox_id), 0) FROM outbox")
        return int(rows[0][0])

    async def requeue_after(self, mark: int, *, now: datetime) -> int:
        """Project the vectors of every memory touched after `mark` again (the projector works from SQLite's current
        state, so a replay is exact): after the vector shard was swapped for a copy taken at `mark` (the graph was
        not). Returns how many."""
        async with self.transaction() as db:
            cursor = await db.execute(
                "INSERT INTO outbox (op, memory_id, created_at, scope) SELECT 'upsert_memory', memory_id, ?, 'vectors' "
                "FROM (SELECT DISTINCT memory_id FROM outbox WHERE outbox_id > ?)",
                (ts(now), mark),
            )
            return int(cursor.rowcount or 0)

    # ----- job reports -------------------------------------------------------------------------------

    async def fail_interrupted_jobs(self, job: str, *, now: datetime) -> int:
        """Runs of `job` still marked running when a new one starts were cut off (one process owns the store and
        runs one of each job at a time): mark them failed, so the history does not show them running forever."""
        async with self.transaction() as db:
            cursor = await db.execute(
                "UPDATE job_runs SET status = 'failed', finished_at = ?, error = ? WHERE job = ? AND status = 'running'",
                (ts(now), "interrupted: the process stopped while it ran", job),
            )
            return int(cursor.rowcount or 0)

    async def start_job(self, job: str, *, now: datetime) -> int:
        async with self.transaction() as db:
            cursor = await db.execute("INSERT INTO job_runs (job, started_at) VALUES (?, ?)", (job, ts(now)))
            return int(cursor.lastrowid or 0)

    async def finish_job(self, run_id: int, *, now: datetime, counts: dict[str, Any], error: str | None = None) -> None:
        async with self.transaction() as db:
            await db.execute(
                "UPDATE job_runs SET finished_at = ?, status = ?, counts = ?, error = ? WHERE run_id = ?",
                (ts(now), "failed" if error else "ok", json.dumps(counts, sort_keys=True), error, run_id),
            )

    async def job_runs(self, job: str | None = None, *, limit: int = 50) -> list[JobRun]:
        """The latest runs, newest first; of one job when `job` is given."""
        where, params = ("WHERE job = ?", (job, limit)) if job else ("", (limit,))
        rows = await self._fetch(
            f"SELECT run_id, job, started_at, finished_at, status, counts, error FROM job_runs {where} "
            "ORDER BY run_id DESC LIMIT ?",
            params,
        )
        return [
            JobRun(
                int(r[0]),
                str(r[1]),
                datetime.fromisoformat(r[2]),
                dt(r[3]),
                str(r[4]),
                json.loads(r[5]),
                r[6],
            )
            for r in rows
        ]
