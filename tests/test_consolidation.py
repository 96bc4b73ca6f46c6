"""Consolidation with a controlled clock, on the real engines: candidate groups and their guards, the extractive
and the LLM merge, generative replay accepting and rejecting, lineage, and a trial a crash left behind."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from llm_server import ChatCompletionsServer, Reply

from agent_memory import MemoryManager, TurnInput
from agent_memory.cognition.salience import speaker_label
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.models import Memory, MemoryStatus, MemoryType, Tier
from agent_memory.sleep.consolidation import batch_fits
from agent_memory.sleep.groups import GroupRules, MergeCandidate, candidate_groups, keyword_words, overlap
from agent_memory.sleep.jobs import run_job
from agent_memory.sleep.merge import extractive_merge, merged_memory, replay_queries

pytest_plugins = ["llm_server"]

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(days=40)
CAREER = [
    "Caroline: I've been looking into counseling and mental health work as a career.",
    "Caroline: I see. I've been looking into counseling and mental health jobs as a career. I start a course in May.",
    "Caroline: My counseling and mental health career plan is moving: I applied to a master's program in Boston.",
]
OTHERS = [
    "Melanie: My sister Ines lives in Berlin and works as an architect.",
    "Melanie: I ran the Lisbon 10k in 48:37 on March 22.",
    "Melanie: Project Harbor ships on June 3 after the review with Tom.",
    "Melanie: Our dog Bubbles learned to open the garden gate by himself.",
    "Caroline: I adopted a grey cat named Miso from the shelter last spring.",
    "Caroline: My favourite café in Boston serves green tea in tiny cups.",
    "Caroline: I plan to paint my kitchen yellow before the summer.",
]
RULES = GroupRules(overlap=0.6, min_similarity=0.5, valence_delta=0.5, generation_gap=1, max_size=4)


def candidate(
    memory_id: str, words: str, *, valence: float = 0.0, generation: int = 0, speaker: str = "user|Caroline"
) -> MergeCandidate:
    return MergeCandidate(memory_id, frozenset(words.split()), valence, generation, np.ones(4) / 2, 0.5, speaker)


async def ingest_career(manager: MemoryManager, emotions: list[dict[str, float] | None] | None = None) -> list[str]:
    emotions = emotions or [None] * len(CAREER)
    turns = [
        TurnInput(f"s{i}", 0, text, at=T0 + timedelta(days=7 * i), emotional_context=emotion)
        for i, (text, emotion) in enumerate(zip(CAREER, emotions, strict=True))
    ]
    turns += [TurnInput("s9", i, text, at=T0 + timedelta(days=1)) for i, text in enumerate(OTHERS)]
    return [r.memory_id for r in await manager.process_turns(turns) if r.memory_id]


async def statuses(manager: MemoryManager, ids: list[str]) -> list[MemoryStatus]:
    found = await manager.records.get_memories(ids)
    return [found[i].status for i in ids]


# ----- groups (pure) -------------------------------------------------------------------------------------------


def test_groups_need_the_overlap_and_two_shared_words() -> None:
    a, b = candidate("a", "counseling mental health career"), candidate("b", "counseling mental health jobs")
    c = candidate("c", "counseling dog gate")  # one shared word of three: 0.33
    assert overlap(a.words, b.words) == 0.75
    assert [[m.memory_id for m in g] for g in candidate_groups([a, b, c], RULES)] == [["a", "b"]]
    lone = candidate("d", "counseling")  # one shared word is never enough, whatever the share
    assert candidate_groups([a, lone], RULES) == []


def test_groups_keep_the_valence_generation_size_and_similarity_guards() -> None:
    happy, sad = candidate("a", "exam result grade", valence=0.7), candidate("b", "exam result grade", valence=-0.6)
    assert candidate_groups([happy, sad], RULES) == []
    young, old = candidate("a", "exam result grade"), candidate("b", "exam result grade", generation=2)
    assert candidate_groups([young, old], RULES) == []
    assert len(candidate_groups([young, replace(old, generation=1)], RULES)) == 1
    many = [candidate(str(i), "exam result grade") for i in range(7)]
    assert sorted(len(g) for g in candidate_groups(many, RULES)) == [3, 4]  # at most max_size each
    apart = [replace(c, vector=np.eye(4)[i]) for i, c in enumerate(many[:2])]  # orthogonal vectors: cosine 0
    assert candidate_groups(apart, RULES) == []


def test_a_merge_is_one_speakers_words() -> None:
    """One speaker's words echoed by the other are a dialogue, not a repeat: never one memory."""
    said, echoed = candidate("a", "small goal progress motivated"), candidate("b", "small goal progress motivated")
    assert len(candidate_groups([said, echoed], RULES)) == 1
    assert candidate_groups([said, replace(echoed, speaker="user|Melanie")], RULES) == []
    assert candidate_groups([said, replace(echoed, speaker="assistant|")], RULES) == []
    assert speaker_label("[6 Jul] Caroline: I ran.") == speaker_label("Caroline: I ran.") == "Caroline"
    assert speaker_label("Mary Ann Lee: hi") == "Mary Ann Lee" and speaker_label("I ran: far.") == ""


