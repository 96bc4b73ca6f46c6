"""The projector: applies outbox rows from SQLite to the graph and the vectors, idempotently.

A memory change and its outbox rows commit in one SQLite transaction; this is the only road from the
records to the projections. Every operation is state-based (project the row as it is now), so applying a row
twice, or after a crash half-way, converges to the same projections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from agent_memory.models import Memory, MemoryId
from agent_memory.projection_models import OutboxItem, VectorItem
from agent_memory.storage.base import GraphStore, VectorStore
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
TEXT = "text"
IMAGE = "image"
CONTEXT = "context"  # each turn memory with its neighbouring turns (context_vectors.py)


def vector_payload(memory: Memory) -> dict[str, str | int | float]:
    return {
        "namespace": memory.namespace,
        "type": memory.memory_type.value,
        "tier": memory.tier.value,
        "status": memory.status.value,
        "created_at": memory.created_at.isoformat(),
        "event_at": memory.event_at.timestamp(),  # the time layer's window (a range filter on a float index)
        "generation": memory.generation,
    }


def vector_items(rows: dict[str, tuple[bytes, Memory]]) -> list[VectorItem]:
    return [
        VectorItem(MemoryId(memory_id), np.frombuffer(blob, dtype="<f4").tolist(), vector_payload(memory))
        for memory_id, (blob, memory) in rows.items()
    ]


GRAPH_BATCHES = 4
"""The graph's drain takes up to this many batches' rows in one transaction when that many are pending: a backlog
(an import into a large store, the entity refresh) is projected with fewer checkpoints. The refresh of the
LongMemEval dev store's 11,033 memories: 58 s of graph work in transactions of 256 rows, 32 s in ones of 1,024."""
GATHER_DELAYS = 8
"""While writes keep adding outbox rows, the graph's drain waits up to this many more `delay`s for a whole batch."""

SCOPES = ("payload", "vectors", "all")
"""What an outbox row asks to redo, narrowest first; a memory with several rows in a batch gets the widest."""


def _widest_scopes(items: Sequence[OutboxItem]) -> dict[str, str]:
    widest: dict[str, str] = {}
    for item in items:
        known = widest.get(item.memory_id, "payload")
        widest[item.memory_id] = max(known, item.scope, key=SCOPES.index)
    return widest


class _NothingPending:
    """Whether no work of a kind waits, asking SQLite (`probe`) only when something was committed since it was
    last found so: a read that finds nothing to apply then costs no query at all."""

    def __init__(self, records: SqliteRecords, probe: Callable[[], Awaitable[bool]]) -> None:
        self._records, self._probe = records, probe
        self._clean_at = -1  # records.commits when nothing was last found pending

    async def holds(self) -> bool:
        if self._records.commits == self._clean_at:
            return True
        seen = self._records.commits
        if await self._probe():
            return False
        self._clean_at = seen
        return True


