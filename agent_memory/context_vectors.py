"""Context vectors: each turn memory's second vector, of its words together with the turns around it.

A turn's meaning often lives in its neighbours: "It is bright orange" is about what the turn before named, and a
question is answered by the turn after it. The write path already adds the turn before to a short turn's vector
(write_path.py), but it cannot see the next turn, which has not been said yet. So once a memory's next turn is
logged, this component embeds the previous turn, the memory's words and the next turn as one text, and stores the
result beside the memory (`context_vectors`, with the outbox rows that project it to the `context` collection, in
one transaction). Retrieval searches that collection as a layer of its own (`retrieval.context_weight`) with the
query's one embedding, and fuses it with the others.

It runs off the write path: a background task that works only while no one writes (each batch of
`embedding.context_batch` waits for `embedding.context_delay` with no commit), and `catch_up()` for a
caller that wants every vector now (the benchmark after an ingest, the `context` sleep job). Neighbours are turns
of the log, kept as memories or not, read back from the journal; a memory is computed again when its basis (its
revision and its neighbours' turn ids) changes: a next turn arrived, the memory was updated, a neighbour was
erased. A session's last turn gets a vector from the turn before alone, and another once a next turn comes. Only
a turn memory up to `embedding.context_max_chars` (600) gets one: a long turn carries its own meaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from agent_memory.config import EmbeddingConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.storage.base import Journal
from agent_memory.storage.context_records import ContextWork
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
CATCH_UP_BATCH = 128  # context vectors per transaction when a caller asks for all of them at once


def context_text(
    previous: str | None, content: str, following: str | None, *, turn_words: int, neighbour_words: int
) -> str:
    """The text a context vector embeds: the end of the turn before, the memory's words, the start of the turn
    after, one per line. Each part is capped in words so the memory's own words always fit the encoder's window
    (256 word pieces for MiniLM) and a long neighbour cannot crowd them out."""
    parts = []
    if previous and neighbour_words:
        parts.append(" ".join(previous.split()[-neighbour_words:]))
    parts.append(" ".join(content.split()[:turn_words]))
    if following and neighbour_words:
        parts.append(" ".join(following.split()[:neighbour_words]))
    return "\n".join(parts)


class ContextVectors:
    """Computes and stores the context vectors that are missing or out of date; see the module docstring."""

    def __init__(
        self,
        records: SqliteRecords,
        journal: Journal,
        embedder: Embedder,
        config: EmbeddingConfig,
        *,
        clock: Callable[[], datetime],
        notify: Callable[[], None],
    ) -> None:
        """`notify` wakes the projector after a batch is stored (its outbox rows carry the vectors to Qdrant)."""
        self._records, self._journal, self._embedder = records, journal, embedder
        self._config, self._clock, self._notify = config, clock, notify
        self._lock = asyncio.Lock()  # one batch at a time, the background task's or a caller's
        self._task: asyncio.Task[None] | None = None
        self.computed = 0

    @property
    def enabled(self) -> bool:
        return self._config.context_vectors

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._run(), name="context-vectors")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def catch_up(self) -> dict[str, int]:
        """Compute every missing or out-of-date context vector now, in batches (and drop those of memories now over
        `context_max_chars`); returns how many were computed and how many were due. Does nothing when context
        vectors are off."""
        if not self.enabled:
            return {"computed": 0, "wanted": 0}
        dropped = await self._records.drop_long_context(self._config.context_max_chars, now=self._clock())
        if dropped:
            self._notify()
        wanted = await self._records.context_wanted(self._config.context_max_chars)
        computed, size = 0, max(self._config.context_batch, CATCH_UP_BATCH)
        for start in range(0, len(wanted), size):
            computed += await self._batch(wanted[start : start + size])
        return {"computed": computed, "wanted": len(wanted)}

    async def _run(self) -> None:
        """Every `context_delay`, when nothing was committed during it and something was since the last look found
        nothing to do, compute one batch."""
        pause = self._config.context_delay.total_seconds()
        settled = -1  # records.commits when nothing was last found wanted
        while True:
            seen = self._records.commits
            await asyncio.sleep(pause)
            if self._records.commits != seen or seen == settled:  # someone is writing, or nothing new since
                continue
            try:
                if await self._records.drop_long_context(self._config.context_max_chars, now=self._clock()):
                    self._notify()
                wanted = await self._records.context_wanted(self._config.context_max_chars)
                if not wanted:
                    settled = seen
                    continue
                await self._batch(wanted[: self._config.context_batch])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("context vectors: a batch failed; trying again after the next pause")

    async def _batch(self, wanted: Sequence[tuple[str, str, str | None, str | None]]) -> int:
        async with self._lock:
            work = await self._records.context_work(wanted)
            if not work:
                return 0
            texts = await self._texts(work)
            vectors = await self._embedder.embed(texts)
            rows = [(w.memory_id, w.basis, _blob(v)) for w, v in zip(work, vectors, strict=True)]
            stored = await self._records.set_context_vectors(rows, now=self._clock())
        self.computed += stored
        self._notify()
        return stored

    async def _texts(self, work: Sequence[ContextWork]) -> list[str]:
        positions = list(dict.fromkeys(p for w in work for p in (w.previous, w.next) if p is not None))
        logged = await self._journal.read_each(positions)  # an unreadable record leaves that side out
        said = {p: record.content for p, record in zip(positions, logged, strict=True) if record is not None}
        words, around = self._config.context_turn_words, self._config.context_neighbour_words
        return [
            context_text(
                said.get(w.previous) if w.previous else None,
                w.content,
                said.get(w.next) if w.next else None,
                turn_words=words,
                neighbour_words=around,
            )
            for w in work
        ]


def _blob(vector: Any) -> bytes:
    array = np.asarray(vector, dtype="<f4")
    return array.tobytes()
