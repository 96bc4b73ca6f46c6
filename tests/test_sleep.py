"""Sleep jobs with a controlled clock, on the real engines: decay, tiering, the job reports, the CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_memory import InvalidInput, MemoryManager, TurnInput
from agent_memory.cognition.retrieval import query_words
from agent_memory.config import Config, DecayConfig, SleepConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.models import Tier
from agent_memory.scoring import decay_strength
from agent_memory.sleep.decay import strength_of, tier_of
from agent_memory.sleep.jobs import JOBS, run_job
from agent_memory.sleep.keywords import keyword_weights, links_of
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.sleep_records import DecayRow

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
FACTS = [
    "My sister Ines lives in Berlin and works as an architect.",
    "I ran the Lisbon 10k in 48:37 on March 22.",
    "Project Harbor ships on June 3 after the review with Tom.",
]


async def ingest(manager: MemoryManager, emotion: dict[str, float] | None = None) -> list[str]:
    turns = [TurnInput("s1", i, text, at=T0, emotional_context=emotion) for i, text in enumerate(FACTS)]
    return [r.memory_id for r in await manager.process_turns(turns) if r.memory_id]


def row(**changes: object) -> DecayRow:
    return replace(DecayRow(1, "m", T0, None, 0, 0.0, 0.0, 0, Tier.HOT, 1.0), **changes)  # type: ignore[arg-type]


def test_strength_halves_every_half_life_and_slows_with_arousal_use_and_generation() -> None:
    decay = DecayConfig()
    week = T0 + timedelta(days=7)
    assert strength_of(row(), week, decay) == pytest.approx(0.5)
    assert strength_of(row(), T0 + timedelta(days=14), decay) == pytest.approx(0.25)
    assert strength_of(row(arousal=0.9), week, decay) > strength_of(row(arousal=0.1), week, decay)
    assert strength_of(row(surprise=0.8), week, decay) > strength_of(row(), week, decay)
    assert strength_of(row(access_count=5), week, decay) > strength_of(row(), week, decay)
    used = row(last_accessed_at=T0 + timedelta(days=6))
    assert strength_of(used, week, decay) > strength_of(row(), week, decay)
    year = T0 + timedelta(days=365)
    assert strength_of(row(), year, decay) < 0.01
    assert strength_of(row(generation=1), year, decay) == pytest.approx(0.3)  # the consolidation floor


def test_tiers_follow_the_score_and_a_consolidated_memory_is_never_cold() -> None:
    sleep = SleepConfig()
    assert [tier_of(s, 0, sleep) for s in (0.9, 0.5, 0.3, 0.1, 0.05)] == [
        Tier.HOT,
        Tier.HOT,
        Tier.WARM,
        Tier.WARM,
        Tier.COLD,
    ]
    assert tier_of(0.01, 1, sleep) is Tier.WARM


async def test_the_decay_job_stores_the_shared_decay_function(manager: MemoryManager) -> None:
    calm = await ingest(manager, {"valence": 0.0, "arousal": 0.0})
    now = T0 + timedelta(days=10)
    run = await run_job(manager, "decay", now=now)
    assert run.status == "ok" and run.counts == {"scored": 3, "changed": 3} and run.error is None
    for memory_id in calm:
        memory = await manager.get(memory_id)
        expected = decay_strength(
            age=now - memory.event_at,
            since_access=None,
            access_count=0,
            arousal=0.0,
            surprise=memory.surprise,
            generation=0,
            half_life=timedelta(days=7),
        )
        assert memory.decay_score == pytest.approx(expected, abs=1e-6) and memory.decay_score < 0.5
    again = await run_job(manager, "decay", now=now)
    assert again.counts == {"scored": 3, "changed": 0}


async def test_tiering_moves_faded_memories_and_the_vectors_follow(config: Config, embedder: Embedder) -> None:
    small = config.model_copy(update={"sleep": SleepConfig(hot_tier_threshold=2, page_size=2)})
    async with MemoryManager.open(small, embedder=embedder) as manager:
        ids = await ingest(manager, {"valence": 0.0, "arousal": 0.0})
        fresh = await run_job(manager, "tier", now=T0)
        assert fresh.counts["moved"] == {} and fresh.counts["tiers"] == {"hot": 3}
        assert fresh.counts["compaction_due"] is True  # 3 hot memories over a threshold of 2
        await run_job(manager, "decay", now=T0 + timedelta(days=60))
        await manager.flush()
        faded = await run_job(manager, "tier", now=T0 + timedelta(days=60))
        assert faded.counts["moved"] == {"hot->cold": 3} and faded.counts["compaction_due"] is False
        pending = await manager.records.pending_outbox(10)
        assert sorted(i.memory_id for i in pending) == sorted(ids) and {i.scope for i in pending} == {"payload"}
        assert {(await manager.get(i)).tier for i in ids} == {Tier.COLD}  # SQLite's tier, at once
        await manager.flush()  # the projector applies the payload rows
        assert await manager.records.pending_outbox(10) == []
        probe = (await manager.embedder.embed([FACTS[0]]))[0].tolist()
        hits = await manager.vectors.search("text", probe, limit=5, where={"tier": "cold"})
        assert {h.memory_id for h in hits} == set(ids)  # the payload was re-projected through the outbox
        assert (await manager.doctor()).consistent


async def test_every_run_leaves_a_report_and_a_failure_is_one(
    manager: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(_manager: MemoryManager, _now: datetime) -> dict[str, object]:
        raise RuntimeError("the disk said no")

    monkeypatch.setitem(JOBS, "broken", broken)
    failed = await run_job(manager, "broken", now=T0)
    assert failed.status == "failed" and failed.error == "RuntimeError: the disk said no" and failed.finished_at
    ok = await run_job(manager, "decay", now=T0)
    assert [r.job for r in await manager.records.job_runs()] == ["decay", "broken"]
    assert [r.run_id for r in await manager.records.job_runs("decay")] == [ok.run_id]
    with pytest.raises(InvalidInput, match="No sleep job named 'nap'"):
        await run_job(manager, "nap")


def test_the_jobs_run_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "mem")
    sample = str(Path(__file__).resolve().parents[1] / "data" / "sample_conversation.jsonl")
    assert main(["--data-dir", data, "ingest", sample]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "decay", "--now", "2027-01-01T00:00:00", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job"] == "decay" and report["status"] == "ok" and report["counts"]["scored"] > 20
    assert main(["--data-dir", data, "tier", "--now", "2027-01-01T00:00:00"]) == 0
    assert "tier ok" in capsys.readouterr().out
    assert main(["--data-dir", data, "digest", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job"] == "digest" and report["counts"]["digests_new"] >= 1, report
    assert main(["--data-dir", data, "jobs"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["digest", "tier", "decay"]


# ----- keyword reweighting ---------------------------------------------------------------------------------


def test_words_shared_by_connected_memories_gain_weight() -> None:
    rows = [
        ("a", "s1", 0, ["tomatoes", "garden bed"]),
        ("b", "s1", 1, ["tomatoes", "water"]),
        ("c", "s2", 0, ["garden"]),
        ("d", "s3", 0, ["water", "pipes"]),
        ("e", "s4", 0, ["pipes"]),
    ]
    links = links_of(rows, {"plumber joe": ["d", "e"], "everyone": ["a", "b", "c", "d", "e"]}, fanout=3)
    assert links["a"] == {"b"} and links["d"] == {"e"} and "c" not in links  # "everyone" is too common to link
    weights = {w: (weight, n, c) for w, weight, n, c in keyword_weights(rows, links, boost=0.5)}
    assert weights["tomatoes"] == (1.5, 2, 2)  # both carriers are neighbours
    assert weights["water"] == (1.0, 2, 0)  # neither carrier's neighbour carries it
    assert weights["garden"] == (1.0, 2, 0) and weights["pipes"] == (1.5, 2, 2)
    assert "bed" not in weights  # carried by one memory only


async def test_reweighting_changes_the_keyword_ranking_and_is_off_by_default(
    config: Config, embedder: Embedder
) -> None:
    """At a boost the thread's word outweighs a rarer one; at the shipped boost (0) the job keeps no weight, and
    takes away what a boost left, so the ranking is plain BM25's again."""
    assert config.sleep.keyword_boost == 0.0
    boosted = config.model_copy(update={"sleep": config.sleep.model_copy(update={"keyword_boost": 0.5})})
    thread = [
        "We planted the tomatoes today in the raised garden bed by the old fence.",
        "Those tomatoes will need water twice a day once July comes around.",
    ]
    query = "basil or tomatoes for dinner"

    async def keyword_top(manager: MemoryManager) -> str:
        hits = await manager.records.keyword_search("default", query_words(query), limit=5)
        return (await manager.get(hits[0][0])).content

    async with MemoryManager.open(boosted, embedder=embedder) as manager:
        await manager.process_turns([TurnInput("s1", i, text, at=T0) for i, text in enumerate(thread)])
        await manager.process_turn("s2", 0, "Basil on the windowsill.", at=T0)
        await manager.process_turn("s3", 0, "Nonna's basil pesto.", at=T0)
        assert "asil" in await keyword_top(manager)  # rarer word, higher BM25
        run = await run_job(manager, "reweight", now=T0)
        assert run.status == "ok" and run.counts["raised"] >= 1
        weights = "SELECT word, weight FROM keyword_weights WHERE word IN ('tomatoes', 'basil')"
        assert {r[0]: r[1] for r in await manager.records._fetch(weights)} == {"tomatoes": 1.5, "basil": 1.0}
        assert "omatoes" in await keyword_top(manager)  # the thread's word now outweighs it
    async with MemoryManager.open(config, embedder=embedder) as manager:  # the same store, the shipped boost
        assert "omatoes" in await keyword_top(manager)  # until the job runs at it
        run = await run_job(manager, "reweight", now=T0)
        assert run.status == "ok" and run.counts == {"namespaces": 1, "words": 0, "raised": 0}
        assert await manager.records._fetch("SELECT * FROM keyword_weights") == []
        assert "asil" in await keyword_top(manager)


