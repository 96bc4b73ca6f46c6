"""What retrievals record (the event, one access per returned memory, a gap), written behind them in batches.

A retrieval's record is held in memory first and written with the others in one transaction: once RECORD_BATCH
are waiting, after `retrieval.record_delay` without a new one, or when something reads what records write
(`flush`: settle(), and so get(), stats and the sleep jobs; a turn's save decision when a waiting record opens a
gap; close). Writing each record on its own cost every retrieval on the 10k synthetic store 2.5-3 ms (p50 and
p95, back to back): each commit empties the page cache of every reader connection, so the next retrieval's reads
all start cold, and the writer's thread competes with them for the two cores.

Until it is written, a record's accesses are laid over the rows that retrievals read (`overlay`), so ranking (decay
reads each memory's access count and last access) and the memories returned see every earlier retrieval, exactly
as when each record was written at once. A write's statements run beside the retrievals; its commit and the retrievals
reading rows never overlap: the commit waits for those reading, and a retrieval that starts meanwhile waits for
the commit, so no access is counted twice or missed.
A crash loses the records not yet written (at most RECORD_BATCH, or `record_delay` of them); never a memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np

from agent_memory.models import Memory, RetrievalGap
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)

RECORD_BATCH = 32  # records written together at most; more waiting than this starts a write at once


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
        self._unwritten: list[RetrievalRecord] = []  # taken by the write under way, not yet committed
        self._accessed: dict[str, tuple[int, datetime]] = {}  # memory -> (accesses not written, the last one's time)
        self._readers = 0
        self._writing = self._writer_waits = False
        self._turn = asyncio.Condition()
        self._write: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, record: RetrievalRecord) -> None:
        """Hold `record` for the next write, and schedule that write."""
        self._pending.append(record)
        self._count(record)
        if len(self._pending) >= self._batch:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._start)

    def overlay(self, memories: Mapping[str, Memory]) -> dict[str, Memory]:
        """`memories` as they will be once the waiting records are written: each access counted, the last one's
        time as the last access (the trigger of migration 0015 does the same)."""
        if not self._accessed:
            return dict(memories)
        laid = dict(memories)
        for memory_id, memory in memories.items():
            accessed = self._accessed.get(memory_id)
            if accessed is not None:
                count, last = accessed
                laid[memory_id] = replace(memory, access_count=memory.access_count + count, last_accessed_at=last)
        return laid

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        """Around a retrieval's reads of rows: no write runs meanwhile (one that is waiting goes first)."""
        async with self._turn:
            await self._turn.wait_for(lambda: not (self._writing or self._writer_waits))
            self._readers += 1
        try:
            yield
        finally:
            async with self._turn:
                self._readers -= 1
                self._turn.notify_all()

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

    def _count(self, record: RetrievalRecord) -> None:
        for memory_id, _ in record.results:
            count, _ = self._accessed.get(memory_id, (0, record.at))
            self._accessed[memory_id] = (count + 1, record.at)

    def _recount(self) -> None:
        self._accessed = {}
        for record in (*self._unwritten, *self._pending):
            self._count(record)

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and (self._write is None or self._write.done()):
            self._write = asyncio.create_task(self._write_pending(), name="retrieval-records")

    async def _write_pending(self) -> None:
        batch, self._pending = self._pending, []
        self._unwritten = batch  # still laid over the rows read until its commit
        try:
            await self._store(batch)
        finally:
            self._unwritten = []  # committed, or failed and logged
            self._recount()
        if len(self._pending) >= self._batch:
            self._write = asyncio.create_task(self._write_pending(), name="retrieval-records")
        elif self._pending and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._start)

    async def _store(self, batch: Sequence[RetrievalRecord]) -> None:
        """One transaction for the batch; when it fails (a result forgotten meanwhile), each record on its own.
        Retrievals read on while the statements run (they see the rows before them, and the batch in the
        overlay); only the commit waits for them, and they for it."""
        try:
            gaps = [(r.gap, await self._gap_vector(r)) for r in batch if r.gap is not None]
            await self._records.record_retrievals([_event(r) for r in batch], gaps, gate=lambda: self._commit(batch))
            return
        except Exception:
            if len(batch) == 1:
                log.exception("the retrieval of %r could not be recorded (access, event, gap)", batch[0].query[:80])
                return
        for record in batch:
            await self._store([record])

    @asynccontextmanager
    async def _commit(self, batch: Sequence[RetrievalRecord]) -> AsyncIterator[None]:
        """Around the commit of `batch`: no retrieval reads rows meanwhile, and once it is committed its accesses
        leave the overlay (the rows hold them now)."""
        async with self._turn:
            self._writer_waits = True
            await self._turn.wait_for(lambda: self._readers == 0)
            self._writing, self._writer_waits = True, False
        try:
            yield
            committed = {id(record) for record in batch}
            self._unwritten = [r for r in self._unwritten if id(r) not in committed]
            self._recount()
        finally:
            async with self._turn:
                self._writing = False
                self._turn.notify_all()

    async def _gap_vector(self, record: RetrievalRecord) -> bytes:
        vector = record.vector if record.vector is not None else await self._embed_query(record.query)
        return vector.astype("<f4").tobytes()


def _event(record: RetrievalRecord) -> tuple[str, str, str, datetime, int, Sequence[tuple[str, float]]]:
    return record.retrieval_id, record.namespace, record.query, record.at, record.k, record.results
