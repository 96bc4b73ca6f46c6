"""The vector upgrade: what the int8 document model stored, made again in float32 while nothing is written.

int8 passes embed about 1.5x the texts a second of float32 ones, and their vectors cost recall (LoCoMo dev at
2,048 tokens: -0.0062, lower in every fold; docs/benchmarks.md, "What is stored: float32 again"). So a bulk
import (`agent-memory ingest`, `embedding.import_precision`) stores int8 vectors to finish sooner, and a store
made while int8 was the default holds them too. Either way, once the store is opened with the float32 document
model, this component embeds those memories again, as the write path would have (reembed.py, `embed_as_written`:
a short turn with the turn before it), and replaces each vector in place with the outbox row that carries it to
Qdrant, in one transaction a batch. Nothing else changes: not the memory's revision, words or links.

It runs off the write path, as the context vectors do: idle work (idle_work.py) that starts once no write was
committed and no question asked for `embedding.upgrade_delay`, then takes batches of `embedding.upgrade_batch` back
to back until someone writes or asks (a question waits on the model thread for one batch at most), and
`catch_up()` for a caller that wants every vector now. A memory revised or re-embedded by an erase while its new vector was made
keeps what it has (`replace_vectors` replaces only the vector it read), and is taken again by a later batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from functools import partial

import numpy as np

from agent_memory.config import EmbeddingConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.idle_work import IdleWork
from agent_memory.reembed import embed_as_written
from agent_memory.storage.base import Journal
from agent_memory.storage.records import SqliteRecords

INT8 = "-int8"  # the suffix of the int8 document model's name (embeddings/onnx_text.py)
CATCH_UP_BATCH = 128  # vectors per transaction when a caller asks for all of them at once


class VectorUpgrade:
    """Replaces the int8 document model's vectors with the float32 model's; see the module docstring."""

    def __init__(
        self,
        records: SqliteRecords,
        journal: Journal,
        embedder: Embedder,
        config: EmbeddingConfig,
        *,
        clock: Callable[[], datetime],
        notify: Callable[[], None],
        activity: Callable[[], int] | None = None,
    ) -> None:
        """`notify` wakes the projector after a batch is stored (its outbox rows carry the vectors to Qdrant).
        `activity` is a count that grows with every write and every question (the manager adds the retrievals
        recorded to records.commits); the background task runs only while it stands still but for its own
        batches. Without it, writes alone count."""
        self._records, self._journal, self._embedder = records, journal, embedder
        self._config, self._clock, self._notify = config, clock, notify
        self._activity = activity or (lambda: records.commits)
        self._lock = asyncio.Lock()  # one batch at a time, the background task's or a caller's
        self._idle = IdleWork(
            "vector upgrade",
            partial(self._batch, config.upgrade_batch),
            activity=self._activity,
            delay=config.upgrade_delay.total_seconds(),
            finished=f"every stored vector is now {embedder.name}'s",
        )
        self.upgraded = 0

    @property
    def stale(self) -> str | None:
        """The name of the vectors to make again: the int8 pass of the model that now stores in float32. None when
        what is stored is int8 (an import running) or the upgrade is off."""
        name = self._embedder.name
        if not self._config.upgrade_vectors or name.endswith(INT8):
            return None
        return name + INT8

    def start(self) -> None:
        if self.stale is not None:
            self._idle.start()

    async def stop(self) -> None:
        await self._idle.stop()

    async def left(self) -> int:
        """How many memories still hold a vector to make again."""
        stale = self.stale
        return await self._records.vectors_made_by_count(stale) if stale is not None else 0

    async def catch_up(self, progress: Callable[[int], None] | None = None) -> int:
        """Make every stale vector again now, CATCH_UP_BATCH a transaction; returns how many were replaced.
        `progress` gets the running total after each batch. A batch that replaced none (every one changed while it
        was made) ends it: the background task takes those."""
        done = 0
        while True:
            replaced, found = await self._batch(CATCH_UP_BATCH)
            done += replaced
            if progress is not None and found:
                progress(done)
            if found < CATCH_UP_BATCH or not replaced:
                return done

    async def _batch(self, size: int) -> tuple[int, int]:
        """Upgrade the oldest `size` stale vectors: (replaced, found)."""
        stale = self.stale
        if stale is None:
            return 0, 0
        async with self._lock:
            found = await self._records.vectors_made_by(stale, size)
            if not found:
                return 0, 0
            sources = [source for source, _ in found]
            vectors = await embed_as_written(
                sources, journal=self._journal, embed=self._embedder.embed, settings=self._config
            )
            rows = [
                (source.memory_id, read, np.asarray(vector, dtype="<f4").tobytes())
                for (source, read), vector in zip(found, vectors, strict=True)
            ]
            replaced = await self._records.replace_vectors(rows, model=self._embedder.name, now=self._clock())
        self.upgraded += replaced
        if replaced:
            self._notify()
        return replaced, len(found)
