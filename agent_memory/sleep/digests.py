"""Digests: each speaker's statements about themselves, gathered by topic across sessions (sleep job `digest`).

A question such as "What activities does Melanie partake in?" has its evidence in several sessions, and no single
turn resembles it. This job reads the memories stored since its last run (a cursor per namespace), finds each
speaker's statements about themselves (cognition/digest.py: what they did, like, plan or are), embeds each
statement on its own, and places it in that speaker's topics (one matrix product each: the nearest centroid at
least `sleep.digest_similarity` similar with room for it, else a new topic). A topic with
`sleep.digest_min_statements` or more is one digest memory, generation 1: the speaker, then each statement dated,
oldest first, with EVOLVED_FROM links to the memories the statements came from (so `lineage_turns` leads it back
to its turns, and the graph walk goes from a statement's turn to its digest and on to the others). When a topic
grows, its digest is rewritten in place, one revision up. Digests are never consolidated (compaction leaves them
out), and their sources stay active: a digest adds a way in, it takes nothing away.

Deterministic: the same memories in the same order give the same topics, whether read in one run or many.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from agent_memory.cognition.digest import Statement, Topic, assign, render, statements
from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.config import SleepConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.idle_work import IdleWork
from agent_memory.models import Memory, MemoryId, MemoryType, fresh_memory
from agent_memory.storage.digest_records import DigestWrite, StoredTopic, TopicWrite
from agent_memory.storage.records import SqliteRecords

EMBED_CHUNK = 64
"""Statements (and digests) per call to the embedder: a turn arriving meanwhile waits for one chunk, not a run."""


DEFERRED = -1
"""What a step the budget did not allow reads (`Digests._next`)."""


def _counts() -> dict[str, Any]:
    counts: dict[str, Any] = dict.fromkeys(
        ("memories_read", "statements", "topics_new", "digests_new", "digests_rewritten"), 0
    )
    counts["deferred"] = False
    return counts


class Digests:
    """A store's digests, kept by the sleep job `digest` (`run`) and, once `sleep.digest_idle_min` memories wait, by
    a background task whenever the store is idle (idle_work.py) until none waits: an import's digests come a few
    seconds after it ends, not at the job's next hourly run. One step at a time, whichever runs it, so a memory's
    statements are placed once; the topics are the same whether the memories are read in one step or many."""

    def __init__(
        self,
        records: SqliteRecords,
        embedder: Embedder,
        extractor: SimpleExtractor,
        config: SleepConfig,
        *,
        clock: Callable[[], datetime],
        notify: Callable[[], None],
        activity: Callable[[], int],
    ) -> None:
        """`notify` wakes the projector after a step wrote digests; `activity` grows with every write and every
        question (the background task steps only while it stands still but for its own steps)."""
        self._records, self._embedder, self._extractor, self._config = records, embedder, extractor, config
        self._clock, self._notify = clock, notify
        self._lock = asyncio.Lock()
        self._draining = False  # enough waited: the background steps go on until nothing does
        self._idle = IdleWork(
            "digests",
            self._idle_step,
            activity=activity,
            delay=config.digest_idle_delay.total_seconds(),
            finished="the statements of the memories that waited are in digests",
        )

    def start(self) -> None:
        if self._config.digest_idle_delay.total_seconds() > 0:
            self._idle.start()

    async def stop(self) -> None:
        await self._idle.stop()

    async def left(self) -> int:
        """How many memories wait for a digest step."""
        return await self._records.undigested_count()

    async def run(self, now: datetime) -> dict[str, Any]:
        """The sleep job: steps through every namespace's new memories until none is left or another step would end
        past `sleep.digest_budget`."""
        counts = _counts()
        deadline = time.monotonic() + self._config.digest_budget.total_seconds()
        last_step: float | None = None  # seconds the previous step took; every run makes one step at least
        for namespace in await self._records.memory_namespaces():
            while True:
                started = time.monotonic()
                read = await self._next(namespace, now, counts, deadline=deadline, last_step=last_step)
                if read is None:
                    break
                if read == DEFERRED:  # another step would end past the budget: the next run goes on
                    counts["deferred"] = True
                    return counts
                if read:  # rows passed over (digests, images) only move the cursor: no step to judge by
                    last_step = time.monotonic() - started
        return counts

    async def catch_up(self, now: datetime | None = None) -> dict[str, Any]:
        """What the background task would do once the store is idle, done now: every step it would take, until
        nothing waits (none when fewer than `sleep.digest_idle_min` memories wait, or the task is off). The
        benchmarks call it after an import."""
        counts = _counts()
        if self._config.digest_idle_delay.total_seconds() > 0:
            while await self._idle_step(now, counts) != (0, 0):
                pass
        return counts

    async def _idle_step(self, now: datetime | None = None, counts: dict[str, Any] | None = None) -> tuple[int, int]:
        """One step of the first namespace with memories waiting: (digests written, memories read, at least 1 when
        only passed-over rows moved the cursor); (0, 0) when none waits, or fewer than `sleep.digest_idle_min` did
        when the last steps ended. Once started, the steps go on until nothing waits (an import's last memories
        are not left for the job), across idle moments if someone writes or asks in between."""
        if not self._draining:
            if await self.left() < self._config.digest_idle_min:
                return 0, 0
            self._draining = True
        counts = _counts() if counts is None else counts
        written = counts["digests_new"] + counts["digests_rewritten"]
        for namespace in await self._records.memory_namespaces():
            read = await self._next(namespace, now or self._clock(), counts)
            if read is not None:
                return counts["digests_new"] + counts["digests_rewritten"] - written, max(read, 1)
        self._draining = False
        return 0, 0

    async def _next(
        self,
        namespace: str,
        now: datetime,
        counts: dict[str, Any],
        *,
        deadline: float | None = None,
        last_step: float | None = None,
    ) -> int | None:
        """The namespace's next step: how many memories it read (0 when it only passed over rows), None when nothing
        of the namespace is new, DEFERRED when memories wait but a step as long as `last_step` would end past
        `deadline` (time.monotonic())."""
        async with self._lock:
            memories, cursor = await self._records.undigested(namespace, limit=self._config.digest_batch)
            if cursor is None:
                return None
            if memories and deadline is not None and last_step is not None and time.monotonic() + last_step > deadline:
                return DEFERRED
            counts["memories_read"] += len(memories)
            written = await self._step(namespace, memories, cursor, now, counts)
        if written:
            self._notify()
        return len(memories)

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        embed = self._embedder.embed
        parts = [await embed(texts[i : i + EMBED_CHUNK]) for i in range(0, len(texts), EMBED_CHUNK)]
        return np.concatenate(parts) if parts else np.zeros((0, self._embedder.dimension), dtype=np.float32)

    async def _step(
        self, namespace: str, memories: Sequence[Memory], cursor: int, now: datetime, counts: dict[str, Any]
    ) -> int:
        """One batch of memories: their statements placed in topics, the grown topics' digests written, the cursor
        moved, in one transaction. Returns how many digests it wrote."""
        records, model = self._records, self._embedder.name
        found = await asyncio.to_thread(_statements, memories)  # regular expressions over a step's text: off the loop
        counts["statements"] += len(found)
        if not found:
            await records.commit_digests(
                namespace, cursor=cursor, topics=(), digests=(), embedding_model=model, now=now
            )
            return 0
        vectors = await self._embed([statement.text for statement, _ in found])
        speakers = sorted({statement.speaker for statement, _ in found})
        stored = await records.digest_topics(namespace, speakers)
        topics, grown = await asyncio.to_thread(_place, found, vectors, stored, self._config)
        counts["topics_new"] += sum(1 for t in topics if t.topic_id is None)
        digests = await self._digests(topics, grown, now)
        counts["digests_new"] += sum(1 for d in digests if d.new)
        counts["digests_rewritten"] += sum(1 for d in digests if not d.new)
        await records.commit_digests(
            namespace, cursor=cursor, topics=topics, digests=digests, embedding_model=model, now=now
        )
        return len(digests)

    async def _digests(
        self, topics: Sequence[TopicWrite], grown: dict[int, StoredTopic | None], now: datetime
    ) -> list[DigestWrite]:
        """The digest memory of every grown topic that now holds enough statements: its text rendered from all of its
        statements (the stored ones read back) and embedded; keywords and names come from the statements as their
        speaker said them ("Melanie: ..."), not from the digest's own heading."""
        wanted = [t for t in topics if t.size >= self._config.digest_min_statements]
        if not wanted:
            return []
        earlier = await self._records.topic_statements([b.topic_id for t in wanted if (b := grown[t.key]) is not None])
        texts, members = [], []
        for topic in wanted:
            before = grown[topic.key]
            old = [
                Statement(s.memory_id, topic.speaker, s.at, s.text)
                for s in (earlier.get(before.topic_id, []) if before else [])
            ]
            everything = old + [statement for statement, _ in topic.statements]
            members.append(everything)
            texts.append(render(topic.speaker, everything))
        vectors = await self._embed(texts)
        sources = await self._records.get_memories(list({s.memory_id for group in members for s in group}))
        said = [f"{t.speaker}: " + " ".join(s.text for s in group) for t, group in zip(wanted, members, strict=True)]
        found = await asyncio.to_thread(lambda: [self._extractor.extract(text) for text in said])
        writes = []
        for topic, text, vector, group, extraction in zip(wanted, texts, vectors, members, found, strict=True):
            before = grown[topic.key]
            known = [sources[s.memory_id] for s in group if s.memory_id in sources]
            if not known:
                continue
            memory = _digest_memory(known, text, extraction.keywords, extraction.entities, now)
            existing = before.memory_id if before else None
            if existing is not None:
                memory = dataclasses.replace(memory, memory_id=MemoryId(existing))
            writes.append(
                DigestWrite(
                    topic.key,
                    memory,
                    vector.astype("<f4").tobytes(),
                    tuple(dict.fromkeys(s.memory_id for s in group)),
                    existing is None,
                )
            )
        return writes


