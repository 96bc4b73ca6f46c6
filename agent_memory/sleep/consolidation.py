"""Consolidation: memories that say overlapping things become one generation+1 memory, each merge checked by
generative replay before it stands.

For each namespace:

1. **Groups** (groups.py): active text memories whose keyword words overlap at least
   `sleep.keyword_overlap_merge_threshold` and whose vectors are at least `sleep.merge_min_similarity` similar,
   found through an inverted index; never across speakers (the turn's role and transcript label), never across a
   valence gap over `sleep.max_valence_delta_for_merge`, never more than `sleep.max_generation_gap_for_merge`
   generations apart, never a memory the policy protects (a fast-path generation-0 memory). Most faded and least important first, at most `sleep.compaction_max_merges`.
2. **Merge** (merge.py): the LLM writes the merged text and the replay questions when one is configured; else (or
   when it fails) the extractive merge and key-phrase questions.
3. **Replay, before**: each synthetic query runs through retrieval as the store is; it scores the reciprocal rank
   of the group's best member within `sleep.replay_k` results.
4. **Commit on trial**: the merged memory is written, its sources marked merged into it, EVOLVED_FROM links and a
   history row with status "trial", in one transaction; the projections follow through the outbox.
5. **Replay, after**: the same queries against the store with the merge; now the merged memory is the target.
6. **Verdict**: a drop in mean reciprocal rank over `sleep.merge_degradation_tolerance` undoes the merge (the
   sources active again, the merged memory erased but kept, the row "rejected" with both scores); else the row is
   "accepted". A trial a stopped run left without a verdict is undone when compaction next runs.

Merges are tried in batches, so one replay "after" sees the batch's other merges too: the store as it will be.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_memory.cognition.salience import speaker_label
from agent_memory.errors import LLMError
from agent_memory.llm.merge_prompt import ask_merge
from agent_memory.models import Memory
from agent_memory.sleep.groups import GroupRules, MergeCandidate, candidate_groups, keyword_words
from agent_memory.sleep.merge import extractive_merge, merged_memory, replay_queries

if TYPE_CHECKING:
    from agent_memory.manager import MemoryManager

log = logging.getLogger(__name__)
BATCH = 25
"""Merges committed on trial together, then replayed together."""
SEEDS_PER_MERGE = 20
"""Memories (the most faded first) that look for merge partners, per merge a run may make: the search is bounded
by what a run can use, not by the size of the store (the next run goes on from there)."""
REPLAY_WITHOUT = ("grep",)
"""Replay judges what the merged text itself is found by: grep would find it by its sources' words in the log."""


@dataclass(frozen=True, slots=True)
class Proposal:
    members: tuple[Memory, ...]
    content: str
    queries: tuple[str, ...]
    method: str  # "llm" or "extractive"


async def run_compaction(manager: MemoryManager, now: datetime) -> dict[str, Any]:
    counts = dict.fromkeys(("groups", "no_gain", "accepted", "rejected", "skipped", "undone_trials", "llm_failed"), 0)
    counts |= {"deferred": 0, "memories_merged": 0, "tokens_before": 0, "tokens_after": 0}
    for trial in await manager.records.merges_on_trial():
        reason = "undone: the run that tried it stopped before its replay finished"
        await manager.records.undo_merge(trial, replay_after=None, reason=reason, now=now)
        counts["undone_trials"] += 1
    await manager.flush()
    deadline = time.monotonic() + manager.config.sleep.compaction_budget.total_seconds()
    last: float | None = None  # seconds the previous batch took
    for namespace in await manager.records.memory_namespaces():
        groups = await _groups(manager, namespace, now)
        counts["groups"] += len(groups)
        for start in range(0, len(groups), BATCH):
            if not batch_fits(time.monotonic(), deadline, last):
                counts["deferred"] += len(groups) - start  # sleep.compaction_budget spent: the next run goes on
                break
            began = time.monotonic()
            await _consolidate(manager, namespace, groups[start : start + BATCH], now, counts)
            last = time.monotonic() - began
    return counts


def batch_fits(now: float, deadline: float, last: float | None) -> bool:
    """Whether another batch may start: before the deadline, and, judged by the batch before it, ending by then.
    Stopping only once the deadline had passed let the last batch run a whole batch over (100k synthetic store:
    82-87 s for a 60 s budget)."""
    return now <= deadline and (last is None or now + last <= deadline)


