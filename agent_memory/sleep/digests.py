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
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_memory.cognition.digest import Statement, Topic, assign, render, statements
from agent_memory.config import SleepConfig
from agent_memory.models import Memory, MemoryId, MemoryType, fresh_memory
from agent_memory.storage.digest_records import DigestWrite, StoredTopic, TopicWrite

if TYPE_CHECKING:
    from agent_memory.manager import MemoryManager


EMBED_CHUNK = 64
"""Statements (and digests) per call to the embedder: a turn arriving meanwhile waits for one chunk, not a run."""


async def run_digests(manager: MemoryManager, now: datetime) -> dict[str, Any]:
    counts: dict[str, Any] = dict.fromkeys(
        ("memories_read", "statements", "topics_new", "digests_new", "digests_rewritten"), 0
    )
    counts["deferred"] = False
    batch = manager.config.sleep.digest_batch
    deadline = time.monotonic() + manager.config.sleep.digest_budget.total_seconds()
    last_step: float | None = None  # seconds the previous step took; every run makes one step at least
    for namespace in await manager.records.memory_namespaces():
        while True:
            memories, cursor = await manager.records.undigested(namespace, limit=batch)
            if cursor is None:
                break
            if memories and last_step is not None and time.monotonic() + last_step > deadline:
                counts["deferred"] = True  # another step would end past sleep.digest_budget: the next run goes on
                return counts
            started = time.monotonic()
            counts["memories_read"] += len(memories)
            await _step(manager, namespace, memories, cursor, now, counts)
            if memories:  # rows passed over (the digests themselves, images) only move the cursor: no step
                last_step = time.monotonic() - started
    return counts


async def _embed(manager: MemoryManager, texts: Sequence[str]) -> np.ndarray:
    parts = [await manager.embedder.embed(texts[i : i + EMBED_CHUNK]) for i in range(0, len(texts), EMBED_CHUNK)]
    return np.concatenate(parts) if parts else np.zeros((0, manager.embedder.dimension), dtype=np.float32)


async def _step(
    manager: MemoryManager,
    namespace: str,
    memories: Sequence[Memory],
    cursor: int,
    now: datetime,
    counts: dict[str, int],
) -> None:
    """One batch of memories: their statements placed in topics, the grown topics' digests written, the cursor
    moved, in one transaction."""
    settings = manager.config.sleep
    found = await asyncio.to_thread(_statements, memories)  # regular expressions over a step's text: off the loop
    counts["statements"] += len(found)
    if not found:
        await manager.records.commit_digests(
            namespace, cursor=cursor, topics=(), digests=(), embedding_model=manager.embedder.name, now=now
        )
        return
    vectors = await _embed(manager, [statement.text for statement, _ in found])
    speakers = sorted({statement.speaker for statement, _ in found})
    stored = await manager.records.digest_topics(namespace, speakers)
    topics, grown = await asyncio.to_thread(_place, found, vectors, stored, settings)
    counts["topics_new"] += sum(1 for t in topics if t.topic_id is None)
    digests = await _digests(manager, topics, grown, now)
    counts["digests_new"] += sum(1 for d in digests if d.new)
    counts["digests_rewritten"] += sum(1 for d in digests if not d.new)
    await manager.records.commit_digests(
        namespace, cursor=cursor, topics=topics, digests=digests, embedding_model=manager.embedder.name, now=now
    )


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


async def _digests(
    manager: MemoryManager,
    topics: Sequence[TopicWrite],
    grown: dict[int, StoredTopic | None],
    now: datetime,
) -> list[DigestWrite]:
    """The digest memory of every grown topic that now holds enough statements: its text rendered from all of its
    statements (the stored ones read back) and embedded; keywords and names come from the statements as their
    speaker said them ("Melanie: ..."), not from the digest's own heading."""
    wanted = [t for t in topics if t.size >= manager.config.sleep.digest_min_statements]
    if not wanted:
        return []
    earlier = await manager.records.topic_statements([b.topic_id for t in wanted if (b := grown[t.key]) is not None])
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
    vectors = await _embed(manager, texts)
    sources = await manager.records.get_memories(list({s.memory_id for group in members for s in group}))
    said = [f"{t.speaker}: " + " ".join(s.text for s in group) for t, group in zip(wanted, members, strict=True)]
    found = await asyncio.to_thread(lambda: [manager.extractor.extract(text) for text in said])
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
