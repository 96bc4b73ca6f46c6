"""SQLite records through aiosqlite: the truth for what is remembered.

One writer connection (every write transaction is `BEGIN IMMEDIATE`, serialised by a lock) and one reader
connection; WAL lets the reader run beside the writer. Migrations are numbered SQL files applied in order.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from agent_memory.errors import ClosedError, MemoryNotFound, StorageError
from agent_memory.models import (
    GraphMemory,
    LogPosition,
    Media,
    Memory,
    MemoryId,
    MemoryType,
    OutboxItem,
    TurnRow,
)
from agent_memory.storage.outcome_records import OutcomeQueries
from agent_memory.storage.recall_records import RecallQueries
from agent_memory.storage.rows import (
    MEMORY_COLUMNS,
    ImageCommit,
    TurnCommit,
    memory_row,
    migrations,
    ts,
    turn_row,
)
from agent_memory.storage.sleep_records import SleepQueries


class SqliteRecords(RecallQueries, SleepQueries, OutcomeQueries):
    def __init__(self, writer: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        self._writer, self._reader = writer, reader
        self._write_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, path: Path) -> SqliteRecords:
        try:
            writer = await aiosqlite.connect(path, isolation_level=None)
            await _configure(writer)
            await _migrate(writer)
            reader = await aiosqlite.connect(path, isolation_level=None)
            await _configure(reader)
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot open the records database {path}: {exc}") from exc
        return cls(writer, reader)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._reader.close()
            await self._writer.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        if self._closed:
            raise ClosedError("SqliteRecords")
        async with self._write_lock:
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
                yield self._writer
                await self._writer.execute("COMMIT")
            except BaseException as exc:
                await self._writer.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"SQLite write failed: {exc}") from exc
                raise

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        if self._closed:
            raise ClosedError("SqliteRecords")
        try:
            async with self._reader.execute(sql, params) as cursor:
                return list(await cursor.fetchall())
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite read failed: {exc}") from exc

    # ----- turns -------------------------------------------------------------------------------------

    async def turn_exists(self, namespace: str, session_id: str, turn_number: int) -> bool:
        rows = await self._fetch(
            "SELECT 1 FROM turns WHERE namespace = ? AND session_id = ? AND turn_number = ?",
            (namespace, session_id, turn_number),
        )
        return bool(rows)

    async def previous_content(self, namespace: str, session_id: str, turn_number: int) -> str | None:
        """The content of the memory just before `turn_number` in its session, if any."""
        rows = await self._fetch(
            "SELECT content FROM memories WHERE namespace = ? AND session_id = ? AND turn_number < ? "
            "AND generation = 0 ORDER BY turn_number DESC LIMIT 1",
            (namespace, session_id, turn_number),
        )
        return str(rows[0][0]) if rows else None

    async def previous_turn(self, namespace: str, session_id: str, turn_number: int) -> TurnRow | None:
        """The turn logged just before `turn_number` in its session, kept or not."""
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns WHERE namespace = ? AND session_id = ? AND turn_number < ? ORDER BY turn_number DESC LIMIT 1",
            (namespace, session_id, turn_number),
        )
        return turn_row(rows[0]) if rows else None

    async def session_vectors(self, namespace: str, session_id: str, turn_number: int, limit: int) -> list[bytes]:
        """The stored vectors of the `limit` memories just before `turn_number` in its session, nearest first."""
        rows = await self._fetch(
            "SELECT embedding FROM memories WHERE namespace = ? AND session_id = ? AND turn_number < ? "
            "AND generation = 0 AND embedding IS NOT NULL ORDER BY turn_number DESC LIMIT ?",
            (namespace, session_id, turn_number, limit),
        )
        return [bytes(r[0]) for r in rows]

    async def turn_keys(self, namespace: str) -> set[tuple[str, int]]:
        """(session id, turn number) of every turn logged in `namespace`."""
        rows = await self._fetch("SELECT session_id, turn_number FROM turns WHERE namespace = ?", (namespace,))
        return {(r[0], int(r[1])) for r in rows}

    async def known_turn_ids(self, turn_ids: Iterable[str]) -> set[str]:
        ids = list(turn_ids)
        known: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = await self._fetch(f"SELECT turn_id FROM turns WHERE turn_id IN ({marks})", chunk)
            known.update(r[0] for r in rows)
        return known

    async def last_position(self) -> LogPosition | None:
        rows = await self._fetch("SELECT segment, offset, length FROM turns ORDER BY segment DESC, offset DESC LIMIT 1")
        return LogPosition(*rows[0]) if rows else None

    async def turns(self) -> list[TurnRow]:
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns ORDER BY segment, offset"
        )
        return [turn_row(r) for r in rows]

    async def get_turn(self, turn_id: str) -> TurnRow | None:
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns WHERE turn_id = ?",
            (turn_id,),
        )
        return turn_row(rows[0]) if rows else None

    async def commit_turns(self, commits: Sequence[TurnCommit], *, now: datetime) -> None:
        """Turn rows, memories, entities, decisions and outbox rows: all or nothing."""
        async with self.transaction() as db:
            for commit in commits:
                await _insert_turn(db, commit, now)

    async def commit_images(self, images: Sequence[ImageCommit], *, now: datetime) -> None:
        """Image memories not attached to a turn, with their outbox rows: all or nothing."""
        async with self.transaction() as db:
            for image in images:
                await _insert_image(db, image, now)

    # ----- memories ----------------------------------------------------------------------------------

    async def find_memory(self, memory_id: str) -> Memory | None:
        found = await self.get_memories([memory_id])
        return found.get(memory_id)

    async def get_memory(self, memory_id: str) -> Memory:
        memory = await self.find_memory(memory_id)
        if memory is None:
            raise MemoryNotFound(memory_id)
        return memory

    async def get_memories(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        found: dict[str, Memory] = {}
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = await self._fetch(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE memory_id IN ({marks})", chunk)
            entities = await self._entities(chunk)
            for row in rows:
                found[row[0]] = memory_row(row, entities.get(row[0], ()))
        return found

    async def _entities(self, memory_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        marks = ",".join("?" * len(memory_ids))
        rows = await self._fetch(
            f"SELECT memory_id, entity FROM memory_entities WHERE memory_id IN ({marks}) ORDER BY entity",
            memory_ids,
        )
        grouped: dict[str, list[str]] = {}
        for memory_id, entity in rows:
            grouped.setdefault(memory_id, []).append(entity)
        return {k: tuple(v) for k, v in grouped.items()}

    async def has_memories(self) -> bool:
        return bool(await self._fetch("SELECT 1 FROM memories LIMIT 1"))

    async def memory_ids(self) -> set[str]:
        return {r[0] for r in await self._fetch("SELECT memory_id FROM memories")}

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

    async def embeddings(self, memory_ids: Sequence[str], *, image: bool = False) -> dict[str, tuple[bytes, Memory]]:
        """The stored vectors of these memories, with the memories: the text ones, or with `image` the CLIP ones.
        A memory without that vector (an image with no caption has no text vector) is left out."""
        return await self.stored_vectors(await self.get_memories(memory_ids), image=image)

    async def stored_vectors(
        self, memories: Mapping[str, Memory], *, image: bool = False
    ) -> dict[str, tuple[bytes, Memory]]:
        column = "image_embedding" if image else "embedding"
        found: dict[str, tuple[bytes, Memory]] = {}
        ids = list(memories)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = await self._fetch(
                f"SELECT memory_id, {column} FROM memories WHERE memory_id IN ({marks}) AND {column} IS NOT NULL",
                chunk,
            )
            found.update({r[0]: (bytes(r[1]), memories[r[0]]) for r in rows})
        return found

    async def embedded_ids(self, *, image: bool = False) -> set[str]:
        """The memories that have a text vector (or with `image`, a CLIP vector): what each collection must hold."""
        column = "image_embedding" if image else "embedding"
        return {r[0] for r in await self._fetch(f"SELECT memory_id FROM memories WHERE {column} IS NOT NULL")}

    # ----- outbox ------------------------------------------------------------------------------------

    async def pending_outbox(self, limit: int) -> list[OutboxItem]:
        rows = await self._fetch(
            "SELECT outbox_id, op, memory_id, attempts FROM outbox WHERE done_at IS NULL ORDER BY outbox_id LIMIT ?",
            (limit,),
        )
        return [OutboxItem(r[0], r[1], MemoryId(r[2]), r[3]) for r in rows]

    async def pending_outbox_count(self) -> int:
        rows = await self._fetch("SELECT count(*) FROM outbox WHERE done_at IS NULL")
        return int(rows[0][0])

    async def mark_outbox(self, done: Sequence[int], *, now: datetime, error: str | None = None) -> None:
        async with self.transaction() as db:
            if error is None:
                await db.executemany(
                    "UPDATE outbox SET done_at = ?, attempts = attempts + 1 WHERE outbox_id = ?",
                    [(ts(now), i) for i in done],
                )
            else:
                await db.executemany(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE outbox_id = ?",
                    [(error[:2000], i) for i in done],
                )

    # ----- access and retrieval events ---------------------------------------------------------------

    async def decision_policies(self) -> list[tuple[str, int]]:
        """How many save decisions each policy version took."""
        rows = await self._fetch("SELECT policy, count(*) FROM save_decisions GROUP BY policy ORDER BY 2 DESC")
        return [(str(r[0]), int(r[1])) for r in rows]

    async def counts(self) -> dict[str, int]:
        tables = (
            "turns",
            "memories",
            "access_log",
            "save_decisions",
            "retrieval_events",
            "compaction_history",
            "retrieval_gaps",
        )
        result = {}
        for table in tables:
            result[table] = int((await self._fetch(f"SELECT count(*) FROM {table}"))[0][0])
        rows = await self._fetch("SELECT status, count(*) FROM memories GROUP BY status")
        result.update({f"memories_{status}": int(n) for status, n in rows})
        result["sessions"] = int((await self._fetch("SELECT count(DISTINCT session_id) FROM turns"))[0][0])
        result["images"] = int((await self._fetch("SELECT count(*) FROM memories WHERE media = 'image'"))[0][0])
        return result

    async def schema_version(self) -> int:
        rows = await self._fetch("SELECT max(version) FROM schema_migrations")
        return int(rows[0][0] or 0)


async def _configure(db: aiosqlite.Connection) -> None:
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = FULL")
    await db.execute("PRAGMA foreign_keys = ON")
    await db.execute("PRAGMA busy_timeout = 5000")


async def _migrate(db: aiosqlite.Connection) -> None:
    await db.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"
    )
    async with db.execute("SELECT version FROM schema_migrations") as cursor:
        applied = {r[0] for r in await cursor.fetchall()}
    for version, name, sql in migrations():
        if version in applied:
            continue
        script = f"BEGIN IMMEDIATE;\n{sql}\nINSERT INTO schema_migrations (version, name) VALUES ({version}, '{name}');\nCOMMIT;"
        try:
            await db.executescript(script)
        except sqlite3.Error as exc:
            if db.in_transaction:
                await db.execute("ROLLBACK")
            raise StorageError(f"Migration {name} failed: {exc}") from exc


async def _insert_turn(db: aiosqlite.Connection, commit: TurnCommit, now: datetime) -> None:
    turn, memory, decision = commit.turn, commit.memory, commit.decision
    await db.execute(
        "INSERT INTO turns (turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, "
        "checksum) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            turn.turn_id,
            turn.namespace,
            turn.session_id,
            turn.turn_number,
            turn.role.value,
            ts(turn.at),
            turn.position.segment,
            turn.position.offset,
            turn.position.length,
            turn.checksum,
        ),
    )
    if memory is not None:
        fast = commit.decision.path.value == "fast"
        await _insert_memory(db, memory, commit.embedding, commit.embedding_model, fast=fast)
        await _enqueue(db, memory.memory_id, now)
    for image in commit.images:
        await _insert_image(db, image, now)
    await db.execute(
        "INSERT INTO save_decisions (turn_id, memory_id, decided_at, path, save, memory_type, confidence, "
        "importance, reason, features, inputs, policy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            turn.turn_id,
            memory.memory_id if memory else None,
            ts(now),
            decision.path.value,
            int(decision.save),
            decision.memory_type.value,
            decision.confidence,
            decision.importance,
            decision.reason,
            json.dumps(dict(decision.features), sort_keys=True),
            json.dumps(dict(decision.inputs), sort_keys=True, default=str),
            decision.policy,
        ),
    )
    if commit.fills_gap and memory is not None:
        await db.execute(
            "UPDATE retrieval_gaps SET closed_at = ?, closed_by = ? WHERE gap_id = ? AND closed_at IS NULL",
            (ts(now), memory.memory_id, commit.fills_gap),
        )


async def _enqueue(db: aiosqlite.Connection, memory_id: str, now: datetime) -> None:
    await db.execute(
        "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)", (memory_id, ts(now))
    )


async def _insert_image(db: aiosqlite.Connection, image: ImageCommit, now: datetime) -> None:
    memory = image.memory
    await _insert_memory(
        db, memory, image.embedding, image.embedding_model, image=(image.image_embedding, image.image_model)
    )
    await _enqueue(db, memory.memory_id, now)


async def _insert_memory(
    db: aiosqlite.Connection,
    m: Memory,
    embedding: bytes | None,
    embedding_model: str,
    *,
    fast: bool = False,
    image: tuple[bytes, str] | None = None,
) -> None:
    """A memory row and its entities; `image` is (CLIP vector, model name) for an image memory."""
    image_embedding, image_model = image or (None, None)
    await db.execute(
        "INSERT INTO memories (memory_id, namespace, memory_type, content, keywords, created_at, event_at, "
        "generation, tier, status, valence, arousal, surprise, importance, confidence, decay_score, fast_path, "
        "source_turn_id, session_id, turn_number, revision, embedding, embedding_model, media, media_sha256, "
        "media_path, image_embedding, image_model) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            m.memory_id,
            m.namespace,
            m.memory_type.value,
            m.content,
            json.dumps(list(m.keywords)),
            ts(m.created_at),
            ts(m.event_at),
            m.generation,
            m.tier.value,
            m.status.value,
            m.valence,
            m.arousal,
            m.surprise,
            m.importance,
            m.confidence,
            m.decay_score,
            int(fast),
            m.source_turn_id,
            m.session_id,
            m.turn_number,
            m.revision,
            embedding,
            embedding_model,
            m.media.value,
            m.media_sha256,
            m.media_path,
            image_embedding,
            image_model,
        ),
    )
    await db.executemany(
        "INSERT OR IGNORE INTO memory_entities (memory_id, entity) VALUES (?, ?)",
        [(m.memory_id, e) for e in m.entities],
    )