def _statements(memories: Sequence[Memory]) -> list[tuple[Statement, int]]:
    """Each memory's statements with their place among its own."""
    found: list[tuple[Statement, int]] = []
    for memory in memories:
        if memory.role is not None:
            said = statements(memory.memory_id, memory.content, memory.role, memory.event_at)
            found += [(statement, position) for position, statement in enumerate(said)]
    return found


def _place(
    found: Sequence[tuple[Statement, int]], vectors: np.ndarray, stored: Sequence[StoredTopic], settings: SleepConfig
) -> tuple[list[TopicWrite], dict[int, StoredTopic | None]]:
    """Each speaker's new statements placed among that speaker's topics; returns the topics that gained statements
    (new ones without an id) and, for each, the stored topic it was (None for a new one)."""
    writes: list[TopicWrite] = []
    grown: dict[int, StoredTopic | None] = {}
    for speaker in sorted({statement.speaker for statement, _ in found}):
        rows = [i for i, (statement, _) in enumerate(found) if statement.speaker == speaker]
        known = [t for t in stored if t.speaker == speaker]
        topics = [Topic(t.total.copy(), t.size) for t in known]
        placed = assign(
            topics, vectors[rows], threshold=settings.digest_similarity, max_size=settings.digest_max_statements
        )
        members: dict[int, list[tuple[Statement, int]]] = {}
        for row, index in zip(rows, placed, strict=True):
            members.setdefault(index, []).append(found[row])
        for index, gained in sorted(members.items()):
            before = known[index] if index < len(known) else None
            key = len(writes)
            topic = topics[index]
            writes.append(
                TopicWrite(key, before.topic_id if before else None, speaker, topic.total, topic.size, tuple(gained))
            )
            grown[key] = before
    return writes, grown


def _digest_memory(
    sources: Sequence[Memory], content: str, keywords: Sequence[str], entities: Sequence[str], now: datetime
) -> Memory:
    """A semantic, generation-1 memory dated by its latest statement and placed where that statement was said."""
    latest = max(sources, key=lambda m: (m.event_at, m.turn_number or 0))
    return fresh_memory(
        namespace=latest.namespace,
        memory_type=MemoryType.SEMANTIC,
        content=content,
        keywords=keywords,
        entities=entities,
        created_at=now,
        event_at=latest.event_at,
        generation=1,
        valence=round(sum(m.valence for m in sources) / len(sources), 4),
        arousal=max(m.arousal for m in sources),
        importance=max(m.importance for m in sources),
        source_turn_id=latest.source_turn_id,
        session_id=latest.session_id,
        turn_number=latest.turn_number,
        role=latest.role,
    )