def test_a_word_most_memories_carry_links_nothing() -> None:
    pool = [candidate(str(i), f"caroline melanie topic{i} thing{i}") for i in range(40)]
    assert candidate_groups(pool, RULES) == []  # the speakers' names are in every memory
    assert keyword_words(["Mental health", "support groups", "the"]) == {"mental", "health", "support", "group"}


# ----- the merge (pure) ----------------------------------------------------------------------------------------


def memory(content: str, at: datetime, **changes: Any) -> Memory:
    fields: dict[str, Any] = {
        "memory_id": changes.pop("memory_id", content[:8]),
        "namespace": "default",
        "memory_type": MemoryType.EPISODIC,
        "content": content,
        "keywords": changes.pop("keywords", ()),
        "entities": (),
        "created_at": at,
        "event_at": at,
        "last_accessed_at": None,
        "access_count": changes.pop("access_count", 0),
        "generation": changes.pop("generation", 0),
        "tier": Tier.HOT,
        "status": MemoryStatus.ACTIVE,
        "superseded_by": None,
        "valence": changes.pop("valence", 0.0),
        "arousal": changes.pop("arousal", 0.0),
        "surprise": 0.1,
        "importance": changes.pop("importance", 0.5),
        "confidence": 0.9,
        "decay_score": 1.0,
        "source_turn_id": None,
        "session_id": "s1",
        "revision": 1,
        "turn_number": changes.pop("turn_number", 0),
    }
    return Memory(**fields)


def test_the_extractive_merge_keeps_what_was_said_and_drops_repetition_and_reactions() -> None:
    first = memory(CAREER[0], T0)
    second = memory(CAREER[1], T0 + timedelta(days=7), turn_number=1)
    again = memory("Caroline: I've been looking into counseling and mental health work as a career.", T0, turn_number=2)
    text = extractive_merge([second, again, first])
    assert text.startswith("[2 Mar] Caroline: I've been looking into counseling")  # time order, dated
    assert "career. [9 Mar] I start a course in May." in text  # the same speaker goes on, unnamed
    assert "I see." not in text  # a reaction that adds nothing
    assert text.count("looking into counseling and mental health") == 1  # said three times, kept once
    same_day = extractive_merge([first, replace(second, event_at=T0)])
    assert "[" not in same_day and same_day.count("Caroline:") == 1  # one day: no dates; one speaker: named once


def test_the_merged_memory_is_the_next_generation_and_holds_the_strongest_signals() -> None:
    a = memory("a", T0, generation=1, arousal=0.2, importance=0.4, access_count=2, valence=0.2)
    b = memory("b", T0 + timedelta(days=3), arousal=0.6, importance=0.9, access_count=1, valence=0.4)
    merged = merged_memory([a, b], "a b", keywords=("k",), entities=("E",), now=LATER)
    assert merged.generation == 2 and merged.event_at == b.event_at and merged.created_at == LATER
    assert (merged.arousal, merged.importance, merged.access_count, merged.valence) == (0.6, 0.9, 3, 0.3)
    assert merged.status is MemoryStatus.ACTIVE and merged.memory_id not in {a.memory_id, b.memory_id}
    queries = replay_queries(memory(CAREER[2], T0, keywords=("mental health", "master's program", "Boston")))
    assert queries == ["mental health, master's program: what about counseling career plan moving applied boston?"]


# ----- the job, on the real engines ---------------------------------------------------------------------------


