"""SQLite records through aiosqlite: the truth for what is remembered.

One writer connection (every write transaction is `BEGIN IMMEDIATE`, serialised by a lock) and READERS reader
connections; WAL lets them read beside the writer and each other. Migrations are numbered SQL files applied in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from agent_memory.errors import ClosedError, MemoryNotFound, StorageError
from agent_memory.models import (
    Memory,
    TurnRow,
)
from agent_memory.storage.compaction_records import CompactionQueries
from agent_memory.storage.context_records import ContextQueries
from agent_memory.storage.digest_records import DigestQueries
from agent_memory.storage.entity_records import EntityQueries
from agent_memory.storage.fact_records import FactQueries
from agent_memory.storage.graph_records import GraphQueries
from agent_memory.storage.inserts import Inserts
from agent_memory.storage.keyword_projection import KeywordProjection
from agent_memory.storage.outbox_records import OutboxQueries
from agent_memory.storage.outcome_records import OutcomeQueries
from agent_memory.storage.private import make_private_file
from agent_memory.storage.recall_records import RecallQueries
from agent_memory.storage.recovery_records import RecoveryQueries, set_recovery_start
from agent_memory.storage.reembed_records import ReembedQueries
from agent_memory.storage.retrieval_records import RetrievalQueries
from agent_memory.storage.revision_records import RevisionQueries
from agent_memory.storage.rows import (
    MEMORY_COLUMNS,
    ImageCommit,
    TurnCommit,
    memory_row,
    migrations,
    turn_row,
)
from agent_memory.storage.sleep_records import SleepQueries
from agent_memory.validation import TURNS_PER_SLICE

READERS = 2
"""Read connections, each with its own thread. A query's reads overlap (the keyword search beside the grep hits'
lookup, the graph walk beside the rows): WAL lets them run at once instead of queueing on one thread."""
READER_MMAP_BYTES = 256 << 20
"""The read connection maps up to this much of the database instead of copying pages through SQLite's cache: a
query's few hundred memory rows, scattered over the file, read about 30% faster (10k memories: 2.5 -> 1.8 ms)."""


