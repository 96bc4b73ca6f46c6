"""The manager's read path: run the search layers concurrently, walk the graph, and rank.

This is part of the manager (with manager.py, the only code that reads more than one store); it lives apart so
each file stays readable. The ranking itself is pure and lives in cognition/ranking.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import numpy as np

from agent_memory.cognition.query_reading import LONG_QUERY_CHARS, QueryReading, read_query
from agent_memory.cognition.ranking import (
    Fused,
    Ranked,
    Signals,
    fuse_layers,
    layer_weights,
    prefers_assistant,
    rank,
    seeds_of,
)
from agent_memory.cognition.retrieval import query_words
from agent_memory.cognition.speakers import without_names
from agent_memory.cognition.timewords import EventAnchor, TimeQuery, TimeWindow
from agent_memory.config import Config, RetrievalConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.embeddings.visual import ClipEmbedder
from agent_memory.errors import ModelError, StorageError
from agent_memory.models import EmotionalContext, Memory, MemoryStatus, Revision
from agent_memory.projection_models import Between, GraphStep, VectorHit
from agent_memory.speakers import TranscriptSpeakers
from agent_memory.storage.base import VectorStore
from agent_memory.storage.grep import RipgrepJournalSearch
from agent_memory.storage.outbox import CONTEXT, IMAGE, TEXT
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
T = TypeVar("T")
Hits = list[tuple[str, float]]
Overlay = Callable[[Mapping[str, Memory], int], dict[str, Memory]]  # rows, the last batch they count
SUPERSEDED_SCAN = 500  # memories superseded since an as-of time, read to be scored against the query
RANKED_ON_THE_LOOP = 1_000
"""Up to this many candidates are ranked, packed and named on the event loop (a few ms); more, as a context of a
hundred thousand tokens or more asks for, on a worker thread: 4,463 took 0.26 s to pack and 0.17 s to rank."""


@dataclass(frozen=True, slots=True)
class Recalled:
    ranked: Ranked
    time: TimeQuery
    window: TimeWindow | None  # the parsed window, or the one an event anchor resolved to
    timings: Mapping[str, float] = field(default_factory=dict)  # milliseconds per stage
    best_similarity: float | None = None  # the semantic layer's best cosine; None when the layer did not run
    keywords: tuple[str, ...] = ()  # the query's content words, as the keyword layer searched them
    vector: np.ndarray | None = None  # the query text's embedding, when a vector layer needed it


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    namespace: str
    now: datetime
    mood: EmotionalContext | None = None
    as_of: datetime | None = None
    limit: int | None = None  # candidates per layer; None means retrieval.candidate_limit
    finalists: int | None = None  # the best fused candidates read and ranked (retrieve(k)); None ranks them all
    image: np.ndarray | None = None  # a query image's CLIP vector; the text may then be empty
    without: frozenset[str] = frozenset()  # search layers left out ("grep": what the stored text alone finds)
    retrieval: RetrievalConfig | None = None  # settings for this query in place of config.retrieval (notes' recall)


class Recall:
    def __init__(
        self,
        *,
        records: SqliteRecords,
        vectors: VectorStore,
        embedder: Embedder,
        grep: RipgrepJournalSearch,
        config: Config,
        images: Callable[[], Awaitable[ClipEmbedder | None]] | None = None,
        recent: Callable[[str], np.ndarray | None] | None = None,
        embedded: Callable[[str, np.ndarray], None] | None = None,
        speakers: TranscriptSpeakers | None = None,
    ) -> None:
        self.records, self.vectors = records, vectors
        self.speakers = speakers  # each namespace's transcript speakers, when questions may be read for them
        self.embedder, self.grep, self.config = embedder, grep, config
        self.images = images  # the image embedder, once image memory is known to be on (None when it is off)
        self._images_known: dict[str, tuple[int, bool]] = {}  # namespace -> (records.commits, has images)
        self.recent = recent  # the vector of a text the write path has just embedded, if it has
        self.embedded = embedded  # told each question's vector as the model gives it (the write path may keep it)

    def settings(self, query: Query) -> RetrievalConfig:
        """The retrieval settings `query` is ranked with: its own, or the configuration's."""
        return query.retrieval or self.config.retrieval

    async def run(self, query: Query, *, overlay: Overlay | None = None) -> Recalled:
        """Search every layer, walk the graph, rank. `overlay` lays what is not yet written over the candidates'
        rows, given the last batch of records each read counts: the accesses of earlier retrievals, which decay
        reads (retrieval_log.py)."""
        timings: dict[str, float] = {}
        config = self.settings(query)
        reading = await _read(query, config)
        parsed = reading.parsed
        window = parsed.window
        if window is None and parsed.anchor is not None:
            window = await self._resolve(parsed.anchor, query)
        embedded: dict[str, np.ndarray] = {}
        reads = config.neutral_speakers or config.speaker_weight > 0  # who a transcript's question names
        names = await self.speakers.named(query.namespace, query.text) if self.speakers and reads else ()
        embeds = without_names(query.text, names) if config.neutral_speakers else query.text
        rows = _Rows(self.records, overlay)
        try:
            rankings = await self._layers(reading, embeds, query, window, timings, embedded, rows)
            weights = layer_weights(config)
            if query.as_of is not None:  # what was current then, superseded since, is weighed beside the rest
                rankings = await self._with_superseded(rankings, query, embedded)
            if query.as_of is not None:  # what was not known then neither ranks nor seeds the walk
                hit_ids = [i for hits in rankings.values() for i, _ in hits]
                known = {i for i, m in (await rows.read(hit_ids)).items() if _known(m, query.as_of)}
                rankings = {name: [h for h in hits if h[0] in known] for name, hits in rankings.items()}
            rankings = above_floor(rankings, config.evidence_floor)
            fused = finalists(
                fuse_layers(rankings, weights=weights, rrf_k=config.rrf_k, method=config.fusion), query.finalists
            )
            rows.ask(list(fused[0]))  # read while the graph is walked
            steps = await _timed(timings, "graph", self._walk(fused[0], query.namespace, rows, config))
            memories = await rows.read(())
            if query.as_of is not None:
                memories = await self._as_it_was(
                    {i: m for i, m in memories.items() if _known(m, query.as_of)}, query.as_of
                )
        finally:
            rows.cancel()
        words = reading.words
        speaker = names[0] if len(names) == 1 else ""
        signals = Signals(query.now, query.mood, window, prefers_assistant(query.text), words, speaker)
        started = time.perf_counter()
        ranking = partial(rank, rankings, steps, memories, signals, config=config, decay=self.config.decay, fused=fused)
        ranked = ranking() if len(memories) <= RANKED_ON_THE_LOOP else await asyncio.to_thread(ranking)
        timings["rank"] = (time.perf_counter() - started) * 1000
        semantic = rankings.get("semantic")
        searched = config.semantic_weight > 0 and bool(query.text.strip())
        best = semantic[0][1] if semantic else (0.0 if searched else None)
        return Recalled(ranked, parsed, window, timings, best, words, embedded.get("text"))

    async def _with_superseded(
        self, rankings: dict[str, Hits], query: Query, embedded: Mapping[str, np.ndarray]
    ) -> dict[str, Hits]:
        """The semantic layer as of `query.as_of`: the memories superseded since, scored against the query as the
        vectors score the active ones, and merged into its ranking (grep finds their turns already)."""
        vector = embedded.get("text")
        if vector is None or query.as_of is None or self.settings(query).semantic_weight <= 0:
            return rankings
        stored = await self.records.superseded_after(query.namespace, query.as_of, limit=SUPERSEDED_SCAN)
        if not stored:
            return rankings
        limit = query.limit or self.settings(query).candidate_limit
        extra = _nearest(vector, stored, limit)
        merged = sorted([*rankings.get("semantic", []), *extra], key=lambda hit: -hit[1])[:limit]
        return {**rankings, "semantic": merged}

    async def _as_it_was(self, memories: dict[str, Memory], as_of: datetime) -> dict[str, Memory]:
        """Each memory as it was at `as_of`: a memory changed since shows the revision current then (its words, its
        status: one superseded later was active), so ranking weighs what was known at that time."""
        earlier = await self.records.revisions_at(list(memories), as_of)
        return {i: _at_revision(m, earlier[i]) if i in earlier else m for i, m in memories.items()}

    async def _layers(
        self,
        reading: QueryReading,
        full: str,
        query: Query,
        window: TimeWindow | None,
        timings: dict[str, float],
        embedded: dict[str, np.ndarray],
        rows: _Rows,
    ) -> dict[str, Hits]:
        """Keyword, grep and the vector layers concurrently; each layer's hits best first, and their rows asked
        for as soon as the layer ends (read while slower layers still run). An image query with no text runs the
        image layer alone. The query text's embedding is left in `embedded["text"]`.

        `reading` holds the query's words without the time phrase the time layer took, for the keyword layer, and
        grep's terms: the year in "what did I buy in February 2024?" names a window of event times, and grep would
        only find turns that say "2024" (every grep of a year also made rg check every line's timestamp). `full` is
        embedded whole: the query, in a transcript without its speakers' names (`retrieval.neutral_speakers`)."""
        config = self.settings(query)
        limit = query.limit or config.candidate_limit
        jobs: list[Awaitable[dict[str, Hits]]] = [self._image_layer(query, limit, timings)]
        blank = not full.strip()
        if not blank and config.keyword_weight > 0:
            search = self.records.keyword_search(
                query.namespace, reading.words, limit=limit, common_share=config.keyword_common_share
            )
            jobs.append(_layer(timings, "keyword", search))
        terms = () if blank else reading.terms
        if config.grep_weight > 0 and terms and "grep" not in query.without:
            jobs.append(_layer(timings, "grep", self._grep(terms, query.namespace, limit)))
        if full and not blank:
            jobs.append(self._vector_layers(full, query.namespace, window, limit, timings, embedded, config))
        rankings: dict[str, Hits] = {}
        for found in await asyncio.gather(*(rows.asking(job, _prefetched(query.finalists)) for job in jobs)):
            rankings.update(found)
        return {name: hits for name, hits in rankings.items() if hits}

    async def _vector_layers(
        self,
        text: str,
        namespace: str,
        window: TimeWindow | None,
        limit: int,
        timings: dict[str, float],
        embedded: dict[str, np.ndarray],
        config: RetrievalConfig,
    ) -> dict[str, Hits]:
        """One query embedding feeds the semantic layer (each memory's own vector and its context vector) and, when
        the query names a time, the time layer: the memories of the window nearest the query, the whole window
        searched (the vectors' payload carries each memory's event time)."""
        wanted = config.semantic_weight > 0
        around = wanted and config.context_search and self.config.embedding.context_vectors
        timed = window is not None and config.time_layer_weight > 0
        if not (wanted or timed):
            return {}
        vector = self.recent(text) if self.recent is not None else None
        if vector is None:  # a text the write path embedded a moment ago ("embed" is then absent from timings)
            vector = await _timed(timings, "embed", self.embedder.embed_query(text))
            if self.embedded is not None:
                self.embedded(text, vector)
        embedded["text"] = vector
        jobs: list[Awaitable[dict[str, Hits]]] = []
        where: dict[str, Any] = {"namespace": namespace, "status": "active"}
        if wanted:
            search = self.vectors.search(TEXT, vector.tolist(), limit=limit, where=where)
            jobs.append(_layer(timings, "semantic", _pairs(search)))
        if around:
            nearby = self.vectors.search(CONTEXT, vector.tolist(), limit=limit, where=where)
            jobs.append(_layer(timings, "context", _pairs(nearby)))
        if timed and window is not None:
            inside = {**where, "event_at": _span(window)}
            jobs.append(
                _layer(timings, "time", _pairs(self.vectors.search(TEXT, vector.tolist(), limit=limit, where=inside)))
            )
        rankings: dict[str, Hits] = {}
        for found in await asyncio.gather(*jobs):
            rankings.update(found)
        if "context" in rankings:
            rankings["semantic"] = _closest(rankings.get("semantic", []), rankings.pop("context"), limit)
        return rankings

    async def _image_layer(self, query: Query, limit: int, timings: dict[str, float]) -> dict[str, Hits]:
        """The image collection, searched with the query image's CLIP vector, or else with the query text through
        CLIP's text tower. Skipped (no CLIP call) while image memory is off or the namespace holds no image; a
        model failure costs this layer only."""
        if self.settings(query).image_weight <= 0:
            return {}
        vector = query.image
        if vector is None:
            if self.images is None or not await self._has_images(query.namespace):
                return {}
            clip = await self.images()
            if clip is None:
                return {}
            try:
                vector = (await _timed(timings, "image_embed", clip.embed_texts([query.text])))[0]
            except ModelError as exc:
                log.warning("image layer skipped: %s", exc)
                return {}
        where = {"namespace": query.namespace, "status": "active"}
        search = self.vectors.search(IMAGE, vector.tolist(), limit=limit, where=where)
        return await _layer(timings, "image", _pairs(search))

    async def _has_images(self, namespace: str) -> bool:
        """Whether the namespace holds an image memory, asked again only after a commit that may have added one."""
        commits = self.records.commits
        known = self._images_known.get(namespace)
        if known is None or known[0] != commits:
            known = self._images_known[namespace] = (commits, await self.records.has_images(namespace))
        return known[1]

    async def _grep(self, terms: Sequence[str], namespace: str, limit: int) -> Hits:
        """Exact terms over the raw log. A grep failure (ripgrep missing, a timeout) costs this layer only."""
        try:
            hits = await self.grep.search(terms, namespace=namespace, limit=limit)
        except StorageError as exc:
            log.warning("grep layer skipped: %s", exc)
            return []
        owners = await self.records.memories_at(namespace, [(h.segment, h.offset) for h in hits])
        ranked = [(owners[(h.segment, h.offset)], float(len(h.terms))) for h in hits if (h.segment, h.offset) in owners]
        return list(dict(reversed(ranked)).items())[::-1]  # each memory once, at its best rank

    async def _walk(
        self, base: Mapping[str, float], namespace: str, rows: _Rows, config: RetrievalConfig
    ) -> list[GraphStep]:
        """The graph steps from the best fused hits (`base`: fused score by memory). The rows of the memories they
        reach come back with them: one hop to a reader thread, not two."""
        if config.graph_depth == 0 or config.graph_seeds == 0 or config.graph_weight == 0:
            return []
        seeds = seeds_of(base, config.graph_seeds)
        steps, reached, counted = await self.records.graph_neighbourhood(
            seeds, namespace, depth=config.graph_depth, fanout=config.entity_fanout
        )
        rows.add(reached, counted)
        return steps

    async def _resolve(self, anchor: EventAnchor, query: Query) -> TimeWindow | None:
        """ "before I moved": find when the event happened (the best match for it), and cut the window there."""
        hits = await self.records.keyword_search(query.namespace, query_words(anchor.event), limit=1, weighted=False)
        if not hits:
            return None
        memory = await self.records.find_memory(hits[0][0])
        if memory is None:
            return None
        at = memory.event_at
        if anchor.relation == "before":
            return TimeWindow(None, at, anchor.event)
        return TimeWindow(at, None, anchor.event)


