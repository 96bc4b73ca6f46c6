"""The rows one processed turn writes, inside the transaction SqliteRecords opens: the turn, its memory and
entities, its image memories, its save decision, the gap it fills, and the outbox rows for the projections."""

from __future__ import annotations

import json
from datetime import datetime

import aiosqlite

from agent_memory.models import Memory
from agent_memory.note_models import NoteMeta
from agent_memory.storage.rows import ChunkCommit, ImageCommit, TurnCommit, ts


async def insert_turn(db: aiosqlite.Connection, commit: TurnCommit, now: datetime) -> None:
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
        await insert_memory(db, memory, commit.embedding, commit.embedding_model, fast=fast)
        await enqueue(db, memory.memory_id, now)
        if commit.derive_keywords:
            await db.execute("INSERT OR IGNORE INTO pending_keywords (memory_id) VALUES (?)", (memory.memory_id,))
        if commit.note is not None:
            await insert_note(db, memory, commit.note)
    for image in commit.images:
        await insert_image(db, image, now)
    for chunk in commit.chunks:
        await insert_chunk(db, chunk, turn.turn_id, now)
    memory = memory or (commit.chunks[0].memory if commit.chunks else None)  # the decision names the first chunk
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


async def enqueue(db: aiosqlite.Connection, memory_id: str, now: datetime) -> None:
    await db.execute(
        "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)", (memory_id, ts(now))
    )


async def insert_chunk(db: aiosqlite.Connection, chunk: ChunkCommit, turn_id: str, now: datetime) -> None:
    """A long turn's chunk: a memory like any kept turn's (keywords left to the projector), and its place."""
    memory = chunk.memory
    await insert_memory(db, memory, chunk.embedding, chunk.embedding_model)
    await enqueue(db, memory.memory_id, now)
    await db.execute("INSERT OR IGNORE INTO pending_keywords (memory_id) VALUES (?)", (memory.memory_id,))
    await db.execute(
        "INSERT INTO memory_chunks (memory_id, turn_id, chunk, chunks, start_char, end_char) VALUES (?, ?, ?, ?, ?, ?)",
        (memory.memory_id, turn_id, chunk.chunk, chunk.chunks, chunk.start, chunk.end),
    )


async def insert_image(db: aiosqlite.Connection, image: ImageCommit, now: datetime) -> None:
    memory = image.memory
    await insert_memory(
        db, memory, image.embedding, image.embedding_model, image=(image.image_embedding, image.image_model)
    )
    await enqueue(db, memory.memory_id, now)


async def insert_memory(
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


async def insert_note(db: aiosqlite.Connection, memory: Memory, note: NoteMeta) -> None:
    """A note's label beside its memory (migration 0024); it goes when the memory row goes (an erase)."""
    source = note.source.as_dict() if note.source is not None else None
    await db.execute(
        "INSERT INTO notes (memory_id, namespace, kind, tags, source, agent, written_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            memory.memory_id,
            memory.namespace,
            note.kind.value,
            json.dumps(list(note.tags), ensure_ascii=False),
            json.dumps(source, ensure_ascii=False, sort_keys=True) if source else None,
            note.agent,
            ts(memory.created_at),
        ),
    )