async def test_migration_0033_removes_the_weights_an_older_default_left(tmp_path: Path) -> None:
    """A store made while the boost was 0.5 by default ranks, once upgraded, as a new one does."""
    path = tmp_path / "memory.db"
    records = await SqliteRecords.open(path)
    async with records.transaction() as db:
        await db.execute(
            "INSERT INTO keyword_weights (namespace, word, weight, memories, connected, updated_at) "
            "VALUES ('default', 'tomatoes', 1.5, 2, 2, '2026-01-01')"
        )
        await db.execute("DELETE FROM schema_migrations WHERE version = 33")  # as it was before this version
    await records.aclose()
    records = await SqliteRecords.open(path)
    try:
        assert await records._fetch("SELECT * FROM keyword_weights") == []
        assert (await records._fetch("SELECT max(version) FROM schema_migrations"))[0][0] >= 33
    finally:
        await records.aclose()


# ----- dream exploration -----------------------------------------------------------------------------------

STARTER = [
    ("s1", "My sourdough starter is called Bubbles and lives in the fridge."),
    ("s2", "Bubbles, my sourdough starter, lives in the fridge."),
    ("s3", "The sourdough starter I named Bubbles is kept in the fridge."),
    ("s4", "The quarterly tax filing for the bakery is due on April 30."),
    ("s5", "Tom moved the Harbor launch to June 3 after the review."),
]