class _Rows:
    """The candidates' rows, read as the search layers end: while grep scans a large log, the other layers'
    rows are already being read. Their entities are left empty: nothing ranks on them, and the read path asks
    for them only for what it returns (ReadPath._named)."""

    def __init__(self, records: SqliteRecords, overlay: Overlay | None = None) -> None:
        self._records, self._overlay = records, overlay
        self._asked: set[str] = set()
        self._reads: list[asyncio.Future[dict[str, Memory]]] = []

    async def asking(self, layer: Awaitable[dict[str, Hits]], depth: int | None = None) -> dict[str, Hits]:
        """The layer's hits; the rows of its best `depth` (all when None) are asked for at once."""
        found = await layer
        self.ask([i for hits in found.values() for i, _ in hits[:depth]])
        return found

    def ask(self, memory_ids: Sequence[str]) -> None:
        wanted = [i for i in dict.fromkeys(memory_ids) if i not in self._asked]
        if wanted:
            self._asked.update(wanted)
            self._reads.append(asyncio.create_task(self._read(wanted)))

    def add(self, memories: Mapping[str, Memory], counted: int) -> None:
        """Rows read by another query (the graph walk's), which counted the batches of records up to `counted`:
        none of them is read again."""
        fresh = self._laid({i: m for i, m in memories.items() if i not in self._asked}, counted)
        if fresh:
            self._asked.update(fresh)
            read: asyncio.Future[dict[str, Memory]] = asyncio.get_running_loop().create_future()
            read.set_result(fresh)
            self._reads.append(read)

    async def _read(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        found: dict[str, Memory] = {}
        for memories, counted in await self._records.rows_for_ranking(memory_ids):  # entities: ReadPath._named
            found |= self._laid(memories, counted)
        return found

    def _laid(self, memories: dict[str, Memory], counted: int) -> dict[str, Memory]:
        return memories if self._overlay is None or not memories else self._overlay(memories, counted)

    async def read(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The rows of `memory_ids` and of every id asked for before (a memory that does not exist is absent)."""
        self.ask(memory_ids)
        found: dict[str, Memory] = {}
        for part in await asyncio.gather(*self._reads):
            found |= part
        return found

    def cancel(self) -> None:
        """Stop the reads nobody will wait for (the retrieval failed or was cancelled)."""
        for read in self._reads:
            if read.done() and not read.cancelled():
                read.exception()  # retrieved: a failed read has already failed the retrieval
            read.cancel()


def _prefetched(finalists: int | None) -> int | None:
    """How many of each layer's hits have their rows read as the layer ends: all when every candidate is weighed,
    else the best third of the finalists (10 of 30); the finalists found deeper are read after fusion. Reading
    each layer's 30 read ~80 rows for 30 finalists (10k, alternated three times: p50 30.1-36.0 -> 28.8-29.9 ms)."""
    return None if finalists is None else max(1, finalists // 3)


def above_floor(rankings: dict[str, Hits], floor: float) -> dict[str, Hits]:
    """The keyword and semantic hits that score at least `floor` of their layer's best (retrieval.evidence_floor);
    the other layers as they are."""
    if floor <= 0:
        return rankings
    kept = dict(rankings)
    for name in ("keyword", "semantic"):
        hits = rankings.get(name)
        if hits and hits[0][1] > 0:
            top = max(score for _, score in hits)
            kept[name] = [hit for hit in hits if hit[1] >= floor * top]
    return kept


def finalists(fused: Fused, count: int | None) -> Fused:
    """The `count` best fused candidates (all when None): `retrieve(k)` reads and weighs only these. Every layer
    still searched its full depth, so a memory at rank 30 of two layers keeps both ranks in its fused score; the
    cut only spares reading and weighing the tail that could not reach the top k."""
    base, layers = fused
    if count is None or len(base) <= count:
        return fused
    kept = dict(sorted(base.items(), key=lambda kv: (-kv[1], kv[0]))[:count])
    return kept, {i: layers[i] for i in kept}


async def _read(query: Query, config: RetrievalConfig) -> QueryReading:
    """The query read for the layers (cognition/query_reading.py), on a worker thread when it is long."""
    if len(query.text) <= LONG_QUERY_CHARS:
        return read_query(query.text, now=query.now, config=config)
    return await asyncio.to_thread(read_query, query.text, now=query.now, config=config)


def _nearest(vector: np.ndarray, stored: Sequence[tuple[str, bytes]], limit: int) -> Hits:
    """The stored vectors (memory id, float32 bytes) nearest the query, by cosine (all are unit length)."""
    similarity = np.frombuffer(b"".join(blob for _, blob in stored), dtype="<f4").reshape(len(stored), -1) @ vector
    scored = [(memory_id, float(score)) for (memory_id, _), score in zip(stored, similarity, strict=True)]
    return sorted(scored, key=lambda s: -s[1])[:limit]


def _span(window: TimeWindow) -> Between:
    """The window as a range of the vectors' `event_at` (seconds since the epoch): [start, end)."""
    return Between(
        gte=window.start.timestamp() if window.start else None, lt=window.end.timestamp() if window.end else None
    )


def _known(memory: Memory, as_of: datetime) -> bool:
    return memory.created_at <= as_of and memory.event_at <= as_of


def _at_revision(memory: Memory, revision: Revision) -> Memory:
    active = revision.status is MemoryStatus.ACTIVE
    return replace(
        memory,
        content=revision.content,
        status=revision.status,
        revision=revision.revision,
        superseded_by=None if active else memory.superseded_by,
    )


async def _timed(timings: dict[str, float], name: str, job: Awaitable[T]) -> T:
    started = time.perf_counter()
    try:
        return await job
    finally:
        timings[name] = (time.perf_counter() - started) * 1000


async def _layer(timings: dict[str, float], name: str, job: Awaitable[Hits]) -> dict[str, Hits]:
    return {name: await _timed(timings, name, job)}


async def _pairs(search: Awaitable[list[VectorHit]]) -> Hits:
    return [(h.memory_id, h.score) for h in await search]


def _closest(own: Hits, around: Hits, limit: int) -> Hits:
    """The semantic layer with context vectors: each memory at the better of its own vector's cosine and its
    context vector's (retrieval.context_search). As a layer of their own in fusion the context vectors cost LoCoMo
    dev recall (a turn's neighbours took a second vote and the budget); as the better of two ways to match they
    raised it, and left LongMemEval's unchanged (docs/benchmarks.md, "Ablations by folds")."""
    best = dict(own)
    for memory_id, score in around:
        if score > best.get(memory_id, -2.0):
            best[memory_id] = score
    return sorted(best.items(), key=lambda hit: -hit[1])[:limit]
