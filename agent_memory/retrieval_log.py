"""What retrievals record (the event, one access per returned memory, a gap), written behind them in batches.

A retrieval's record is held in memory first and written with the others in one transaction: once RECORD_BATCH
are waiting, after `retrieval.record_delay` without a new one, or when something reads what records write
(`flush`: settle(), and so get(), stats and the sleep jobs; a turn's save decision when a waiting record opens a
gap; close). Writing each record on its own cost every retrieval on the 10k synthetic store 2.5-3 ms (p50 and
p95, back to back): each commit empties the page cache of every reader connection, so the next retrieval's reads
all start cold, and the writer's thread competes with them for the two cores.

Until it is written, a record's accesses are laid over the rows that retrievals read (`overlay`), so ranking
(decay reads each memory's access count and last access) and the memories returned see every earlier retrieval,
exactly as when each record was written at once. Nothing waits for a write: each batch is numbered, its
transaction stores its number (`retrieval_batches`, migration 0017), and every read of rows for ranking reads the
last number in the same statement, so from the same snapshot. A read that already counts a batch gets only the
later ones laid over it; a batch stays in memory after its commit until the reads that began before it are done.
A crash loses the records not yet written (at most RECORD_BATCH, or `record_delay` of them); never a memory.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np

from agent_memory.models import Memory, RetrievalGap
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)

RECORD_BATCH = 32  # records written together at most; more waiting than this starts a write at once
Accessed = dict[str, tuple[int, datetime]]  # memory -> (accesses not in the rows, the last one's time)


@dataclass(frozen=True, slots=True)
class RetrievalRecord:
    """One retrieval as it is recorded: its event (results best first) and, when it found nothing relevant, a gap
    with the vector it searched with (None: the query is embedded when the record is written)."""

    retrieval_id: str
    namespace: str
    query: str
    at: datetime
    k: int
    results: tuple[tuple[str, float], ...]
    gap: RetrievalGap | None = None
    vector: np.ndarray | None = None


@dataclass(slots=True)
class _Batch:
    number: int
    records: list[RetrievalRecord]
    accessed: Accessed = field(default_factory=dict)
    readers: set[int] = field(default_factory=set)  # reads under way when it was committed

    def __post_init__(self) -> None:
        for record in self.records:
            _count(self.accessed, record)


class RetrievalLog:
    def __init__(
        self,
        records: SqliteRecords,
        embed_query: Callable[[str], Awaitable[np.ndarray]],
        *,
        delay: timedelta,
        batch: int = RECORD_BATCH,
    ) -> None:
        self._records, self._embed_query = records, embed_query
        self._delay, self._batch = delay.total_seconds(), batch
        self._pending: list[RetrievalRecord] = []  # waiting for the next write
        self._accessed: Accessed = {}  # the pending records' accesses
        self._writing: _Batch | None = None  # the batch being written
        self._landed: list[_Batch] = []  # committed, kept for the reads that began before
        self._next = 1  # the next batch's number (open() continues from the database's)
        self._reads: set[int] = set()
        self._tokens = itertools.count()
        self._write: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.added = 0  # retrievals recorded since open: background work that yields to questions watches it

    async def open(self) -> None:
        self._next = await self._records.last_retrieval_batch() + 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, record: RetrievalRecord) -> None:
        """Hold `record` for the next write, and schedule that write."""
        self._pending.append(record)
        self.added += 1
        _count(self._accessed, record)
        if len(self._pending) >= self._batch:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._start)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a retrieval's reads of rows: the batches committed meanwhile stay in memory until it is done."""
        token = next(self._tokens)
        self._reads.add(token)
        try:
            yield
        finally:
            self._reads.discard(token)
            for batch in self._landed:
                batch.readers.discard(token)
            self._landed = [batch for batch in self._landed if batch.readers]

    def overlay(self, memories: Mapping[str, Memory], counted: int) -> dict[str, Memory]:
        """`memories`, read from rows that count the batches up to `counted`, as they will be once every record is
        written: each later access counted, the last one's time as the last access (as migration 0015's trigger
        sets them)."""
        layers = [b.accessed for b in self._landed if b.number > counted]
        if self._writing is not None and self._writing.number > counted:
            layers.append(self._writing.accessed)
        layers.append(self._accessed)  # oldest first, so the last access is the newest record's
        laid = dict(memories)
        for memory_id, memory in memories.items():
            count, last = 0, memory.last_accessed_at
            for layer in layers:
                accessed = layer.get(memory_id)
                if accessed is not None:
                    count, last = count + accessed[0], accessed[1]
            if count:
                laid[memory_id] = replace(memory, access_count=memory.access_count + count, last_accessed_at=last)
        return laid

    async def flush(self, *, gaps_only: bool = False) -> None:
        """Write every waiting record now and wait for it; with `gaps_only`, only when one of them opens a gap
        (or a write is under way). A record that cannot be written is logged and dropped, as before batching."""
        if gaps_only and not any(r.gap is not None for r in self._pending):
            if self._write is not None:
                await asyncio.shield(self._write)
            return
        while self._pending or (self._write is not None and not self._write.done()):
            self._start()
            assert self._write is not None
            await asyncio.shield(self._write)  # a cancelled caller leaves the write to finish

    async def aclose(self) -> None:
        await self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and (self._write is None or self._write.done()):
            self._write = asyncio.create_task(self._write_pending(), name="retrieval-records")

    async def _write_pending(self) -> None:
        batch = self._writing = _Batch(self._next, self._pending)
        self._next += 1
        self._pending, self._accessed = [], {}
        try:
            await self._store(batch.records, batch.number)
        finally:
            self._writing = None
            batch.readers = set(self._reads)  # a read that began before the commit may not count it
            if batch.readers:
                self._landed.append(batch)
        if len(self._pending) >= self._batch:
            self._write = asyncio.create_task(self._write_pending(), name="retrieval-records")
        elif self._pending and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._start)

    async def _store(self, records: Sequence[RetrievalRecord], number: int) -> None:
        """One transaction for the batch; when it fails (a result that no longer exists), each record on its own,
        under the same number: one bad record loses only itself."""
        try:
            gaps = [(r.gap, await self._gap_vector(r)) for r in records if r.gap is not None]
            await self._records.record_retrievals([_event(r) for r in records], gaps, batch=number)
            return
        except Exception:
            if len(records) == 1:
                log.exception("the retrieval of %r could not be recorded (access, event, gap)", records[0].query[:80])
                return
        for record in records:
            await self._store([record], number)

    async def _gap_vector(self, record: RetrievalRecord) -> bytes:
        vector = record.vector if record.vector is not None else await self._embed_query(record.query)
        return vector.astype("<f4").tobytes()


def _count(accessed: Accessed, record: RetrievalRecord) -> None:
    for memory_id, _ in record.results:
        count, _ = accessed.get(memory_id, (0, record.at))
        accessed[memory_id] = (count + 1, record.at)


def _event(record: RetrievalRecord) -> tuple[str, str, str, datetime, int, Sequence[tuple[str, float]]]:
    return record.retrieval_id, record.namespace, record.query, record.at, record.k, record.results