async def test_an_accepted_merge_replaces_its_sources_and_keeps_their_lineage(manager: MemoryManager) -> None:
    ids = await ingest_career(manager)
    career = ids[: len(CAREER)]
    run = await manager.run_compaction(now=LATER)
    assert run.status == "ok" and run.job == "compact", run.error
    assert run.counts["accepted"] == 1 and run.counts["memories_merged"] == 3, run.counts
    (history,) = await manager.records.compactions()
    assert history.status == "accepted" and sorted(history.source_ids) == sorted(career)
    assert history.replay_after is not None and history.replay_before is not None
    assert history.replay_before - history.replay_after <= manager.config.sleep.merge_degradation_tolerance
    merged = await manager.get(history.merged_into or "")
    assert merged.generation == 1 and merged.status is MemoryStatus.ACTIVE and "Boston" in merged.content
    assert await statuses(manager, career) == [MemoryStatus.MERGED] * 3
    assert {m.superseded_by for m in (await manager.records.get_memories(career)).values()} == {merged.memory_id}
    assert await statuses(manager, ids[len(CAREER) :]) == [MemoryStatus.ACTIVE] * len(OTHERS)
    lineage = await manager.records.lineage_turns([merged.memory_id])
    assert lineage[merged.memory_id] == [("s0", 0), ("s1", 0), ("s2", 0)]
    await manager.flush()  # stats() reports the projections as of the projector's last batch
    stats = await manager.stats()
    assert stats["graph"]["EVOLVED_FROM"] == 3
    found = await manager.retrieve("Where did Caroline apply for a master's program?", k=3, now=LATER)
    assert found[0].memory.memory_id == merged.memory_id
    exact = await manager.retrieve('"mental health jobs"', k=3, now=LATER)  # grep: words only a source's log line has
    assert exact[0].memory.memory_id == merged.memory_id and "grep" in exact[0].layers
    assert (await manager.doctor()).consistent
    again = await manager.run_compaction(now=LATER)
    assert again.counts["groups"] == 0  # nothing left that overlaps


async def test_the_valence_and_fast_path_guards_hold_on_the_real_store(
    judging_config: Config, embedder: Embedder
) -> None:
    keep_all = judging_config.save.model_copy(update={"keep_all": True})
    config = judging_config.model_copy(update={"save": keep_all})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        ids = await ingest_career(manager, [{"valence": -0.6}, {"valence": -0.7}, {"valence": 0.8}])
        run = await manager.run_compaction(now=LATER)
        (history,) = await manager.records.compactions()
        assert sorted(history.source_ids) == sorted(ids[:2]), run.counts  # the happy one stays apart
    async with MemoryManager.open(
        judging_config.model_copy(update={"data_dir": config.data_dir / "fast"}), embedder=embedder
    ) as manager:
        intense = {"valence": 0.2, "arousal": 0.95}  # kept on the fast path: never compacted at generation 0
        ids = await ingest_career(manager, [intense, intense, None])
        results = await manager.records.get_memories([i for i in ids if i])
        assert sum(1 for m in results.values() if "counseling" in m.content) == 3
        run = await manager.run_compaction(now=LATER)
        assert run.counts["groups"] == 0 and await manager.records.compactions() == []


async def test_one_speakers_words_echoed_by_the_other_stay_apart_on_the_real_store(manager: MemoryManager) -> None:
    ids = await ingest_career(manager)
    echo = CAREER[1].replace("Caroline:", "Melanie:")  # the same words, said back by the other speaker
    echoed = (await manager.process_turn("s8", 0, echo, at=T0 + timedelta(days=8))).memory_id
    assert echoed is not None
    run = await manager.run_compaction(now=LATER)
    (history,) = await manager.records.compactions()  # one group, tried: Caroline's three, never Melanie's echo
    assert sorted(history.source_ids) == sorted(ids[: len(CAREER)]) and run.counts["groups"] == 1, run.counts
    assert (await manager.get(echoed)).status is MemoryStatus.ACTIVE  # Melanie's stays her own


async def test_replay_rejects_a_merge_that_loses_what_its_sources_answered(
    config: Config, embedder: Embedder, llm_server: ChatCompletionsServer
) -> None:
    lossy = {
        "content": "The weather was mild that week.",
        "questions": ["Where did Caroline apply for a master's program?", "What course does Caroline start in May?"],
    }
    llm_server.responder = lambda request: Reply(json.dumps(lossy))
    config = config.model_copy(update={"llm": llm_server.llm_config()})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        ids = await ingest_career(manager)
        llm_server.requests.clear()
        run = await manager.run_compaction(now=LATER)
        assert run.counts["rejected"] == 1 and run.counts["accepted"] == 0, run.counts
        assert len(llm_server.requests) == 1 and "&lt;" not in json.dumps(lossy)
        (history,) = await manager.records.compactions()
        assert history.status == "rejected" and history.method == "llm" and history.queries == tuple(lossy["questions"])
        assert history.replay_before is not None and history.replay_after is not None
        assert history.replay_before - history.replay_after > 0.15 and "rejected: replay MRR" in history.reason
        assert await statuses(manager, ids[: len(CAREER)]) == [MemoryStatus.ACTIVE] * 3
        retired = await manager.get(history.merged_into or "")
        assert retired.status is MemoryStatus.ERASED and retired.content == lossy["content"]
        found = await manager.retrieve("Where did Caroline apply for a master's program?", k=3, now=LATER)
        assert ids[2] in [r.memory.memory_id for r in found]  # the source answers again
        lineage = await manager.records.lineage_turns([retired.memory_id])  # the rejected attempt stays readable
        assert lineage[retired.memory_id] == [("s0", 0), ("s1", 0), ("s2", 0)]
        assert (await manager.doctor()).consistent