class Projector:
    """Drains the outbox into Kuzu and Qdrant; background tasks keep it drained between calls.

    Two of them: one applies the vector parts and the keywords `read_delay` after a write (what the next search
    would otherwise apply on its own path first), the other everything, the graph included, `delay` after it (per
    row the graph is the costly part, so it gathers a batch, and while writes keep coming it gathers a whole one:
    `_gather`). A search never waits for either: it applies what live writes left pending itself
    (catch_up_for_read), under the same lock, so it sees every write made before it. An import's batch is applied
    for reads before the import's call returns (settle_for_reads), so a search does not wait for an import."""

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
        read_delay: timedelta | None = None,
        keywords: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        """`keywords` derives a memory's keywords from its content for the pending_keywords rows (key phrases
        in the manager); without it those rows wait."""
        self._records, self._graph, self._vectors = records, graph, vectors
        self._keywords = keywords
        self._clock, self._batch, self._retry, self._delay = clock, batch, retry_delay, delay
        self._read_delay = read_delay  # None: no eager task, the reads and the whole drain apply the vector parts
        self._lock = asyncio.Lock()  # the whole drain
        self._read_lock = asyncio.Lock()  # the vector parts and the keywords, which reads apply themselves
        self._all_done = _NothingPending(records, records.has_pending)
        self._read_done = _NothingPending(records, records.has_pending_for_reads)
        self._live_applied = -1  # records.live_commits when a drain for reads last began: what it covered
        self._wake = asyncio.Event()
        self._wake_reads = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reads_task: asyncio.Task[None] | None = None
        self.applied = 0
        self.graph_batches = 0  # graph transactions applied: how well `_gather` batches a stream of writes
        self.counts: dict[str, dict[str, int]] = {"graph": {}, "vectors": {}}
        """The graph's rows per table and the vectors per collection, as of the last batch applied (or rebuild):
        what stats() reports, so that it never waits on an engine the writers keep busy."""

    def start(self) -> None:
        self._task = asyncio.create_task(
            self._run(self._wake, self._delay, self.drain, gather=True), name="outbox-projector"
        )
        if self._read_delay is not None:
            self._reads_task = asyncio.create_task(
                self._run(self._wake_reads, self._read_delay, self.settle_for_reads), name="outbox-projector-reads"
            )

    def notify(self) -> None:
        self._wake.set()
        self._wake_reads.set()

    async def stop(self) -> None:
        for task in (self._reads_task, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._reads_task = None

    async def _run(
        self, wake: asyncio.Event, delay: timedelta, apply: Callable[[], Awaitable[int]], *, gather: bool = False
    ) -> None:
        while True:
            await wake.wait()
            try:
                pending = await self._records.pending_outbox_count() if gather else 0
                await asyncio.sleep(delay.total_seconds())  # gather a batch (and let the write that woke it end)
                if gather:
                    await self._gather(delay, pending)
                wake.clear()
                await apply()
            except Exception:
                log.exception("projector: applying the outbox failed; retrying in %s", self._retry)
                await asyncio.sleep(self._retry.total_seconds())
                wake.set()

    async def _gather(self, delay: timedelta, pending: int) -> None:
        """While the rows waiting grow from one `delay` to the next (an import, a busy agent), wait for a whole
        batch, up to GATHER_DELAYS more delays; a live turn (no new row since it woke the task) is applied at once.

        Kuzu checkpoints the whole database at the commit after a COPY, so a graph transaction costs about the
        same for 90 memories as for 256: upserts in batches of 128 took 1.0-1.1 ms of graph time a memory, in
        batches of 512, 0.33-0.38 ms (a 20,000-memory graph, batches as the projector sends them). Nothing reads
        the graph on the way to an answer (retrieval walks SQLite), and `drain()` called directly (flush, settle,
        the sleep jobs) does not wait."""
        for _ in range(GATHER_DELAYS):
            waiting = await self._records.pending_outbox_count()
            if waiting <= pending or waiting >= self._batch:
                return
            pending = waiting
            await asyncio.sleep(delay.total_seconds())

    async def drain(self) -> int:
        """Apply every outbox row pending when it starts (its vector part first, then its graph part) and derive
        every pending memory's keywords; returns how many outbox rows were applied. Rows written while it applies
        a part batch are left to the next drain: taking them at once would cost a graph transaction (a Kuzu
        checkpoint) for the few rows a stream of writes adds meanwhile, and their notify has woken the task."""
        if not self._lock.locked() and await self._all_done.holds():  # nothing to apply is the common case
            return 0
        applied = 0
        async with self._lock:
            await self.drain_for_reads()
            while items := await self._records.pending_outbox(self._batch * GRAPH_BATCHES):
                await self._apply_graph(items)
                applied += len(items)
                if len(items) < self._batch * GRAPH_BATCHES:  # that was all that was pending
                    break
            if applied:
                await self.recount()
        self.applied += applied
        return applied

    async def keywords_of(self, memory_id: str, content: str) -> tuple[str, ...]:
        """The keywords the projector will derive for a memory still waiting for them: what a read shows meanwhile
        (so it need not wait for the projector's queue)."""
        derive = self._keywords
        return tuple(await asyncio.to_thread(_derived, derive, memory_id, content)) if derive else ()

    async def recount(self) -> None:
        """Count the projections again (after a batch, a rebuild, or on open)."""
        graph = await self._graph.counts()
        self.counts = {"graph": graph, "vectors": {c: await self._vectors.count(c) for c in (TEXT, IMAGE, CONTEXT)}}

    async def settle_for_reads(self) -> int:
        """Everything a search reads, applied: the vector parts and keywords (drain_for_reads), then the keyword
        index's share (KeywordProjection.catch_up). The eager task runs it after a write, and an import's batch
        before its call returns (MemoryManager.process_turns(bulk=True)): a search does not wait for an import."""
        applied = await self.drain_for_reads()
        if (index := self._records.keyword_index) is not None:
            await index.catch_up()
        return applied

    async def catch_up_for_read(self) -> int:
        """What a search applies first: the projection work of the writes that were not an import's batch
        (SqliteRecords.live_commits), with whatever else is pending then. An import's batches are applied by the
        import's own call (settle_for_reads), so a search during an import does not wait for them; it sees each
        batch whose call has returned. Returns how many rows' vector parts it applied."""
        if self._records.live_commits == self._live_applied:
            return 0
        return await self.drain_for_reads(for_read=True)

    @contextlib.asynccontextmanager
    async def vectors_held(self) -> AsyncIterator[None]:
        """No vector part is applied meanwhile: the index job requeues the rows a shard copy lacks and swaps the copy
        in inside this, so a row cannot be applied to the shard going out after it was requeued (sleep/index.py)."""
        async with self._read_lock:
            yield

    async def drain_for_reads(self, *, for_read: bool = False) -> int:
        """What a search needs first: the vector part of every pending row (payloads, vectors, deletions) and the
        pending keywords. The graph part waits for drain(), which the background task runs: retrieval walks
        SQLite, not Kuzu. Returns how many rows' vector parts it applied. `for_read`: a search that waited for
        the lock returns at once when the drain before it covered every live write it must see."""
        live = self._records.live_commits
        if not self._read_lock.locked() and await self._read_done.holds():
            self._live_applied = max(self._live_applied, live)
            return 0
        applied = 0
        async with self._read_lock:
            if for_read and self._live_applied >= live:
                return 0
            while items := await self._records.pending_outbox(self._batch, vectors=True):
                await self._apply_vectors(items)
                applied += len(items)
            await self._derive_keywords()
            self._live_applied = max(self._live_applied, live)
        return applied

    async def _derive_keywords(self) -> None:
        derive = self._keywords
        if derive is None:
            return
        while pending := await self._records.pending_keywords(self._batch):
            found = await asyncio.to_thread(
                lambda: [(m, content, _derived(derive, m, content)) for m, content in pending]
            )
            await self._records.set_keywords(found)

    async def _apply_vectors(self, items: Sequence[OutboxItem]) -> None:
        widest = _widest_scopes(items)
        moved: dict[str, int] = {}  # points moved out of each HNSW index, counted as the rows are marked
        try:
            payload = [i for i, scope in widest.items() if scope == "payload"]
            gone = await self._project_payloads(payload, moved) if payload else []
            rest = [i for i, scope in widest.items() if scope != "payload"]
            memories = await self._records.get_memories(rest)
            gone += [MemoryId(i) for i in rest if i not in memories]
            if memories:
                again = {i for i, m in memories.items() if widest[i] == "vectors" or m.revision > 1}
                await self._project_vectors(memories, again, moved)
            if gone:
                for collection in (TEXT, IMAGE, CONTEXT):
                    await self._vectors.delete(collection, gone)
        except Exception as exc:
            await self._records.mark_outbox([i.outbox_id for i in items], now=self._clock(), error=repr(exc))
            raise
        await self._records.mark_outbox([i.outbox_id for i in items], now=self._clock(), vectors_only=True, moved=moved)

    async def _apply_graph(self, items: Sequence[OutboxItem]) -> None:
        """The graph part of rows whose vector part is applied: each 'all' memory as it is now, and the memories
        that are gone."""
        if undone := [i for i in items if not i.vectors_done]:  # written since drain_for_reads looked
            async with self._read_lock:
                await self._apply_vectors(undone)
        widest = _widest_scopes(items)
        try:
            wanted = [i for i, scope in widest.items() if scope == "all"]
            present = set(await self._records.memory_ids_among(list(widest)))
            if changed := [i for i in wanted if i in present]:
                await self._graph.upsert_memories(await self._records.graph_memories(changed))
            if gone := [MemoryId(i) for i in widest if i not in present]:
                await self._graph.delete_memories(gone)
        except Exception as exc:
            await self._records.mark_outbox([i.outbox_id for i in items], now=self._clock(), error=repr(exc))
            raise
        await self._records.mark_outbox([i.outbox_id for i in items], now=self._clock())
        self.graph_batches += 1

    async def _project_payloads(self, memory_ids: Sequence[str], moved: dict[str, int]) -> list[MemoryId]:
        """Set the tier, status and event time of each memory's points, a call a collection, adding the points to
        `moved` (a changed payload moves a point out of the HNSW index: sleep/index.py); returns the memories that
        are gone."""
        states = await self._records.payload_states(memory_ids)
        payloads: dict[str, list[tuple[MemoryId, dict[str, Any]]]] = {}
        for memory_id, tier, status, event_at, text, image, context in states:
            payload = {"tier": tier, "status": status, "event_at": event_at}
            for collection, present in ((TEXT, text), (IMAGE, image), (CONTEXT, context)):
                if present:
                    payloads.setdefault(collection, []).append((MemoryId(memory_id), payload))
        for collection, items in payloads.items():
            await self._vectors.set_payloads(collection, items)
            moved[collection] = moved.get(collection, 0) + len(items)
        found = {state[0] for state in states}
        return [MemoryId(i) for i in memory_ids if i not in found]

    async def _project_vectors(self, memories: dict[str, Memory], again: set[str], moved: dict[str, int]) -> None:
        """Each memory's text vector and, for an image, its CLIP vector, with their payloads as the memories are
        now. A memory with no text vector (an image without a caption) is taken out of the text collection.
        `again`: the memories projected before (a new vector, a revision), whose points an upsert moves out of the
        HNSW index as a payload change does (added to `moved`: sleep/index.py)."""
        text = await self._records.stored_vectors(memories)
        images = await self._records.stored_vectors(memories, image=True)
        context = await self._records.stored_context_vectors(memories)
        await self._vectors.upsert(TEXT, vector_items(text))
        if untexted := [MemoryId(i) for i in memories if i not in text]:
            await self._vectors.delete(TEXT, untexted)
        if images:
            await self._vectors.upsert(IMAGE, vector_items(images))
        if context:
            await self._vectors.upsert(CONTEXT, vector_items(context))
        for collection, upserted in ((TEXT, text), (IMAGE, images), (CONTEXT, context)):
            moved[collection] = moved.get(collection, 0) + len(again.intersection(upserted))
        if uncontexted := [MemoryId(i) for i in memories if i not in context]:  # none yet, or its basis is gone
            await self._vectors.delete(CONTEXT, uncontexted)


def _derived(derive: Callable[[str], Sequence[str]], memory_id: str, content: str) -> Sequence[str]:
    """The keywords of one memory; a failure leaves it without any (FTS still has its content) rather than hold up
    the projector."""
    try:
        return derive(content)
    except Exception:
        log.warning("keywords of memory %s could not be derived; it keeps none", memory_id, exc_info=True)
        return ()
