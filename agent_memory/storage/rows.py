"""Mapping between the records' SQLite rows and the model types: pure functions, no engine here."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from agent_memory.models import (
    EmotionalContext,
    Extraction,
    LogPosition,
    Media,
    Memory,
    MemoryId,
    MemoryStatus,
    MemoryType,
    RetrievalGap,
    Role,
    SaveDecision,
    Tier,
    TurnId,
    TurnRow,
    fresh_memory,
)
from agent_memory.note_models import NoteMeta

MEMORY_COLUMNS = (
    "memory_id, namespace, memory_type, content, keywords, created_at, event_at, last_accessed_at, "
    "access_count, generation, tier, status, superseded_by, valence, arousal, surprise, importance, "
    "confidence, decay_score, source_turn_id, session_id, revision, turn_number, "
    "(SELECT t.role FROM turns t WHERE t.turn_id = memories.source_turn_id), media, media_sha256, media_path, "
    "logged_chars"
)


@dataclass(frozen=True, slots=True)
class ImageCommit:
    """One image memory's row: the memory (media 'image'), its CLIP vector, and its caption's text vector if any."""

    memory: Memory
    image_embedding: bytes
    image_model: str
    embedding: bytes | None = None
    embedding_model: str = ""


@dataclass(frozen=True, slots=True)
class ChunkCommit:
    """One chunk of a long turn as a memory (long_turns.py): its row, its text vector, and its place in the turn."""

    memory: Memory
    embedding: bytes
    embedding_model: str
    chunk: int
    chunks: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class TurnCommit:
    """Everything one processed turn writes, committed in a single transaction."""

    turn: TurnRow
    decision: SaveDecision
    memory: Memory | None = None
    embedding: bytes | None = None
    embedding_model: str = ""
    fills_gap: str | None = None
    """An open retrieval gap this memory fills: closed in the same transaction."""
    images: tuple[ImageCommit, ...] = ()
    """Image memories of the images shared with the turn, committed with it whatever the text's decision."""
    derive_keywords: bool = False
    """The memory's keywords are left to the projector (pending_keywords): they are not on the write path."""
    note: NoteMeta | None = None
    """The memory is a note: its label is written to `notes` in the same transaction."""
    chunks: tuple[ChunkCommit, ...] = ()
    """A long turn's chunk memories (then `memory` is None): each a memory row, with its vector and its place."""


@dataclass(frozen=True, slots=True)
class StoredImage:
    """An image read, decoded and CLIP-embedded, on its way to data_dir/images and an image memory."""

    data: bytes
    sha256: str
    media_path: str  # relative to data_dir: "images/<sha256>.<ext>"
    label: str  # an uncaptioned image memory's content: "[image] <file name>"
    vector: bytes  # CLIP's, little-endian float32
    model: str  # the image embedder that made it


@dataclass(frozen=True, slots=True)
class ImagePlace:
    """Where an image memory belongs: its namespace, session and time, and the turn it was shared in if any."""

    namespace: str
    session_id: str | None
    at: datetime
    turn_id: TurnId | None = None


def image_commit(
    image: StoredImage,
    where: ImagePlace,
    now: datetime,
    *,
    emotion: EmotionalContext | None = None,
    caption: str | None = None,
    extraction: Extraction | None = None,
    embedding: tuple[bytes, str] | None = None,
) -> ImageCommit:
    """An image as a memory: episodic, generation 0, its content the caption (or "[image]" and a file name), the
    emotion of the turn it was shared in; `embedding` is the caption's text vector and its model."""
    found, mood = extraction or Extraction((), ()), emotion or EmotionalContext()
    memory = fresh_memory(
        namespace=where.namespace,
        memory_type=MemoryType.EPISODIC,
        content=caption or image.label,
        keywords=found.keywords,
        entities=found.entities,
        created_at=now,
        event_at=where.at,
        valence=mood.valence,
        arousal=mood.arousal,
        source_turn_id=where.turn_id,
        session_id=where.session_id,
        media=Media.IMAGE,
        media_sha256=image.sha256,
        media_path=image.media_path,
    )
    text, text_model = embedding or (None, "")
    return ImageCommit(memory, image.vector, image.model, text, text_model)


def migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("agent_memory.storage") / "migrations"
    found = [
        (int(entry.name[:4]), entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


def ts(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def turn_row(r: sqlite3.Row | tuple[Any, ...]) -> TurnRow:
    return TurnRow(
        turn_id=TurnId(r[0]),
        namespace=r[1],
        session_id=r[2],
        turn_number=r[3],
        role=Role(r[4]),
        at=datetime.fromisoformat(r[5]),
        position=LogPosition(r[6], r[7], r[8]),
        checksum=r[9],
    )


_TYPES, _TIERS = {m.value: m for m in MemoryType}, {t.value: t for t in Tier}  # Enum(value) is slow: a read
_STATUSES, _ROLES, _MEDIA = {s.value: s for s in MemoryStatus}, {r.value: r for r in Role}, {m.value: m for m in Media}


def memory_row(r: sqlite3.Row | tuple[Any, ...], entities: tuple[str, ...]) -> Memory:
    """A memory from its row (MEMORY_COLUMNS). The read path turns hundreds of rows a query into memories."""
    return Memory(
        memory_id=MemoryId(r[0]),
        namespace=r[1],
        memory_type=_TYPES[r[2]],
        content=r[3],
        keywords=tuple(json.loads(r[4])),
        entities=entities,
        created_at=datetime.fromisoformat(r[5]),
        event_at=datetime.fromisoformat(r[6]),
        last_accessed_at=dt(r[7]),
        access_count=r[8],
        generation=r[9],
        tier=_TIERS[r[10]],
        status=_STATUSES[r[11]],
        superseded_by=MemoryId(r[12]) if r[12] else None,
        valence=r[13],
        arousal=r[14],
        surprise=r[15],
        importance=r[16],
        confidence=r[17],
        decay_score=r[18],
        source_turn_id=TurnId(r[19]) if r[19] else None,
        session_id=r[20],
        revision=r[21],
        turn_number=r[22],
        role=_ROLES[r[23]] if r[23] else None,
        media=_MEDIA[r[24]],
        media_sha256=r[25],
        media_path=r[26],
        logged_chars=r[27],
    )


def gap_row(r: sqlite3.Row | tuple[Any, ...]) -> RetrievalGap:
    return RetrievalGap(
        gap_id=r[0],
        namespace=r[1],
        query=r[2],
        keywords=tuple(json.loads(r[3])),
        best_score=r[4],
        opened_at=datetime.fromisoformat(r[5]),
        expires_at=datetime.fromisoformat(r[6]),
    )
