"""Dream exploration: find links between memories that nothing has joined yet, and keep the ones that hold.

Two strategies propose candidate pairs, then each pair is tested by the cosine of the two memories' stored
vectors and committed as a DREAM_LINK edge (in SQLite's memory_links, projected to the graph through the outbox)
when it reaches `sleep.dream_similarity_threshold` (0.7):

- **walks**: `sleep.dream_walk_count` semi-random walks per namespace, each `sleep.dream_walk_length` hops over
  the graph's structure (neighbouring turns, rare shared entities, existing link edges), never revisiting a
  memory; the walk's two ends are a candidate when they are not already neighbours;
- **cluster bridges**: as many memories, each probed for its nearest neighbours in the vector index; a memory
  whose neighbours come from two or more other sessions sits at the boundary of semantic clusters (sessions are
  the episodes memories form around), and its nearest neighbour in another session is a candidate.

Every run reports its walks, probes, candidates, and the links committed and rejected.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

import numpy as np

from agent_memory.manager import MemoryManager
from agent_memory.storage.outbox import TEXT

Candidate = tuple[str, str, str]  # (memory, memory, strategy)


async def run_dream(manager: MemoryManager, now: datetime, *, seed: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed if seed is not None else int(now.timestamp()))
    counts = {"walks": 0, "probes": 0, "candidates": 0, "committed": 0, "rejected": 0}
    await manager.flush()  # the bridges search the vector index: bring it up to date first
    for namespace in await manager.records.memory_namespaces():
        pool = await manager.records.dream_pool(namespace)
        if len(pool) < 2:
            continue
        candidates = await _walk_candidates(manager, namespace, pool, rng, counts)
        candidates += await _bridge_candidates(manager, namespace, pool, rng, counts)
        await _commit(manager, namespace, candidates, now, counts)
    return counts


async def _walk_candidates(
    manager: MemoryManager,
    namespace: str,
    pool: list[tuple[str, str | None]],
    rng: random.Random,
    counts: dict[str, int],
) -> list[Candidate]:
    settings, found = manager.config.sleep, list[Candidate]()
    for _ in range(min(settings.dream_walk_count, len(pool))):
        start = rng.choice(pool)[0]
        path = [start]
        for _ in range(settings.dream_walk_length):
            options = [m for m in await _neighbours(manager, path[-1], namespace) if m not in path]
            if not options:
                break
            path.append(rng.choice(sorted(options)))
        counts["walks"] += 1
        if len(path) >= 3 and path[-1] not in await _neighbours(manager, start, namespace):
            found.append((start, path[-1], "walk"))
    return found


async def _neighbours(manager: MemoryManager, memory_id: str, namespace: str) -> set[str]:
    fanout = manager.config.retrieval.entity_fanout
    steps = await manager.records.structural_neighbours([memory_id], namespace, depth=1, fanout=fanout)
    return {s.memory_id for s in steps} | set(await manager.records.link_neighbours(memory_id))


async def _bridge_candidates(
    manager: MemoryManager,
    namespace: str,
    pool: list[tuple[str, str | None]],
    rng: random.Random,
    counts: dict[str, int],
) -> list[Candidate]:
    sessions = dict(pool)
    probes = rng.sample(pool, min(manager.config.sleep.dream_walk_count, len(pool)))
    stored = await manager.records.embeddings([m for m, _ in probes])
    found: list[Candidate] = []
    for memory_id, session in probes:
        if memory_id not in stored:
            continue
        counts["probes"] += 1
        vector = np.frombuffer(stored[memory_id][0], dtype="<f4").tolist()
        hits = await manager.vectors.search(TEXT, vector, limit=6, where={"namespace": namespace})
        others = [h.memory_id for h in hits if h.memory_id != memory_id and sessions.get(h.memory_id) != session]
        if len({sessions.get(m) for m in others if m in sessions}) >= 2:
            found.append((memory_id, others[0], "bridge"))
    return found


async def _commit(
    manager: MemoryManager, namespace: str, candidates: list[Candidate], now: datetime, counts: dict[str, int]
) -> None:
    linked = await manager.records.linked_pairs(namespace)
    unique: dict[frozenset[str], Candidate] = {}
    for a, b, strategy in candidates:
        pair = frozenset((a, b))
        if a != b and pair not in linked:
            unique.setdefault(pair, (a, b, strategy))
    counts["candidates"] += len(unique)
    stored = await manager.records.embeddings(sorted({m for pair in unique for m in pair}))
    threshold = manager.config.sleep.dream_similarity_threshold
    links = []
    for a, b, strategy in unique.values():
        if a not in stored or b not in stored:
            continue
        similarity = float(np.frombuffer(stored[a][0], dtype="<f4") @ np.frombuffer(stored[b][0], dtype="<f4"))
        if similarity >= threshold:
            links.append((a, b, "DREAM_LINK", round(similarity, 4), f"{strategy}: cosine {similarity:.2f}"))
        else:
            counts["rejected"] += 1
    if links:
        counts["committed"] += await manager.records.add_links(links, now=now)
