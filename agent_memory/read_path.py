"""MemoryManager's read path: retrieve, context, recall, and what a retrieval records (access, events, gaps).

A mixin of `MemoryManager` (manager.py), because these methods are the façade's own public API: checking input,
then delegating. The work is done by components: the layers in recall.py, what retrievals record in
retrieval_log.py; ranking and packing are pure (cognition/ranking.py, cognition/context.py). The write path, which
the façade does not expose, is a component (write_path.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agent_memory.cognition.fact_block import fit_facts, pack_after, relevant_facts
from agent_memory.cognition.ranking import Ranked
from agent_memory.cognition.tokens import TokenCounter, make_counter
from agent_memory.config import Config, RetrievalConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import InvalidInput
from agent_memory.facts import Facts
from agent_memory.image_memory import ImageMemory
from agent_memory.models import (
    Context,
    ContextFact,
    EmotionalContext,
    Memory,
    MemoryId,
    Reply,
    RetrievalGap,
    RetrievalResult,
    new_id,
)
from agent_memory.policy.controller import HeuristicPolicy, Policy
from agent_memory.recall import RANKED_ON_THE_LOOP, Query, Recall, Recalled
from agent_memory.replies import Replies
from agent_memory.retrieval_log import RetrievalLog, RetrievalRecord
from agent_memory.storage.outbox import Projector
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import (
    MAX_BUDGET_TOKENS,
    MAX_K,
    check_aware,
    check_content,
    check_count,
    check_emotion,
    check_identifier,
    check_images,
    read_image,
)

log = logging.getLogger(__name__)


class ReadPath:
    config: Config
    clock: Callable[[], datetime]
    embedder: Embedder
    records: SqliteRecords
    projector: Projector
    token_counter: TokenCounter
    policy: Policy
    _reader: Recall
    retrieval_log: RetrievalLog  # what retrievals record, written behind them in batches
    _facts: Facts
    images: ImageMemory
    replies: Replies  # what a context shows under its best memories: the turn after, where it was not kept

    if TYPE_CHECKING:  # provided by MemoryManager

        def _check_open(self) -> None: ...

    def candidates_for(self, budget_tokens: int) -> int:
        """Candidates each layer returns for a context of `budget_tokens`: the policy's choice."""
        return int(self.policy.retrieval_config(budget_tokens=budget_tokens)["candidate_limit"])

    async def retrieve(
        self,
        query: str = "",
        *,
        image: bytes | Path | None = None,
        emotional_context: EmotionalContext | Mapping[str, float] | None = None,
        k: int | None = None,
        namespace: str = "default",
        now: datetime | None = None,
        as_of: datetime | None = None,
    ) -> list[RetrievalResult]:
        """The best `k` memories for `query`: keyword, grep, semantic and image layers run concurrently, fused by
        reciprocal rank fusion, widened by a graph walk and a session lift, then weighted by mood, decay, the
        query's time window and role. `now` is the caller's reference time for "yesterday"; `as_of` limits the
        results to what was known then. Each result explains its layer ranks and weights.

        With `image` (encoded bytes or a file) the image layer searches with that image instead of the query's
        words, and the graph walk brings the text the found images were shared with; `query` may then be empty."""
        return await self._retrieve(query, image, emotional_context, k, namespace, now, as_of)

    async def _retrieve(
        self,
        query: str,
        image: bytes | Path | None,
        emotional_context: EmotionalContext | Mapping[str, float] | None,
        k: int | None,
        namespace: str,
        now: datetime | None,
        as_of: datetime | None,
        retrieval: RetrievalConfig | None = None,
    ) -> list[RetrievalResult]:
        """retrieve(), ranked with `retrieval` in place of config.retrieval when it is given (notes' recall)."""
        k = check_count("k", self.config.retrieval.default_k if k is None else k, low=1, high=MAX_K)
        finalists = int(self.policy.retrieval_config(k=k)["finalists"])
        recalled = await self._recall(
            query, emotional_context, namespace, now, as_of, finalists=finalists, image=image, retrieval=retrieval
        )
        results = await self._named(recalled.ranked.results[:k])
        self._record_later(query if query.strip() else "[image]", namespace, k, results, recalled)
        return results

    async def context(
        self,
        query: str,
        *,
        budget_tokens: int = 2048,
        emotional_context: EmotionalContext | Mapping[str, float] | None = None,
        namespace: str = "default",
        now: datetime | None = None,
        as_of: datetime | None = None,
    ) -> Context:
        """A prompt-ready block of the memories that answer `query`, never over `budget_tokens`, with one dated
        header per session, and an explanation of what was included and what was left out and why."""
        check_count("budget_tokens", budget_tokens, low=1, high=MAX_BUDGET_TOKENS)
        limit = self.candidates_for(budget_tokens)
        recalled = await self._recall(query, emotional_context, namespace, now, as_of, limit)
        facts, block = await self._known_facts(query, recalled.ranked, namespace, as_of, budget_tokens)
        replies = await self.replies_of(recalled.ranked, query, namespace, as_of=as_of)
        pack = partial(pack_after, recalled.ranked, block, budget_tokens, self.token_counter, replies)
        packed = pack() if len(recalled.ranked.results) <= RANKED_ON_THE_LOOP else await asyncio.to_thread(pack)
        packed = replace(packed, facts=tuple(facts))
        named = await self._named([item.result for item in packed.items])
        packed = replace(
            packed, items=tuple(replace(item, result=result) for item, result in zip(packed.items, named, strict=True))
        )
        self._record_later(query, namespace, len(packed.items), [item.result for item in packed.items], recalled)
        return packed

    async def _known_facts(
        self, query: str, ranked: Ranked, namespace: str, as_of: datetime | None, budget: int
    ) -> tuple[list[ContextFact], str]:
        """The facts relevant to the query (true at `as_of`, or now) and their block, fitted to `budget`."""
        held = await self._facts.facts(namespace=namespace, as_of=as_of)
        if not held:
            return [], ""
        entities = [e for result in ranked.results[:10] for e in result.memory.entities]
        chosen = relevant_facts(held, query, entities, match=self.config.facts.block_match)
        return fit_facts(chosen, budget, self.token_counter)

    async def replies_of(
        self, ranked: Ranked, query: str, namespace: str, *, as_of: datetime | None = None
    ) -> dict[MemoryId, Reply]:
        """The replies a context of `ranked` for `query` shows under its first `retrieval.context_replies` memories
        (replies.py): for `context()`, and for benchmarks that pack a `recall()` themselves."""
        count = self.config.retrieval.context_replies
        if not count:
            return {}
        most, known = self.config.retrieval.locality_max_chars, self._aware(as_of, "as_of")
        return await self.replies.of(ranked, query, namespace, count=count, max_chars=most, as_of=known)

    def configure_retrieval(self, retrieval: RetrievalConfig) -> None:
        """Swap the retrieval weights in place (ablations, tuning); the stores are untouched. The shipped policy
        takes the new candidate pool and finalists too (a context's pool is the policy's answer); a policy of your
        own keeps its answers."""
        self.config = self.config.model_copy(update={"retrieval": retrieval})
        if isinstance(self.policy, HeuristicPolicy):
            self.policy.retrieval = retrieval
        self._reader.config = self.config
        self.token_counter = make_counter(retrieval.token_counter)

    async def recall(
        self,
        query: str,
        *,
        namespace: str = "default",
        now: datetime | None = None,
        as_of: datetime | None = None,
        budget_tokens: int | None = None,
        without: Collection[str] = (),
    ) -> Recalled:
        """Every ranked candidate with its layer timings, recording nothing: for benchmarks, diagnosis and replay.
        With `budget_tokens`, each layer returns as many candidates as `context()` would ask for at that budget;
        `without` leaves search layers out ("grep" finds a merged memory by its sources' words in the log, so
        consolidation's replay leaves it out to judge what the merged text itself finds)."""
        if budget_tokens is not None:
            check_count("budget_tokens", budget_tokens, low=1, high=MAX_BUDGET_TOKENS)
        limit = self.candidates_for(budget_tokens) if budget_tokens else None
        recalled = await self._recall(query, None, namespace, now, as_of, limit, without=frozenset(without))
        ranked = recalled.ranked
        named = await self._entities([r.memory for r in ranked.results] + ranked.inactive)
        results = [replace(r, memory=_named_as(r.memory, named)) for r in ranked.results]
        return replace(recalled, ranked=Ranked(results, [_named_as(m, named) for m in ranked.inactive]))

    async def _recall(
        self,
        query: str,
        emotional_context: EmotionalContext | Mapping[str, float] | None,
        namespace: str,
        now: datetime | None,
        as_of: datetime | None,
        limit: int | None = None,
        *,
        image: bytes | Path | None = None,
        without: frozenset[str] = frozenset(),
        finalists: int | None = None,
        retrieval: RetrievalConfig | None = None,
    ) -> Recalled:
        self._check_open()
        if isinstance(query, str) and not query.strip():
            if image is None:
                raise InvalidInput("The query is empty")
            query = ""
        else:
            query = check_content(query, max_bytes=self.config.max_content_bytes)
        check_identifier("namespace", namespace)
        reference = self._aware(now, "now") or self.clock()
        mood = check_emotion(emotional_context)
        seen = None if image is None else await self._query_image(image)
        await self.projector.catch_up_for_read()  # what live writes left; the graph is the background's
        known = self._aware(as_of, "as_of")
        asked = Query(
            query,
            namespace,
            reference,
            mood,
            known,
            limit=limit,
            finalists=finalists,
            image=seen,
            without=without,
            retrieval=retrieval,
        )
        with self.retrieval_log.reading():  # the records not yet written are laid over the rows it reads
            return await self._reader.run(asked, overlay=self.retrieval_log.overlay)

    async def _named(self, results: Sequence[RetrievalResult]) -> list[RetrievalResult]:
        """`results` with each memory's entities, read for these alone: candidates are ranked without them."""
        named = await self._entities([r.memory for r in results])

        def each() -> list[RetrievalResult]:
            return [replace(r, memory=_named_as(r.memory, named)) for r in results]

        return each() if len(results) <= RANKED_ON_THE_LOOP else await asyncio.to_thread(each)

    async def _entities(self, memories: Sequence[Memory]) -> dict[str, tuple[str, ...]]:
        return await self.records.entities_of([m.memory_id for m in memories]) if memories else {}

    async def _query_image(self, image: bytes | Path) -> np.ndarray:
        """A query image's CLIP vector: InvalidImage when it cannot be decoded, ImageMemoryUnavailable when off."""
        (item,) = check_images([image])
        clip = await self.images.require()
        data, _ = await asyncio.to_thread(read_image, 0, item)
        vector: np.ndarray = (await clip.embed_images([data]))[0]
        return vector

    @staticmethod
    def _aware(value: datetime | None, name: str) -> datetime | None:
        return None if value is None else check_aware(name, value)

    async def settle(self) -> int:
        """Finish what earlier calls left to run after they returned: the retrievals' records (access, events,
        gaps), written in batches behind them, and the pending projections. Reads of what those write call this
        first. Returns how many outbox rows were applied."""
        await self._recorded()
        return await self.projector.drain()

    async def _recorded(self, *, gaps_only: bool = False) -> None:
        """Write the retrievals' records that wait (only if one opens a gap, with `gaps_only`: the save decision
        reads gaps) and wait for them."""
        await self.retrieval_log.flush(gaps_only=gaps_only)

    def _record_later(
        self, query: str, namespace: str, k: int, results: Sequence[RetrievalResult], recalled: Recalled
    ) -> None:
        """Hold the retrieval's record (access per result, the event, a gap when nothing relevant was found) for
        the next batch written (retrieval_log.py); until then retrievals see its accesses laid over their rows."""
        at = self.clock()
        best = recalled.best_similarity
        gap = None
        if best is not None and best < self.config.retrieval.gap_floor:
            gap = RetrievalGap(
                new_id(), namespace, query, recalled.keywords, best, at, at + self.config.retrieval.gap_ttl
            )
        scored = tuple((r.memory.memory_id, r.score) for r in results)
        self.retrieval_log.add(RetrievalRecord(new_id(), namespace, query, at, k, scored, gap, recalled.vector))

    async def open_gaps(self, namespace: str = "default") -> list[RetrievalGap]:
        """Questions asked recently that the memory could not answer, newest first."""
        self._check_open()
        await self._recorded()
        return [gap for gap, _ in await self.records.open_gaps(namespace, now=self.clock())]


def _named_as(memory: Memory, named: Mapping[str, tuple[str, ...]]) -> Memory:
    """`memory` with its entities from `named` (entities_of: a memory with none is absent)."""
    return replace(memory, entities=named.get(memory.memory_id, ()))
