"""Keyword reweighting: a word that graph-connected memories share is a thread through the memory (a project, a
person, a recurring plan), so it gains weight; the keyword search layer multiplies a hit's BM25 score by the best
weight among the query words it carries.

Connected here means what the graph walk of retrieval uses: neighbouring turns of a session, and memories that
share an entity mentioned by no more than `retrieval.entity_fanout` memories. For each keyword word,
`weight = 1 + sleep.keyword_boost * connected / memories`, where `memories` counts the memories whose keywords
carry it and `connected` those with a connected memory carrying it too; words in a single memory keep weight 1.

Off by default (`sleep.keyword_boost` 0): measured by folds on both dev benchmarks, the weights cost recall more
often than they paid (docs/benchmarks.md, "Sleep jobs by folds"). The job then removes what an earlier boost left.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from agent_memory.config import Config
from agent_memory.storage.records import SqliteRecords

KeywordRow = tuple[str, str | None, int | None, list[str]]


def links_of(rows: Sequence[KeywordRow], entities: dict[str, list[str]], fanout: int) -> dict[str, set[str]]:
    """Each memory's connected memories: its session neighbours and the memories sharing a rare entity with it."""
    links: dict[str, set[str]] = defaultdict(set)
    sessions: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for memory_id, session, turn, _ in rows:
        if session is not None and turn is not None:
            sessions[session].append((turn, memory_id))
    for turns in sessions.values():
        ordered = [memory_id for _, memory_id in sorted(turns)]
        for a, b in zip(ordered, ordered[1:], strict=False):
            links[a].add(b)
            links[b].add(a)
    for members in entities.values():
        if 1 < len(members) <= fanout:
            for memory_id in members:
                links[memory_id].update(m for m in members if m != memory_id)
    return links


def keyword_weights(
    rows: Sequence[KeywordRow], links: dict[str, set[str]], *, boost: float
) -> list[tuple[str, float, int, int]]:
    """(word, weight, memories, connected) for every word carried by at least two memories."""
    words = {memory_id: _words(keywords) for memory_id, _, _, keywords in rows}
    memories: dict[str, int] = defaultdict(int)
    connected: dict[str, int] = defaultdict(int)
    for memory_id, carried in words.items():
        near = links.get(memory_id, set())
        for word in carried:
            memories[word] += 1
            connected[word] += any(word in words.get(other, ()) for other in near)
    return [
        (word, round(1.0 + boost * connected[word] / n, 4), n, connected[word])
        for word, n in sorted(memories.items())
        if n >= 2
    ]


def _words(keywords: Iterable[str]) -> set[str]:
    return {word for phrase in keywords for word in str(phrase).lower().split() if len(word) > 1}


async def run_reweight(records: SqliteRecords, now: datetime, config: Config) -> dict[str, Any]:
    weighted = raised = 0
    namespaces = await records.memory_namespaces()
    for namespace in namespaces:
        weights = []  # keyword_boost 0: no word weighs more than 1, and the weights an earlier boost left go
        if config.sleep.keyword_boost > 0:
            rows = await records.keyword_rows(namespace)
            links = links_of(rows, await records.entity_members(namespace), config.retrieval.entity_fanout)
            weights = keyword_weights(rows, links, boost=config.sleep.keyword_boost)
        await records.replace_keyword_weights(namespace, weights, now=now)
        weighted += len(weights)
        raised += sum(1 for _, weight, _, _ in weights if weight > 1.0)
    return {"namespaces": len(namespaces), "words": weighted, "raised": raised}
