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

Off by default (`sleep.dream_walk_count` 0): measured by folds on both dev benchmarks, the links did not pay in
every fold (docs/benchmarks.md, "Sleep jobs by folds"). The job then reads nothing and reports zeros.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from agent_memory.manager import MemoryManager
from agent_memory.storage.outbox import TEXT

Candidate = tuple[str, str, str]  # (memory, memory, strategy)


async def run_dream(manager: MemoryManager, now: datetime, *, seed: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed if seed is not None else int(now.timestamp()))
    counts = {"walks": 0, "probes": 0, "candidates": 0, "committed": 0, "rejected": 0}
    if manager.config.sleep.dream_walk_count == 0:
        return counts
    await manager.flush()  # the bridges search the vector index: bring it up to date first
    for namespace in await manager.records.memory_namespaces():
        pool = await manager.records.dream_pool(namespace)
        if len(pool) < 2:
            continue
        dream = _Dream(manager, namespace, pool, rng, counts)
        await dream.commit([*await dream.walks(), *await dream.bridges()], now)
    return counts


@dataclass(slots=True)
class _Dream:
    """One namespace's exploration: its pool of (memory, session) pairs, the run's random source and counts."""

    manager: MemoryManager
    namespace: str
    pool: list[tuple[str, str | None]]
    rng: random.Random
    counts: dict[str, int]

    async def walks(self) -> list[Candidate]:
        settings, found = self.manager.config.sleep, list[Candidate]()
        for _ in range(min(settings.dream_walk_count, len(self.pool))):
            start = self.rng.choice(self.pool)[0]
            path = [start]
            for _ in range(settings.dream_walk_length):
                options = [m for m in await self._neighbours(path[-1]) if m not in path]
                if not options:
                    break
                path.append(self.rng.choice(sorted(options)))
            self.counts["walks"] += 1
            if len(path) >= 3 and path[-1] not in await self._neighbours(start):
                found.append((start, path[-1], "walk"))
        return found

    async def _neighbours(self, memory_id: str) -> set[str]:
        records, fanout = self.manager.records, self.manager.config.retrieval.entity_fanout
        steps = await records.structural_neighbours([memory_id], self.namespace, depth=1, fanout=fanout)
        return {s.memory_id for s in steps} | set(await records.link_neighbours(memory_id))

    async def bridges(self) -> list[Candidate]:
        sessions = dict(self.pool)
        probes = self.rng.sample(self.pool, min(self.manager.config.sleep.dream_walk_count, len(self.pool)))
        stored = await self.manager.records.embeddings([m for m, _ in probes])
        found: list[Candidate] = []
        for memory_id, session in probes:
            if memory_id not in stored:
                continue
            self.counts["probes"] += 1
            vector = np.frombuffer(stored[memory_id][0], dtype="<f4").tolist()
            hits = await self.manager.vectors.search(TEXT, vector, limit=6, where={"namespace": self.namespace})
            others = [h.memory_id for h in hits if h.memory_id != memory_id and sessions.get(h.memory_id) != session]
            if len({sessions.get(m) for m in others if m in sessions}) >= 2:
                found.append((memory_id, others[0], "bridge"))
        return found

    async def commit(self, candidates: list[Candidate], now: datetime) -> None:
        records = self.manager.records
        linked = await records.linked_pairs(self.namespace)
        unique: dict[frozenset[str], Candidate] = {}
        for a, b, strategy in candidates:
            pair = frozenset((a, b))
            if a != b and pair not in linked:
                unique.setdefault(pair, (a, b, strategy))
        self.counts["candidates"] += len(unique)
        stored = await records.embeddings(sorted({m for pair in unique for m in pair}))
        threshold = self.manager.config.sleep.dream_similarity_threshold
        links = []
        for a, b, strategy in unique.values():
            if a not in stored or b not in stored:
                continue
            similarity = float(np.frombuffer(stored[a][0], dtype="<f4") @ np.frombuffer(stored[b][0], dtype="<f4"))
            if similarity >= threshold:
                links.append((a, b, "DREAM_LINK", round(similarity, 4), f"{strategy}: cosine {similarity:.2f}"))
            else:
                self.counts["rejected"] += 1
        if links:
            self.counts["committed"] += await records.add_links(links, now=now)
