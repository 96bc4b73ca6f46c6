"""The SQLite side of digests (sleep/digests.py): which memories are new since the last run, each speaker's topics,
the statements in a topic, and one transaction that writes a step's topics, statements and digest memories.

Mixed into `SqliteRecords` (records.py), which owns the connections. A digest memory is a generation-1 memory with
EVOLVED_FROM links to the memories its statements came from, so `lineage_turns` leads it back to its turns; the
graph and the vectors follow through the outbox like every other change.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_memory.cognition.digest import Statement
from agent_memory.models import Media, Memory, MemoryStatus
from agent_memory.storage.inserts import insert_memory, replace_entities
from agent_memory.storage.rows import MEMORY_COLUMNS, memory_row, ts


@dataclass(frozen=True, slots=True)
class StoredTopic:
    topic_id: int
    speaker: str
    total: np.ndarray
    size: int
    memory_id: str | None


@dataclass(frozen=True, slots=True)
class TopicWrite:
    """A topic as a digest step leaves it: `topic_id` None for a new one; `statements` are the ones it gained."""

    key: int  # the step's own index for the topic, which ties statements and digests to it
    topic_id: int | None
    speaker: str
    total: np.ndarray
    size: int
    statements: tuple[tuple[Statement, int], ...]  # (statement, its position among its memory's statements)


@dataclass(frozen=True, slots=True)
class DigestWrite:
    """The digest memory of topic `key`: new (`memory` inserted) or rewritten (`memory` replaces the stored row's
    content, keywords, entities, event time and vector, one revision up). `sources` are its statements' memories."""

    key: int
    memory: Memory
    embedding: bytes
    sources: tuple[str, ...]
    new: bool


class DigestQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def undigested(self, namespace: str, *, limit: int) -> tuple[list[Memory], int | None]:
        """The namespace's next `limit` memories after the digest cursor, in the order they were stored, with the
        rowid the cursor moves to (None when nothing is new). Only active generation-0 text memories are returned:
        the rest are passed over."""
        rows = await self._fetch(
            f"SELECT {MEMORY_COLUMNS}, memories.rowid FROM memories WHERE namespace = ? AND memories.rowid > "
            "coalesce((SELECT last_rowid FROM digest_cursor WHERE namespace = ?), 0) "
            "ORDER BY memories.rowid LIMIT ?",
            (namespace, namespace, limit),
        )
        if not rows:
            return [], None
        found = [memory_row(r, ()) for r in rows]
        kept = [m for m in found if m.generation == 0 and m.status is MemoryStatus.ACTIVE and m.media is Media.TEXT]
        return kept, int(rows[-1][-1])

    async def undigested_count(self) -> int:
        """How many memories a digest step would read, in every namespace: the active generation-0 text memories
        after each namespace's cursor (the `memories_namespace_status` index, ranged by rowid)."""
        rows = await self._fetch(
            "SELECT coalesce(sum((SELECT count(*) FROM memories AS m WHERE m.namespace = n.namespace "
            "AND m.status = 'active' AND m.rowid > coalesce(c.last_rowid, 0) AND m.generation = 0 "
            "AND m.media = 'text')), 0) FROM (SELECT DISTINCT namespace FROM memories) AS n "
            "LEFT JOIN digest_cursor AS c ON c.namespace = n.namespace"
        )
        return int(rows[0][0])

    async def digest_topics(self, namespace: str, speakers: Sequence[str]) -> list[StoredTopic]:
        """The topics of these speakers in the namespace, oldest first."""
        if not speakers:
            return []
        marks = ",".join("?" * len(speakers))
        rows = await self._fetch(
            "SELECT topic_id, speaker, total, size, memory_id FROM digest_topics "
            f"WHERE namespace = ? AND speaker IN ({marks}) ORDER BY topic_id",
            (namespace, *speakers),
        )
        return [StoredTopic(int(r[0]), r[1], np.frombuffer(r[2], dtype="<f8").copy(), int(r[3]), r[4]) for r in rows]

    async def topic_statements(self, topic_ids: Sequence[int]) -> dict[int, list[Statement]]:
        """Each topic's stored statements, oldest first."""
        found: dict[int, list[Statement]] = {}
        if not topic_ids:
            return found
        marks = ",".join("?" * len(topic_ids))
        rows = await self._fetch(
            "SELECT topic_id, memory_id, at, sentence, position FROM digest_statements "
            f"WHERE topic_id IN ({marks}) ORDER BY at, memory_id, position",
            list(topic_ids),
        )
        for topic_id, memory_id, at, sentence, _ in rows:
            speaker = ""  # filled by the caller, who knows the topic's speaker
            found.setdefault(int(topic_id), []).append(
                Statement(memory_id, speaker, datetime.fromisoformat(at), sentence)
            )
        return found

    async def digest_memory_ids(self, namespace: str | None = None) -> set[str]:
        """The ids of the digest memories (of one namespace, or all)."""
        where, params = ("WHERE namespace = ? AND", (namespace,)) if namespace else ("WHERE", ())
        rows = await self._fetch(f"SELECT memory_id FROM digest_topics {where} memory_id IS NOT NULL", params)
        return {str(r[0]) for r in rows}

    async def commit_digests(
        self,
        namespace: str,
        *,
        cursor: int,
        topics: Sequence[TopicWrite],
        digests: Sequence[DigestWrite],
        embedding_model: str,
        now: datetime,
    ) -> None:
        """One digest step in one transaction: the topics (new and grown), their new statements, the digest
        memories (inserted or rewritten) with their EVOLVED_FROM links and outbox rows, and the namespace's
        cursor. A crash before the commit leaves everything as it was: the step runs again."""
        async with self.transaction() as db:
            ids: dict[int, int] = {}
            for topic in topics:
                total = np.asarray(topic.total, dtype="<f8").tobytes()
                if topic.topic_id is None:
                    cursor_row = await db.execute(
                        "INSERT INTO digest_topics (namespace, speaker, total, size, updated_at) VALUES (?, ?, ?, ?, ?)",
                        (namespace, topic.speaker, total, topic.size, ts(now)),
                    )
                    ids[topic.key] = int(cursor_row.lastrowid or 0)
                else:
                    await db.execute(
                        "UPDATE digest_topics SET total = ?, size = ?, updated_at = ? WHERE topic_id = ?",
                        (total, topic.size, ts(now), topic.topic_id),
                    )
                    ids[topic.key] = topic.topic_id
                await db.executemany(
                    "INSERT OR IGNORE INTO digest_statements (memory_id, position, topic_id, sentence, at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [(s.memory_id, position, ids[topic.key], s.text, ts(s.at)) for s, position in topic.statements],
                )
            for digest in digests:
                memory = digest.memory
                if digest.new:
                    await insert_memory(db, memory, digest.embedding, embedding_model)
                    await db.execute(
                        "UPDATE digest_topics SET memory_id = ? WHERE topic_id = ?", (memory.memory_id, ids[digest.key])
                    )
                else:
                    await db.execute(
                        "UPDATE memories SET content = ?, keywords = ?, event_at = ?, embedding = ?, "
                        "embedding_model = ?, revision = revision + 1 WHERE memory_id = ?",
                        (
                            memory.content,
                            json.dumps(list(memory.keywords)),
                            ts(memory.event_at),
                            digest.embedding,
                            embedding_model,
                            memory.memory_id,
                        ),
                    )
                    await replace_entities(db, memory.memory_id, memory.entities)
                await db.executemany(
                    "INSERT OR IGNORE INTO memory_links (source_id, target_id, relation, weight, created_at, reason) "
                    "VALUES (?, ?, 'EVOLVED_FROM', 1, ?, 'digest')",
                    [(memory.memory_id, source, ts(now)) for source in digest.sources],
                )
                await db.execute(
                    "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)",
                    (memory.memory_id, ts(now)),
                )
            await db.execute(
                "INSERT INTO digest_cursor (namespace, last_rowid) VALUES (?, ?) "
                "ON CONFLICT (namespace) DO UPDATE SET last_rowid = excluded.last_rowid",
                (namespace, cursor),
            )