async def test_dream_is_off_by_default_and_links_nothing(config: Config, embedder: Embedder) -> None:
    assert config.sleep.dream_walk_count == 0
    async with MemoryManager.open(config, embedder=embedder) as manager:
        for session, text in STARTER:
            await manager.process_turn(session, 0, text, at=T0)
        run = await run_job(manager, "dream", now=T0, seed=7)
        assert run.status == "ok" and set(run.counts.values()) == {0}, run.counts
        assert (await manager.records._fetch("SELECT count(*) FROM memory_links"))[0][0] == 0


async def test_dream_commits_links_above_the_threshold_and_the_graph_keeps_them(
    config: Config, embedder: Embedder
) -> None:
    config = config.model_copy(update={"sleep": config.sleep.model_copy(update={"dream_walk_count": 50})})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        for session, text in STARTER:
            await manager.process_turn(session, 0, text, at=T0)
        run = await run_job(manager, "dream", now=T0, seed=7)
        assert run.status == "ok" and run.counts["committed"] >= 1 and run.counts["probes"] == 5, run.counts
        rows = await manager.records._fetch(
            "SELECT m1.content, m2.content, l.weight, l.reason FROM memory_links l "
            "JOIN memories m1 ON m1.memory_id = l.source_id JOIN memories m2 ON m2.memory_id = l.target_id"
        )
        assert len(rows) == run.counts["committed"]
        for a, b, weight, reason in rows:
            assert "Bubbles" in a and "Bubbles" in b and weight >= 0.7 and reason.split(":")[0] in {"walk", "bridge"}
        await manager.flush()
        assert (await manager.stats())["graph"]["DREAM_LINK"] == len(rows)
        for _ in range(3):  # walks can find a pair the first run did not; a pair already linked is never proposed
            again = await run_job(manager, "dream", now=T0, seed=7)
            if not again.counts["committed"]:
                break
        assert again.counts["committed"] == 0
        linked = await manager.records._fetch("SELECT source_id, target_id FROM memory_links")
        assert len({frozenset(pair) for pair in linked}) == len(linked) <= 3  # the three Bubbles pairs, each once
    shutil.rmtree(config.data_dir / "graph")  # the graph is a projection: the links come back from SQLite
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert (await manager.doctor()).consistent  # the graph was rebuilt from SQLite on open
        assert (await manager.stats())["graph"]["DREAM_LINK"] == len(linked)
        bubbles = await manager.retrieve("what is the sourdough starter called?", k=3)
        assert all("Bubbles" in r.memory.content for r in bubbles)