class SqliteRecords(
    RecallQueries,
    RetrievalQueries,
    OutboxQueries,
    SleepQueries,
    OutcomeQueries,
    GraphQueries,
    CompactionQueries,
    DigestQueries,
    RecoveryQueries,
    RevisionQueries,
    FactQueries,
    ContextQueries,
    ReembedQueries,
    EntityQueries,
):
    def __init__(
        self, writer: aiosqlite.Connection, readers: Sequence[aiosqlite.Connection], path: Path | None = None
    ) -> None:
        self._writer, self._readers, self.path = writer, list(readers), path
        self.keyword_index: KeywordProjection | None = None  # the keyword layer's projection, once started
        self._busy = [0] * len(self._readers)  # reads in flight on each reader
        self.commits = 0  # committed write transactions that may have left the projector work (outbox rows, keywords)
        self.live_commits = 0  # those of them a search must see first: not an import's batch (outbox.py)
        self._write_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, path: Path) -> SqliteRecords:
        """The writer (migrated) and the readers. When any step fails, what was opened is closed again: an
        aiosqlite connection left open keeps its thread, and the process would never exit."""
        try:  # 0600 before SQLite opens it, which gives its WAL and SHM the same mode (one open(2): no thread)
            make_private_file(path)
        except OSError as exc:
            problem = exc.strerror or exc
            raise StorageError(f"The records database {path} cannot be opened for writing ({problem})") from exc
        opened: list[aiosqlite.Connection] = []
        try:
            migrator = await aiosqlite.connect(path, isolation_level=None)  # a connection of its own: a migration
            opened.append(migrator)  # may rewrite the schema's text (0020), which a connection opened after reads
            await _configure(migrator)
            await _migrate(migrator)
            await opened.pop().close()
            writer = await aiosqlite.connect(path, isolation_level=None)
            opened.append(writer)
            await _configure(writer)
            for _ in range(READERS):
                reader = await aiosqlite.connect(path, isolation_level=None)
                opened.append(reader)
                await _configure(reader)
                await reader.execute(f"PRAGMA mmap_size = {READER_MMAP_BYTES}")
        except BaseException as exc:
            for connection in reversed(opened):
                with contextlib.suppress(Exception):
                    await connection.close()
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"Cannot open the records database {path}: {exc}") from exc
            raise
        return cls(writer, opened[1:], path)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            if self.keyword_index is not None:
                await self.keyword_index.aclose()
            for reader in self._readers:
                await reader.close()
            await self._writer.close()

    @asynccontextmanager
    async def transaction(
        self, *, projected: bool = True, background: bool = False
    ) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction. `projected=False` promises it adds no outbox or pending_keywords row (a
        retrieval's record): the projector then need not look for work after it (commits). `background` marks a
        write a search does not wait for (live_commits; Projector.catch_up_for_read): an import's batch, which its
        own call applies for reads, or the projector's derived keywords, which it applies itself."""
        if self._closed:
            raise ClosedError("SqliteRecords")
        async with self._write_lock:
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
                yield self._writer
                await self._writer.execute("COMMIT")
                if projected:
                    self.commits += 1
                    self.live_commits += not background
            except BaseException as exc:
                await self._writer.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"SQLite write failed: {exc}") from exc
                raise

    async def write_one(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> None:
        """One statement, committed on its own (the writer runs in autocommit): one hop to the writer's thread
        where a transaction takes three. Like `transaction(projected=False)`, it must add no outbox or
        pending_keywords row."""
        if self._closed:
            raise ClosedError("SqliteRecords")
        async with self._write_lock:
            try:
                await self._writer.execute(sql, params)
            except sqlite3.Error as exc:
                raise StorageError(f"SQLite write failed: {exc}") from exc

    async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        if self._closed:
            raise ClosedError("SqliteRecords")
        chosen = self._busy.index(min(self._busy))  # the idlest reader: a slow search does not hold up the rest
        self._busy[chosen] += 1
        try:
            return list(await self._readers[chosen].execute_fetchall(sql, params))  # one hop to its thread
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite read failed: {exc}") from exc
        finally:
            self._busy[chosen] -= 1

    # ----- turns -------------------------------------------------------------------------------------

    async def stored_turns(self, keys: Sequence[tuple[str, str, int]]) -> set[tuple[str, str, int]]:
        """Which of these (namespace, session id, turn number) keys a turn row holds: one query a few hundred keys."""
        found: set[tuple[str, str, int]] = set()
        for start in range(0, len(keys), 300):
            chunk = keys[start : start + 300]
            rows = await self._fetch(
                f"SELECT t.namespace, t.session_id, t.turn_number FROM (VALUES {','.join(['(?, ?, ?)'] * len(chunk))}) "
                "AS k JOIN turns AS t ON t.namespace = k.column1 AND t.session_id = k.column2 "
                "AND t.turn_number = k.column3",  # a join: `(…) IN (VALUES …)` scans the whole index
                [value for key in chunk for value in key],
            )
            found.update((str(r[0]), str(r[1]), int(r[2])) for r in rows)
        return found

    async def memories_before(
        self, namespace: str, session_id: str, turn_number: int, limit: int
    ) -> list[tuple[str, bytes | None]]:
        """(content, vector) of the `limit` turn memories just before `turn_number` in its session, nearest first."""
        rows = await self._fetch(
            "SELECT content, embedding FROM memories WHERE namespace = ? AND session_id = ? AND turn_number < ? "
            "AND generation = 0 ORDER BY turn_number DESC LIMIT ?",
            (namespace, session_id, turn_number, limit),
        )
        return [(str(r[0]), bytes(r[1]) if r[1] is not None else None) for r in rows]

    async def previous_turn(self, namespace: str, session_id: str, turn_number: int) -> TurnRow | None:
        """The turn logged just before `turn_number` in its session, kept or not."""
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns WHERE namespace = ? AND session_id = ? AND turn_number < ? ORDER BY turn_number DESC LIMIT 1",
            (namespace, session_id, turn_number),
        )
        return turn_row(rows[0]) if rows else None

    async def last_turn(self, namespace: str, session_id: str) -> TurnRow | None:
        """The highest-numbered turn logged in a session."""
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns WHERE namespace = ? AND session_id = ? ORDER BY turn_number DESC LIMIT 1",
            (namespace, session_id),
        )
        return turn_row(rows[0]) if rows else None

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

    async def latest_turn_at(self) -> datetime | None:
        """When the latest turn was said."""
        rows = await self._fetch("SELECT max(at) FROM turns")
        return datetime.fromisoformat(rows[0][0]) if rows and rows[0][0] else None

    async def turns(self) -> list[TurnRow]:
        """Every turn, in log order. The rows become TurnRows on a worker thread: 0.7 s of the event loop's time
        for the 100k real-text store's turns. Doctor reads `turn_positions()`, which holds fewer objects."""
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns ORDER BY segment, offset"
        )
        return await asyncio.to_thread(lambda: [turn_row(r) for r in rows])

    async def turn_positions(self) -> list[tuple[str, tuple[int, int, int], str]]:
        """Every turn's id, log position (segment, offset, length) and checksum, in log order: what doctor compares
        with the log. Plain tuples of strings and numbers, which Python's collector stops tracking, where TurnRows
        stay tracked: holding the 100k real-text store's made every full collection walk 200k more objects."""
        rows = await self._fetch(
            "SELECT turn_id, segment, offset, length, checksum FROM turns ORDER BY segment, offset"
        )
        return await asyncio.to_thread(lambda: [(r[0], (r[1], r[2], r[3]), r[4]) for r in rows])

    async def get_turn(self, turn_id: str) -> TurnRow | None:
        rows = await self._fetch(
            "SELECT turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum "
            "FROM turns WHERE turn_id = ?",
            (turn_id,),
        )
        return turn_row(rows[0]) if rows else None

    async def commit_turns(
        self,
        commits: Sequence[TurnCommit],
        *,
        now: datetime,
        recovery_start: tuple[int, int] | None = None,
        bulk: bool = False,
    ) -> None:
        """Turn rows, memories, entities, decisions and outbox rows: all or nothing. `recovery_start` (the
        journal's low water) is where recovery reads the log from if the process dies after this commit. `bulk`:
        an import's batch (transaction)."""
        rows = Inserts()
        for index, commit in enumerate(commits):
            if index and index % TURNS_PER_SLICE == 0:
                await asyncio.sleep(0)  # a large batch lets other callers in while its rows are built
            rows.turn(commit, now)
        async with self.transaction(background=bulk) as db:
            await rows.write(db)
            if recovery_start is not None:
                await set_recovery_start(db, recovery_start)

    async def commit_images(self, images: Sequence[ImageCommit], *, now: datetime) -> None:
        """Image memories not attached to a turn, with their outbox rows: all or nothing."""
        rows = Inserts()
        for image in images:
            rows.image(image, now)
        async with self.transaction() as db:
            await rows.write(db)

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
        """The memories that exist among `memory_ids`, with their entities. (The read path ranks candidates read
        without them, `rows_for_ranking`, and asks `entities_of` only for the memories it returns.)"""
        found: dict[str, Memory] = {}
        for chunk, rows in await self._memory_rows(memory_ids):
            named = await self.entities_of(chunk)
            for row in rows:
                found[row[0]] = memory_row(row, named.get(row[0], ()))
        return found

    async def _memory_rows(self, memory_ids: Sequence[str], extra: str = "") -> list[tuple[list[str], list[Any]]]:
        """The MEMORY_COLUMNS rows (then `extra`, a column expression) of `memory_ids`, 500 ids a query: each chunk
        of ids with its rows."""
        ids, found = list(dict.fromkeys(memory_ids)), []
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            columns = f"{MEMORY_COLUMNS}, {extra}" if extra else MEMORY_COLUMNS
            found.append(
                (chunk, await self._fetch(f"SELECT {columns} FROM memories WHERE memory_id IN ({marks})", chunk))
            )
        return found

    async def entities_of(self, memory_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Each memory's entities, sorted; a memory with none is absent."""
        if len(memory_ids) > 500:
            merged: dict[str, tuple[str, ...]] = {}
            for start in range(0, len(memory_ids), 500):
                merged |= await self.entities_of(memory_ids[start : start + 500])
            return merged
        marks = ",".join("?" * len(memory_ids))
        rows = await self._fetch(
            f"SELECT memory_id, entity FROM memory_entities WHERE memory_id IN ({marks}) ORDER BY entity",
            memory_ids,
        )
        grouped: dict[str, list[str]] = {}
        for memory_id, entity in rows:
            grouped.setdefault(memory_id, []).append(entity)
        return {k: tuple(v) for k, v in grouped.items()}

    async def memory_ids_among(self, memory_ids: Sequence[str]) -> list[str]:
        """Those of `memory_ids` that exist."""
        found: list[str] = []
        for start in range(0, len(memory_ids), 500):
            chunk = memory_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found += [
                r[0] for r in await self._fetch(f"SELECT memory_id FROM memories WHERE memory_id IN ({marks})", chunk)
            ]
        return found

    async def has_memories(self) -> bool:
        return bool(await self._fetch("SELECT 1 FROM memories LIMIT 1"))

    async def text_vector_size(self) -> int | None:
        """The size of the stored text vectors (float32), read from one memory; None while none is stored."""
        rows = await self._fetch("SELECT length(embedding) FROM memories WHERE length(embedding) > 0 LIMIT 1")
        return int(rows[0][0]) // 4 if rows else None

    async def memory_ids(self) -> set[str]:
        return {r[0] for r in await self._fetch("SELECT memory_id FROM memories")}

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

    async def media_paths(self) -> set[str]:
        """The image files the image memories name (relative to data_dir), whatever their status."""
        rows = await self._fetch("SELECT DISTINCT media_path FROM memories WHERE media_path IS NOT NULL")
        return {str(r[0]) for r in rows}

    async def embedded_ids(self, *, image: bool = False) -> set[str]:
        """The memories that have a text vector (or with `image`, a CLIP vector): what each collection must hold."""
        column = "image_embedding" if image else "embedding"
        return {r[0] for r in await self._fetch(f"SELECT memory_id FROM memories WHERE {column} IS NOT NULL")}

    # ----- access and retrieval events ---------------------------------------------------------------

    async def recent_keep_scores(self, namespace: str, limit: int) -> list[float]:
        """The keep scores of the namespace's latest judged turns, oldest first: salience or the LLM's keep
        probability (1.0 for a fast-path turn). Phatic turns and keep-all archives have none."""
        rows = await self._fetch(
            "SELECT d.confidence FROM save_decisions d JOIN turns t ON t.turn_id = d.turn_id "
            "WHERE t.namespace = ? AND d.path IN ('fast', 'llm', 'heuristic', 'fallback') "
            "ORDER BY d.decision_id DESC LIMIT ?",
            (namespace, limit),
        )
        return [float(r[0]) for r in reversed(rows)]

    async def decision_policies(self) -> list[tuple[str, int]]:
        """How many save decisions each policy version took."""
        rows = await self._fetch("SELECT policy, count(*) FROM save_decisions GROUP BY policy ORDER BY 2 DESC")
        return [(str(r[0]), int(r[1])) for r in rows]

    async def schema_version(self) -> int:
        rows = await self._fetch("SELECT max(version) FROM schema_migrations")
        return int(rows[0][0] or 0)


async def _configure(db: aiosqlite.Connection) -> None:
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = FULL")
    await db.execute("PRAGMA foreign_keys = ON")
    await db.execute("PRAGMA secure_delete = ON")  # freed pages and cells zeroed: an erase leaves no words behind
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
