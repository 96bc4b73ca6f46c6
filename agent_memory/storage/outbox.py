"""The projector: applies outbox rows from SQLite to the graph and the vectors, idempotently.

A memory change and its outbox rows commit in one SQLite transaction; this is the only road from the
records to the projections. Every operation is state-based (project the row as it is now), so applying a row
twice, or after a crash half-way, converges to the same projections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import numpy as np

from agent_memory.models import Memory, MemoryId, OutboxItem, VectorItem
from agent_memory.storage.base import GraphStore, VectorStore
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
TEXT = "text"
IMAGE = "image"


def vector_payload(memory: Memory) -> dict[str, str | int]:
    return {
        "namespace": memory.namespace,
        "type": memory.memory_type.value,
        "tier": memory.tier.value,
        "status": memory.status.value,
        "created_at": memory.created_at.isoformat(),
        "generation": memory.generation,
    }


def vector_items(rows: dict[str, tuple[bytes, Memory]]) -> list[VectorItem]:
    return [
        VectorItem(MemoryId(memory_id), np.frombuffer(blob, dtype="<f4").tolist(), vector_payload(memory))
        for memory_id, (blob, memory) in rows.items()
    ]


class Projector:
    """Drains the outbox into Kuzu and Qdrant; a background task keeps it drained between calls."""

    def __init__(
        self,
        records: SqliteRecords,
        graph: GraphStore,
        vectors: VectorStore,
        *,
        clock: Callable[[], datetime],
        batch: int = 256,
        retry_delay: timedelta = timedelta(seconds=1),
        delay: timedelta = timedelta(0),
    ) -> None:
        self._records, self._graph, self._vectors = records, graph, vectors
        self._clock, self._batch, self._retry, self._delay = clock, batch, retry_delay, delay
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.applied = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-projector")

    def notify(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self._delay.total_seconds())  # gather a batch: per-row graph work is costly
            self._wake.clear()
            try:
                await self.drain()
            except Exception:
                log.exception("projector: applying the outbox failed; retrying in %s", self._retry)
                await asyncio.sleep(self._retry.total_seconds())
                self._wake.set()

    async def drain(self) -> int:
        """Apply every pending outbox row; returns how many were applied."""
        applied = 0
        async with self._lock:
            while items := await self._records.pending_outbox(self._batch):
                await self._apply(items)
                applied += len(items)
        self.applied += applied
        return applied

    async def _apply(self, items: Sequence[OutboxItem]) -> None:
        ids = list(dict.fromkeys(item.memory_id for item in items))
        try:
            memories = await self._records.get_memories(ids)
            gone = [MemoryId(i) for i in ids if i not in memories]
            if memories:
                await self._project(memories)
            if gone:
                await self._graph.delete_memories(gone)
                await self._vectors.delete(TEXT, gone)
                await self._vectors.delete(IMAGE, gone)
        except Exception as exc:
            await self._records.mark_outbox([i.outbox_id for i in items], now=self._clock(), error=repr(exc))
            raise
        await self._records.mark_outbox([i.outbox_id for i in items], now=self._clock())

    async def _project(self, memories: dict[str, Memory]) -> None:
        """Each memory as it is now: graph node and edges, its text vector, its CLIP vector if it is an image.
        A memory with no text vector (an image without a caption) is taken out of the text collection."""
        text = await self._records.stored_vectors(memories)
        images = await self._records.stored_vectors(memories, image=True)
        await self._graph.upsert_memories(await self._records.graph_memories(list(memories)))
        await self._vectors.upsert(TEXT, vector_items(text))
        if untexted := [MemoryId(i) for i in memories if i not in text]:
            await self._vectors.delete(TEXT, untexted)
        if images:
            await self._vectors.upsert(IMAGE, vector_items(images))
