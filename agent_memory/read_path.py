"""MemoryManager's read path: retrieve, context, recall, and what a retrieval records (access, events, gaps).

A mixin of `MemoryManager` (manager.py): one object, two files, so each stays readable. The layers themselves
run in recall.py; ranking and packing are pure (cognition/ranking.py, cognition/context.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent_memory.cognition.context import pack
from agent_memory.cognition.tokens import TokenCounter, make_counter
from agent_memory.config import Config, RetrievalConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import InvalidInput
from agent_memory.models import Context, EmotionalContext, RetrievalGap, RetrievalResult, new_id
from agent_memory.recall import Query, Recall, Recalled
from agent_memory.storage.outbox import Projector
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import check_content, check_emotion, check_identifier


def candidates_for(budget_tokens: int, floor: int) -> int:
    """Candidates per layer for a context: past 2,048 tokens a budget needs a deeper pool (one per 64 tokens), or
    it stays half empty (LoCoMo at 8,192 tokens used 3,765 with 50 per layer)."""
    return max(floor, budget_tokens // 64)


class ReadPath:
    config: Config
    clock: Callable[[], datetime]
    embedder: Embedder
    records: SqliteRecords
    projector: Projector
    token_counter: TokenCounter
    _reader: Recall

    if TYPE_CHECKING:  # provided by MemoryManager

        def _check_open(self) -> None: ...

    async def retrieve(
        self,
        query: str,
        *,
        emotional_context: EmotionalContext | Mapping[str, float] | None = None,
        k: int | None = None,
        namespace: str = "default",
        now: datetime | None = None,
        as_of: datetime | None = None,
    ) -> list[RetrievalResult]:
        """The best `k` memories for `query`: keyword, grep and semantic layers run concurrently, fused by
        reciprocal rank fusion, widened by a graph walk and a session lift, then weighted by mood, decay, the
        query's time window and role. `now` is the caller's reference time for "yesterday"; `as_of` limits the
        results to what was known then. Each result explains its layer ranks and weights."""
        k = k or self.config.retrieval.default_k
        recalled = await self._recall(query, emotional_context, namespace, now, as_of)
        results = recalled.ranked.results[:k]
        await self._record(query, namespace, k, results, recalled)
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
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 1:
            raise InvalidInput(f"budget_tokens must be a positive integer, got {budget_tokens!r}")
        limit = candidates_for(budget_tokens, self.config.retrieval.candidate_limit)
        recalled = await self._recall(query, emotional_context, namespace, now, as_of, limit)
        packed = pack(recalled.ranked, budget=budget_tokens, counter=self.token_counter)
        await self._record(query, namespace, len(packed.items), [item.result for item in packed.items], recalled)
        return packed

    def configure_retrieval(self, retrieval: RetrievalConfig) -> None:
        """Swap the retrieval weights in place (ablations, tuning); the stores are untouched."""
        self.config = self.config.model_copy(update={"retrieval": retrieval})
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
    ) -> Recalled:
        """Every ranked candidate with its layer timings, recording nothing: for benchmarks and diagnosis. With
        `budget_tokens`, each layer returns as many candidates as `context()` would ask for at that budget."""
        limit = candidates_for(budget_tokens, self.config.retrieval.candidate_limit) if budget_tokens else None
        return await self._recall(query, None, namespace, now, as_of, limit)

    async def _recall(
        self,
        query: str,
        emotional_context: EmotionalContext | Mapping[str, float] | None,
        namespace: str,
        now: datetime | None,
        as_of: datetime | None,
        limit: int | None = None,
    ) -> Recalled:
        self._check_open()
        if isinstance(query, str) and not query.strip():
            raise InvalidInput("The query is empty")
        query = check_content(query, max_bytes=self.config.max_content_bytes)
        check_identifier("namespace", namespace)
        reference = self._aware(now, "now") or self.clock()
        mood = check_emotion(emotional_context)
        await self.projector.drain()
        return await self._reader.run(Query(query, namespace, reference, mood, self._aware(as_of, "as_of"), limit))

    @staticmethod
    def _aware(value: datetime | None, name: str) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise InvalidInput(f"{name} must be a timezone-aware datetime, got {value!r}")
        return value.astimezone(UTC)

    async def _record(
        self, query: str, namespace: str, k: int, results: Sequence[RetrievalResult], recalled: Recalled
    ) -> None:
        """Access once per returned memory, the retrieval event, and a gap when nothing relevant was found."""
        at = self.clock()
        await self.records.record_retrieval(
            new_id(), namespace, query, at=at, k=k, results=[(r.memory.memory_id, r.score) for r in results]
        )
        best = recalled.best_similarity
        if best is not None and best < self.config.retrieval.gap_floor:
            vector = (await self.embedder.embed([query]))[0].astype("<f4").tobytes()
            gap = RetrievalGap(
                new_id(), namespace, query, recalled.keywords, best, at, at + self.config.retrieval.gap_ttl
            )
            await self.records.open_gap(gap, vector)

    async def open_gaps(self, namespace: str = "default") -> list[RetrievalGap]:
        """Questions asked recently that the memory could not answer, newest first."""
        self._check_open()
        return [gap for gap, _ in await self.records.open_gaps(namespace, now=self.clock())]