async def test_a_good_llm_merge_is_accepted_and_garbage_falls_back_to_the_extractive_merge(
    config: Config, embedder: Embedder, llm_server: ChatCompletionsServer
) -> None:
    good = {
        "content": "Caroline is pursuing counseling and mental health work as a career: she starts a course in May "
        "and applied to a master's program in Boston.",
        "questions": ["Where did Caroline apply for a master's program?", "What career is Caroline looking into?"],
    }
    llm_server.responder = lambda request: Reply(json.dumps(good))
    config = config.model_copy(update={"llm": llm_server.llm_config(max_retries=0)})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await ingest_career(manager)
        run = await manager.run_compaction(now=LATER)
        (history,) = await manager.records.compactions()
        assert run.counts["accepted"] == 1 and history.method == "llm"
        assert (await manager.get(history.merged_into or "")).content == good["content"]
    llm_server.responder = lambda request: Reply("Sure! Here is the merged memory: it is about counseling.")
    config = config.model_copy(update={"data_dir": config.data_dir / "garbage"})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await ingest_career(manager)
        run = await manager.run_compaction(now=LATER)
        (history,) = await manager.records.compactions()
        assert run.counts["llm_failed"] == 1 and history.method == "extractive" and history.status == "accepted"


async def test_a_merge_left_on_trial_by_a_crash_is_undone_on_the_next_run(manager: MemoryManager) -> None:
    ids = await ingest_career(manager)
    sources = list((await manager.records.get_memories(ids[:2])).values())
    merged = merged_memory(sources, "Caroline: counseling.", keywords=(), entities=(), now=LATER)
    vector = (await manager.embedder.embed([merged.content]))[0].astype("<f4").tobytes()
    trial = await manager.records.commit_merge(
        merged, vector, "test", sources, method="extractive", queries=["q"], replay_before=1.0, now=LATER
    )
    assert trial and await statuses(manager, ids[:2]) == [MemoryStatus.MERGED] * 2
    assert (
        await manager.records.commit_merge(  # a source no longer active: the merge is not committed
            replace(merged, memory_id="other"),
            vector,
            "test",
            sources,
            method="x",
            queries=[],
            replay_before=0,
            now=LATER,
        )
        == 0
    )
    run = await run_job(manager, "compact", now=LATER)
    assert run.counts["undone_trials"] == 1
    first = await manager.records.compactions(status="rejected")
    assert first[-1].compaction_id == trial and "stopped before its replay" in first[-1].reason
    assert (await manager.get(merged.memory_id)).status is MemoryStatus.ERASED
    assert run.counts["accepted"] == 1  # the group was then merged properly


async def test_the_daemon_consolidates_at_once_when_the_hot_tier_is_over_its_threshold(
    config: Config, embedder: Embedder
) -> None:
    from agent_memory.interfaces.serve import SleepSchedule

    serve = config.serve.model_copy(
        update={"tier_interval": timedelta(seconds=1), "compact_interval": timedelta(hours=1)}
    )
    sleep = config.sleep.model_copy(update={"hot_tier_threshold": 2})
    config = config.model_copy(update={"serve": serve, "sleep": sleep})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await ingest_career(manager)
        schedule = SleepSchedule(manager, config)
        schedule.start()
        try:
            for _ in range(600):  # the first tiering run is a second away; the compaction interval an hour
                runs = await manager.records.job_runs("compact")
                if runs and runs[0].status != "running":
                    break
                await asyncio.sleep(0.2)
        finally:
            await schedule.stop()
        tiering = await manager.records.job_runs("tier")
        assert tiering and tiering[-1].counts["compaction_due"] is True
        assert runs and runs[0].status == "ok" and runs[0].counts["accepted"] == 1, runs


async def test_a_run_past_its_budget_defers_the_rest_to_the_next(config: Config, embedder: Embedder) -> None:
    spent = config.model_copy(update={"sleep": config.sleep.model_copy(update={"compaction_budget": timedelta(0)})})
    async with MemoryManager.open(spent, embedder=embedder) as manager:
        await ingest_career(manager)
        run = await manager.run_compaction(now=LATER)
        assert run.counts["groups"] == run.counts["deferred"] == 1 and run.counts["accepted"] == 0
        assert await manager.records.compactions() == []


def test_a_batch_starts_only_when_the_one_before_says_it_ends_within_the_budget() -> None:
    assert batch_fits(10.0, 60.0, None)  # the first batch: only the deadline counts
    assert batch_fits(40.0, 60.0, 20.0) and not batch_fits(45.0, 60.0, 20.0)
    assert not batch_fits(61.0, 60.0, None)
