"""The rows one processed turn writes, inside the transaction SqliteRecords opens: the turn, its memory and
entities, its image memories, its save decision, the gap it fills, and the outbox rows for the projections.

`Inserts` gathers the rows of many commits statement by statement and writes each statement once, with
executemany: a batch of 64 turns is about ten calls to SQLite's thread instead of some 350 (an import of LoCoMo
dev's 1,617 turns made 11,244 calls, 8,538 of them these inserts)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import aiosqlite

from agent_memory.models import Memory
from agent_memory.note_models import NoteMeta
from agent_memory.storage.rows import ChunkCommit, ImageCommit, TurnCommit, ts

TURN = (
    "INSERT INTO turns (turn_id, namespace, session_id, turn_number, role, at, segment, offset, length, checksum) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
MEMORY = (
    "INSERT INTO memories (memory_id, namespace, memory_type, content, keywords, created_at, event_at, "
    "generation, tier, status, valence, arousal, surprise, importance, confidence, decay_score, fast_path, "
    "source_turn_id, session_id, turn_number, revision, embedding, embedding_model, media, media_sha256, "
    "media_path, image_embedding, image_model) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ENTITY = "INSERT OR IGNORE INTO memory_entities (memory_id, entity, namespace) VALUES (?, ?, ?)"
ENTITY_OF = (  # an entity of a memory already written, with its namespace (migration 0029)
    "INSERT OR IGNORE INTO memory_entities (memory_id, entity, namespace) SELECT ?, ?, namespace FROM memories "
    "WHERE memory_id = ?"
)
OUTBOX = "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)"
PENDING_KEYWORDS = "INSERT OR IGNORE INTO pending_keywords (memory_id) VALUES (?)"
NOTE = "INSERT INTO notes (memory_id, namespace, kind, tags, source, agent, written_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
CHUNK = "INSERT INTO memory_chunks (memory_id, turn_id, chunk, chunks, start_char, end_char) VALUES (?, ?, ?, ?, ?, ?)"
DECISION = (
    "INSERT INTO save_decisions (turn_id, memory_id, decided_at, path, save, memory_type, confidence, "
    "importance, reason, features, inputs, policy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
CLOSE_GAP = "UPDATE retrieval_gaps SET closed_at = ?, closed_by = ? WHERE gap_id = ? AND closed_at IS NULL"
ORDER = (TURN, MEMORY, ENTITY, OUTBOX, PENDING_KEYWORDS, NOTE, CHUNK, DECISION, CLOSE_GAP)
"""The order the statements are written in: each table after the ones its foreign keys name."""


class Inserts:
    """The rows of one transaction by statement. Rows keep the order they were added in within a statement (the
    outbox's ids follow the memories as before); the statements are written in ORDER."""

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple[Any, ...]]] = {sql: [] for sql in ORDER}

    async def write(self, db: aiosqlite.Connection) -> None:
        for sql in ORDER:
            if rows := self._rows[sql]:
                await db.executemany(sql, rows)
                rows.clear()

    def turn(self, commit: TurnCommit, now: datetime) -> None:
        """A processed turn: its row, its memory (and its note), its images and chunks, its decision, its gap."""
        turn, memory, decision = commit.turn, commit.memory, commit.decision
        position = turn.position
        self._rows[TURN].append(
            (
                turn.turn_id,
                turn.namespace,
                turn.session_id,
                turn.turn_number,
                turn.role.value,
                ts(turn.at),
                position.segment,
                position.offset,
                position.length,
                turn.checksum,
            )
        )
        if memory is not None:
            self.memory(memory, commit.embedding, commit.embedding_model, fast=decision.path.value == "fast")
            self.enqueue(memory.memory_id, now)
            if commit.derive_keywords:
                self._rows[PENDING_KEYWORDS].append((memory.memory_id,))
            if commit.note is not None:
                self.note(memory, commit.note)
        for image in commit.images:
            self.image(image, now)
        for chunk in commit.chunks:
            self.chunk(chunk, turn.turn_id, now)
        memory = memory or (commit.chunks[0].memory if commit.chunks else None)  # the decision names the first chunk
        self._rows[DECISION].append(
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
            )
        )
        if commit.fills_gap and memory is not None:
            self._rows[CLOSE_GAP].append((ts(now), memory.memory_id, commit.fills_gap))

    def enqueue(self, memory_id: str, now: datetime) -> None:
        self._rows[OUTBOX].append((memory_id, ts(now)))

    def chunk(self, chunk: ChunkCommit, turn_id: str, now: datetime) -> None:
        """A long turn's chunk: a memory like any kept turn's (keywords left to the projector), and its place."""
        memory = chunk.memory
        self.memory(memory, chunk.embedding, chunk.embedding_model)
        self.enqueue(memory.memory_id, now)
        self._rows[PENDING_KEYWORDS].append((memory.memory_id,))
        self._rows[CHUNK].append((memory.memory_id, turn_id, chunk.chunk, chunk.chunks, chunk.start, chunk.end))

    def image(self, image: ImageCommit, now: datetime) -> None:
        memory = image.memory
        self.memory(memory, image.embedding, image.embedding_model, image=(image.image_embedding, image.image_model))
        self.enqueue(memory.memory_id, now)

    def memory(
        self,
        m: Memory,
        embedding: bytes | None,
        embedding_model: str,
        *,
        fast: bool = False,
        image: tuple[bytes, str] | None = None,
    ) -> None:
        """A memory row and its entities; `image` is (CLIP vector, model name) for an image memory."""
        image_embedding, image_model = image or (None, None)
        self._rows[MEMORY].append(
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
            )
        )
        self._rows[ENTITY].extend((m.memory_id, e, m.namespace) for e in m.entities)

    def note(self, memory: Memory, note: NoteMeta) -> None:
        """A note's label beside its memory (migration 0024); it goes when the memory row goes (an erase)."""
        source = note.source.as_dict() if note.source is not None else None
        self._rows[NOTE].append(
            (
                memory.memory_id,
                memory.namespace,
                note.kind.value,
                json.dumps(list(note.tags), ensure_ascii=False),
                json.dumps(source, ensure_ascii=False, sort_keys=True) if source else None,
                note.agent,
                ts(memory.created_at),
            )
        )


async def enqueue(db: aiosqlite.Connection, memory_id: str, now: datetime) -> None:
    """One outbox row, written now (revisions)."""
    rows = Inserts()
    rows.enqueue(memory_id, now)
    await rows.write(db)


async def insert_memory(
    db: aiosqlite.Connection,
    m: Memory,
    embedding: bytes | None,
    embedding_model: str,
) -> None:
    """One memory row and its entities, written now (revisions, digests, merges)."""
    rows = Inserts()
    rows.memory(m, embedding, embedding_model)
    await rows.write(db)


async def replace_entities(db: aiosqlite.Connection, memory_id: str, entities: Sequence[str]) -> None:
    """A written memory's entities, replaced (a revision, an erase's rewrite, a digest made again)."""
    await db.execute("DELETE FROM memory_entities WHERE memory_id = ?", (memory_id,))
    await db.executemany(ENTITY_OF, [(memory_id, entity, memory_id) for entity in entities])
