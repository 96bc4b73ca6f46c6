"""Long turns: a turn over `max_content_bytes` (a pasted document, a log, a listing) is logged whole and remembered
in chunks, so one long turn never stops an import and each of its parts can be found (issue #22).

Between `max_content_bytes` (64 KiB) and the hard cap `max_turn_bytes` (8 MiB) a turn is taken on every path,
`process_turn` as much as `process_turns`, `ingest`, the benchmark and HTTP: the same turn gets the same answer
wherever it is sent, and an agent's live turn with a pasted log is as real as an imported one. Over the hard cap
every path refuses it with ContentTooLarge before anything is written.

What a long turn becomes:
- the log: one record, the whole text, as for any turn (the log is the truth: DESIGN.md invariant 1); its turn row,
  its place in the log and its duplicate detection (namespace, session, turn number) are a turn's like any other;
- the records: one memory per chunk (cognition/chunking.py: about `chunk_tokens` tokens, cut at a blank line, a
  line end, a sentence end or a space), each with the turn's session, turn number, role and time, its own vector
  (embedded alone, in one batch for the whole call), its entities, its emotion (the caller's for the whole turn,
  else the lexicon's for the chunk), and a `memory_chunks` row: its index, the count and its character span in
  the logged text. Each reaches FTS5, the keyword projection, the graph and the vectors through the outbox, in the
  batch's one transaction;
- the decision: kept, by rule (policy "long-turn"), never judged. The heuristic's signals (novelty, surprise) and
  an LLM judge's prompt mean nothing over a 200 KB text; whoever pasted a document meant it to be there.

`get(chunk, original=True)` reads the whole turn back from the log (`source_turn_id` leads to it); an erase of the
turn or of any chunk takes the turn and every chunk (storage/erase_records.py: a memory's turn, a turn's memories).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from agent_memory.cognition.chunking import Chunk, split_turn
from agent_memory.models import (
    DecisionPath,
    EmotionalContext,
    LogPosition,
    LogRecord,
    Memory,
    MemoryId,
    MemoryType,
    SaveDecision,
    TurnResult,
    fresh_memory,
)
from agent_memory.storage.journal import logged_turn
from agent_memory.storage.rows import ChunkCommit, ImagePlace, StoredImage, TurnCommit, image_commit

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
POLICY = "long-turn"


@dataclass(frozen=True, slots=True)
class _Part:
    chunk: Chunk
    entities: tuple[str, ...]
    emotion: EmotionalContext


class LongTurns:
    """Decides which turns are long and builds their commits; the write path commits them with the batch."""

    def __init__(
        self,
        *,
        max_bytes: int,
        chunk_tokens: int,
        embed: Embed,
        embedding_model: Callable[[], str],
        entities: Callable[[str], tuple[str, ...]],
        emotion: Callable[[str], EmotionalContext],
    ) -> None:
        self.max_bytes, self.chunk_tokens = max_bytes, chunk_tokens
        self._embed, self._model, self._entities, self._emotion = embed, embedding_model, entities, emotion

    def is_long(self, text: str) -> bool:
        """Over `max_content_bytes` in UTF-8; the length in characters settles most turns without encoding them."""
        if len(text) * 4 <= self.max_bytes:
            return False
        return len(text) > self.max_bytes or len(text.encode("utf-8")) > self.max_bytes

    async def commits(
        self,
        records: Sequence[LogRecord],
        positions: Sequence[LogPosition],
        images: Sequence[Sequence[StoredImage]],
        now: datetime,
    ) -> list[tuple[TurnCommit, TurnResult]]:
        """Each long turn's commit (its turn row, decision, chunk memories and images) and its result."""
        parts = await asyncio.to_thread(lambda: [self._parts(r) for r in records])  # CPU: off the event loop
        texts = [part.chunk.text for turn in parts for part in turn]
        vectors = await self._embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        out, row = [], 0
        for record, position, shared, turn in zip(records, positions, images, parts, strict=True):
            commit = self._commit(record, position, shared, turn, vectors[row : row + len(turn)], now)
            row += len(turn)
            ids = tuple(MemoryId(c.memory.memory_id) for c in commit.chunks)
            pictures = tuple(image.memory.memory_id for image in commit.images)
            result = TurnResult(record.turn_id, position, True, ids[0], commit.decision, pictures, ids)
            out.append((commit, result))
        return out

    def _parts(self, record: LogRecord) -> list[_Part]:
        given = record.emotional_context
        return [
            _Part(chunk, self._entities(chunk.text), given if given is not None else self._emotion(chunk.text))
            for chunk in split_turn(record.content, max_tokens=self.chunk_tokens)
        ]

    def _commit(
        self,
        record: LogRecord,
        position: LogPosition,
        images: Sequence[StoredImage],
        parts: Sequence[_Part],
        vectors: np.ndarray,
        now: datetime,
    ) -> TurnCommit:
        turn = logged_turn(record, position)
        size = len(record.content.encode("utf-8"))
        decision = self._decision(size, len(parts))
        model = self._model()
        chunks = tuple(
            ChunkCommit(
                self._memory(record, part, decision, now), vector.astype("<f4").tobytes(), model,
                part.chunk.index, len(parts), part.chunk.start, part.chunk.end,
            )
            for part, vector in zip(parts, vectors, strict=True)
        )  # fmt: skip
        mood = record.emotional_context or EmotionalContext()
        where = ImagePlace(record.namespace, record.session_id, record.at, record.turn_id)
        shared = tuple(image_commit(image, where, now, emotion=mood) for image in images)
        return TurnCommit(turn, decision, images=shared, chunks=chunks)

    def _decision(self, size: int, count: int) -> SaveDecision:
        reason = (
            f"kept: a long turn of {size} bytes (over max_content_bytes={self.max_bytes}), logged whole and "
            f"remembered in {count} chunks of at most {self.chunk_tokens} tokens"
        )
        facts = {"bytes": float(size), "chunks": float(count)}
        inputs = {"bytes": size, "chunks": count, "chunk_tokens": self.chunk_tokens}
        return SaveDecision(True, reason, DecisionPath.RULE, MemoryType.EPISODIC, 1.0, 0.5, facts, inputs, POLICY)

    @staticmethod
    def _memory(record: LogRecord, part: _Part, decision: SaveDecision, now: datetime) -> Memory:
        return fresh_memory(
            namespace=record.namespace,
            memory_type=decision.memory_type,
            content=part.chunk.text,
            keywords=(),
            entities=part.entities,
            created_at=now,
            event_at=record.at,
            valence=part.emotion.valence,
            arousal=part.emotion.arousal,
            importance=decision.importance,
            confidence=decision.confidence,
            source_turn_id=record.turn_id,
            session_id=record.session_id,
            turn_number=record.turn_number,
            role=record.role,
        )