async def test_dream_commits_nothing_below_the_threshold(config: Config, embedder: Embedder) -> None:
    dreaming = {"dream_walk_count": 50, "dream_similarity_threshold": 0.99}
    strict = config.model_copy(update={"sleep": config.sleep.model_copy(update=dreaming)})
    async with MemoryManager.open(strict, embedder=embedder) as manager:
        for session, text in STARTER:
            await manager.process_turn(session, 0, text, at=T0)
        run = await run_job(manager, "dream", now=T0, seed=7)
        assert run.counts["candidates"] >= 1 and run.counts["committed"] == 0
        assert run.counts["rejected"] == run.counts["candidates"]
        assert (await manager.records._fetch("SELECT count(*) FROM memory_links"))[0][0] == 0


# ----- index upkeep ----------------------------------------------------------------------------------------


class _WritesDuringTheBuild:
    """The store's real vectors, whose text index build overlaps a turn written meanwhile and ends only once the
    turn is in SQLite, so the job's report counts it (a write started beside the job could land after the job's last
    count on a loaded machine: it made this test depend on timing)."""

    def __init__(self, real: Any, process_turn: Callable[..., Awaitable[Any]]) -> None:
        self.real, self._process_turn = real, process_turn
        self.written: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def optimize_offline(self, collection: str, *, at_swap: Any = None) -> dict[str, Any]:
        if collection != "text":
            return dict(await self.real.optimize_offline(collection, at_swap=at_swap))
        late = self._process_turn("s2", 0, "The lighthouse keeper retired in May after forty years.", at=T0)
        built, self.written = await asyncio.gather(self.real.optimize_offline(collection, at_swap=at_swap), late)
        return dict(built)


async def test_the_index_is_built_in_a_child_process_and_writes_meanwhile_are_kept(
    config: Config, embedder: Embedder
) -> None:
    eager = config.model_copy(update={"sleep": SleepConfig(index_min_unindexed=10)})
    async with MemoryManager.open(eager, embedder=embedder) as manager:
        turns = [TurnInput("s1", i, f"Note {i}: the harbor crane number {i} was serviced.", at=T0) for i in range(30)]
        await manager.process_turns(turns)
        await manager.flush()
        assert await manager.vectors.index_status("text") == (30, 0)
        during = _WritesDuringTheBuild(manager.vectors, manager.process_turn)
        manager.vectors = during
        run = await run_job(manager, "index", now=T0)
        manager.vectors, written = during.real, during.written
        assert run.status == "ok", run.error
        text = run.counts["text"]
        assert text["built"] is True and text["points"] == 31 and run.counts["image"]["built"] is False
        await manager.flush()
        assert (await manager.vectors.index_status("text"))[0] == 31
        hits = await manager.retrieve("when did the lighthouse keeper retire?", k=1)
        assert hits[0].memory.memory_id == written.memory_id
        assert (await manager.doctor()).consistent
        assert not any(p.name.startswith(".text.") for p in (eager.data_dir / "vectors").iterdir())
        quiet = await run_job(manager, "index", now=T0)
        assert quiet.counts["text"]["built"] is (quiet.counts["text"]["points"] - quiet.counts["text"]["indexed"] >= 10)


class _DiesAfterTheSwap:
    """The store's real vectors, through which an index build sees a write land after its copy was taken (so only
    the shard going out holds it), and the job stop right after the swap, as a process killed there would."""

    def __init__(self, real: Any, write: Callable[[], Awaitable[str]]) -> None:
        self._real, self._write, self.written = real, write, ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def optimize_offline(self, collection: str, *, at_swap: Any = None) -> dict[str, Any]:
        @asynccontextmanager
        async def late_write_then_swap() -> AsyncIterator[None]:
            self.written = await self._write()
            async with at_swap() if at_swap is not None else nullcontext():
                yield

        await self._real.optimize_offline(collection, at_swap=late_write_then_swap)
        raise RuntimeError("killed right after the swap")