async def _groups(manager: MemoryManager, namespace: str, now: datetime) -> list[list[Memory]]:
    """The namespace's groups to try, most wanting consolidation first; the work runs off the event loop."""
    sleep = manager.config.sleep
    rows = await manager.records.merge_candidates(namespace)
    memories: dict[str, Memory] = {memory.memory_id: memory for memory, _, _ in rows}
    rules = GroupRules(
        overlap=sleep.keyword_overlap_merge_threshold,
        min_similarity=sleep.merge_min_similarity,
        valence_delta=sleep.max_valence_delta_for_merge,
        generation_gap=sleep.max_generation_gap_for_merge,
        max_size=sleep.merge_max_group,
        seeds=SEEDS_PER_MERGE * sleep.compaction_max_merges,
    )

    def group() -> list[list[MergeCandidate]]:
        candidates = [
            MergeCandidate(
                memory.memory_id,
                keyword_words(memory.keywords),
                memory.valence,
                memory.generation,
                np.frombuffer(blob, dtype="<f4") if blob is not None else None,
                manager.policy.compaction_priority(memory, fast_path=fast, now=now, decay=manager.config.decay),
                f"{memory.role.value if memory.role else ''}|{speaker_label(memory.content)}",
            )
            for memory, fast, blob in rows
            if manager.policy.may_compact(memory, fast_path=fast)
        ]
        return candidate_groups(candidates, rules)

    groups = await asyncio.to_thread(group)
    return [[memories[c.memory_id] for c in found] for found in groups[: sleep.compaction_max_merges]]


async def _consolidate(
    manager: MemoryManager, namespace: str, groups: Sequence[list[Memory]], now: datetime, counts: dict[str, int]
) -> None:
    proposals: list[Proposal] = []
    for group in groups:
        proposal = await _propose(manager, group, counts)
        if _shrinks(manager, proposal, counts):
            proposals.append(proposal)
    before = [await _replay(manager, namespace, p.queries, {m.memory_id for m in p.members}, now) for p in proposals]
    vectors = await manager.embedder.embed([p.content for p in proposals])
    trials: list[tuple[int, str, Proposal, float]] = []
    for proposal, vector, score in zip(proposals, vectors, before, strict=True):
        found = await asyncio.to_thread(manager.extractor.extract, proposal.content)
        merged = merged_memory(
            proposal.members, proposal.content, keywords=found.keywords, entities=found.entities, now=now
        )
        trial = await manager.records.commit_merge(
            merged,
            vector.astype("<f4").tobytes(),
            manager.embedder.name,
            proposal.members,
            method=proposal.method,
            queries=proposal.queries,
            replay_before=score,
            now=now,
        )
        if trial:
            trials.append((trial, merged.memory_id, proposal, score))
        else:
            counts["skipped"] += 1  # a source changed since it was read
    await manager.flush()
    for trial, merged_id, proposal, score in trials:
        after = await _replay(manager, namespace, proposal.queries, {merged_id}, now)
        await _verdict(manager, trial, proposal, score, after, now, counts)
    await manager.flush()


async def _verdict(
    manager: MemoryManager,
    trial: int,
    proposal: Proposal,
    before: float,
    after: float,
    now: datetime,
    counts: dict[str, int],
) -> None:
    tolerance = manager.config.sleep.merge_degradation_tolerance
    scores = f"replay MRR {before:.3f} -> {after:.3f}"
    if before - after > tolerance:
        reason = f"rejected: {scores}, a drop over merge_degradation_tolerance {tolerance}"
        await manager.records.undo_merge(trial, replay_after=after, reason=reason, now=now)
        counts["rejected"] += 1
        return
    await manager.records.accept_merge(trial, replay_after=after, reason=f"accepted: {scores}", now=now)
    counts["accepted"] += 1
    counts["memories_merged"] += len(proposal.members)
    counter = manager.token_counter
    counts["tokens_before"] += sum(counter.count(m.content) for m in proposal.members)
    counts["tokens_after"] += counter.count(proposal.content)


def _shrinks(manager: MemoryManager, proposal: Proposal, counts: dict[str, int]) -> bool:
    """A merge must hold fewer tokens than its sources: one that does not (nothing was repeated, and the dates it
    adds cost more than it drops) is no consolidation, and is not tried."""
    counter = manager.token_counter
    if counter.count(proposal.content) < sum(counter.count(m.content) for m in proposal.members):
        return True
    counts["no_gain"] += 1
    return False


async def _propose(manager: MemoryManager, members: list[Memory], counts: dict[str, int]) -> Proposal:
    if manager.llm is not None:
        try:
            answer = await ask_merge(manager.llm, members)
            return Proposal(tuple(members), answer.content, tuple(answer.questions), "llm")
        except LLMError as exc:
            log.warning("consolidation merges extractively: %s", exc)
            counts["llm_failed"] += 1
    queries = [q for m in members for q in replay_queries(m)]
    return Proposal(tuple(members), extractive_merge(members), tuple(dict.fromkeys(queries)), "extractive")


async def _replay(
    manager: MemoryManager, namespace: str, queries: Sequence[str], targets: set[str], now: datetime
) -> float:
    """Mean reciprocal rank of the first target within `sleep.replay_k` results, over the queries (0 for none)."""
    if not queries:
        return 0.0
    k, total = manager.config.sleep.replay_k, 0.0
    for query in queries:
        recalled = await manager.recall(query, namespace=namespace, now=now, without=REPLAY_WITHOUT)
        for rank, result in enumerate(recalled.ranked.results[:k], start=1):
            if result.memory.memory_id in targets:
                total += 1.0 / rank
                break
    return total / len(queries)