async def test_a_write_made_during_an_index_build_survives_a_death_right_after_the_swap(
    config: Config, embedder: Embedder
) -> None:
    """The copy an index is built on lacks what was written after it was taken. Those rows are requeued before the
    copy is swapped in, not after: a process that dies between the swap and the job's end replays them when it
    opens, instead of leaving their points only in the shard it threw away (found by doctor, and by nothing else)."""
    eager = config.model_copy(update={"sleep": SleepConfig(index_min_unindexed=10)})
    async with MemoryManager.open(eager, embedder=embedder) as manager:
        turns = [TurnInput("s1", i, f"Note {i}: the harbor crane number {i} was serviced.", at=T0) for i in range(30)]
        await manager.process_turns(turns)
        await manager.flush()

        async def write() -> str:
            result = await manager.process_turn("s2", 0, "The lighthouse keeper retired in May after forty years.")
            await manager.flush()  # its point is in the shard that is about to go
            return result.memory_id or ""

        dying = _DiesAfterTheSwap(manager.vectors, write)
        manager.vectors = dying
        run = await run_job(manager, "index", now=T0)
        assert run.status == "failed" and run.error == "RuntimeError: killed right after the swap"
        assert dying.written
    async with MemoryManager.open(eager, embedder=embedder) as manager:
        await manager.flush()
        assert dying.written in await manager.vectors.ids("text")
        assert (await manager.doctor()).consistent


async def test_a_collection_left_aside_by_a_swap_cut_off_between_its_renames_comes_back(
    config: Config, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """An index swap renames the shard aside, then the optimized copy into its place. Killed between the two, the
    next open finds no shard: it takes the one set aside back, index and all, rather than rebuilding the collection
    from SQLite unindexed. Killed after both, the next open removes the shard left aside."""
    async with MemoryManager.open(config, embedder=embedder) as manager:
        turns = [TurnInput("s1", i, f"Note {i}: the harbor crane number {i} was serviced.", at=T0) for i in range(30)]
        await manager.process_turns(turns)
        assert (await run_job(manager, "index", now=T0, force=True)).counts["text"]["built"] is True
    vectors = config.data_dir / "vectors"
    (vectors / "text").rename(vectors / ".text.replaced")
    with caplog.at_level("WARNING"):
        async with MemoryManager.open(config, embedder=embedder) as manager:
            assert await manager.vectors.count("text") == 30
            assert (await manager.doctor()).consistent
    said = [r.getMessage() for r in caplog.records]
    assert any("cut off mid-swap; restoring it" in m for m in said)
    assert not any("rebuilding it from SQLite" in m for m in said)  # not thrown away and made again, unindexed
    shutil.copytree(vectors / "text", vectors / ".text.replaced")
    shutil.copytree(vectors / "text", vectors / ".text.optimizing")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert await manager.vectors.count("text") == 30
    assert sorted(p.name for p in vectors.iterdir() if p.name.startswith(".text")) == []


async def test_a_job_over_its_timeout_is_stopped_and_an_interrupted_run_is_marked_failed(
    config: Config, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow(_manager: MemoryManager, _now: datetime) -> dict[str, object]:
        await asyncio.sleep(5)
        return {"never": True}

    monkeypatch.setitem(JOBS, "slow", slow)
    hasty = config.model_copy(update={"sleep": SleepConfig(job_timeout=timedelta(milliseconds=50))})
    async with MemoryManager.open(hasty, embedder=embedder) as manager:
        started = asyncio.get_running_loop().time()
        run = await run_job(manager, "slow", now=T0)
        assert asyncio.get_running_loop().time() - started < 4
        assert run.status == "failed" and run.error is not None and run.error.startswith("timed out after")
        cut_off = await manager.records.start_job("decay", now=T0)  # what a kill -9 mid-run leaves behind
        await run_job(manager, "decay", now=T0)
        runs = {r.run_id: r for r in await manager.records.job_runs("decay")}
        assert runs[cut_off].status == "failed" and "interrupted" in (runs[cut_off].error or "")
        assert [r.status for r in runs.values() if r.run_id != cut_off] == ["ok"]
