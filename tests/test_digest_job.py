"""The digest sleep job on the real engines: topics across sessions, lineage, rewriting, the cursor, compaction."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory import MemoryManager, TurnInput
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.models import MemoryStatus, MemoryType
from agent_memory.sleep.jobs import SLEEP_CYCLE, run_job

T0 = datetime(2023, 5, 8, 12, tzinfo=UTC)
LATER = T0 + timedelta(days=90)
CONVERSATION = [  # (session, text): Melanie's pastimes spread over three sessions, among other talk
    ("s1", "Melanie: I just signed up for a pottery class yesterday. How are you?"),
    ("s1", "Caroline: I went to a support group meeting, it was so powerful."),
    ("s2", "Melanie: We went camping at the lake with the kids last weekend!"),
    ("s2", "Caroline: I am researching adoption agencies now."),
    ("s3", "Melanie: I finished my first pottery bowl, I love making pottery."),
    ("s3", "Melanie: The kids and I went swimming at the beach."),
    ("s3", "Caroline: Wow, that sounds amazing! What did the kids think?"),
]


async def converse(manager: MemoryManager, lines: list[tuple[str, str]], start: int = 0) -> list[str]:
    turns = [
        TurnInput(session, start + n, text, at=T0 + timedelta(days=10 * int(session[1:])))
        for n, (session, text) in enumerate(lines)
    ]
    return [r.memory_id or "" for r in await manager.process_turns(turns)]


async def digests(manager: MemoryManager) -> dict[str, str]:
    found = await manager.records.get_memories(sorted(await manager.records.digest_memory_ids()))
    return {m.memory_id: m.content for m in found.values()}


async def test_a_speakers_statements_become_dated_digests_that_lead_back_to_their_turns(
    manager: MemoryManager,
) -> None:
    ids = await converse(manager, CONVERSATION)
    run = await run_job(manager, "digest", now=LATER)
    assert run.status == "ok", run.error
    assert run.counts["memories_read"] == 7 and run.counts["digests_new"] == 2, run.counts
    texts = await digests(manager)
    pottery = next(i for i, text in texts.items() if "pottery" in text)
    outdoors = next(i for i, text in texts.items() if "camping" in text)
    assert texts[pottery] == (
        "Melanie, in their own words:\n"
        "- 2023-05-18: I just signed up for a pottery class yesterday.\n"
        "- 2023-06-07: I finished my first pottery bowl, I love making pottery."
    )
    assert "Caroline" not in texts[outdoors] and "What did the kids think" not in texts[outdoors]
    memory = await manager.get(pottery)
    assert memory.generation == 1 and memory.memory_type is MemoryType.SEMANTIC
    assert memory.event_at == T0 + timedelta(days=30) and memory.session_id == "s3"
    assert "melanie" in memory.entities and "pottery" in " ".join(memory.keywords)
    lineage = await manager.records.lineage_turns([pottery, outdoors])
    assert lineage == {pottery: [("s1", 0), ("s3", 4)], outdoors: [("s2", 2), ("s3", 5)]}
    sources = await manager.records.get_memories(ids)
    assert {m.status for m in sources.values()} == {MemoryStatus.ACTIVE}  # a digest takes nothing away
    await manager.flush()  # stats() reports the projections as of the projector's last batch
    stats = await manager.stats()
    assert stats["graph"]["EVOLVED_FROM"] == 4 and stats["vectors"]["text"] == 9
    assert (await manager.doctor()).consistent
    found = await manager.retrieve("What are Melanie's hobbies? pottery or camping?", k=3, now=LATER)
    assert {r.memory.memory_id for r in found} & {pottery, outdoors}


async def test_a_run_reads_only_what_is_new_and_a_growing_topic_is_rewritten_in_place(
    manager: MemoryManager,
) -> None:
    await converse(manager, CONVERSATION)
    await run_job(manager, "digest", now=LATER)
    before = await digests(manager)
    again = await run_job(manager, "digest", now=LATER)
    assert again.counts["memories_read"] == 0 and await digests(manager) == before
    await converse(manager, [("s4", "Melanie: We went camping in the mountains and I loved it.")], start=20)
    more = await run_job(manager, "digest", now=LATER)
    assert more.counts == {
        "memories_read": 1,
        "statements": 1,
        "topics_new": 0,
        "digests_new": 0,
        "digests_rewritten": 1,
        "deferred": False,
    }
    after = await digests(manager)
    assert set(after) == set(before)  # the same memories, one of them rewritten
    (grown,) = [i for i in after if after[i] != before[i]]
    assert after[grown].startswith(before[grown]) and after[grown].endswith(
        "- 2023-06-17: We went camping in the mountains and I loved it."
    )
    memory = await manager.get(grown)
    assert memory.revision == 2 and memory.event_at == T0 + timedelta(days=40)
    assert len((await manager.records.lineage_turns([grown]))[grown]) == 3
    hits = await manager.retrieve("camping in the mountains", k=5, now=LATER)
    assert grown in {r.memory.memory_id for r in hits}  # the rewritten text is what the layers find
    assert (await manager.doctor()).consistent


async def test_topics_are_the_same_whatever_the_step_size(config: Config, embedder: Embedder) -> None:
    found = []
    for step in (1000, 2):
        sleep = config.sleep.model_copy(update={"digest_batch": step})
        data = config.data_dir / f"step-{step}"
        async with MemoryManager.open(
            config.model_copy(update={"sleep": sleep, "data_dir": data}), embedder=embedder
        ) as manager:
            await converse(manager, CONVERSATION)
            run = await run_job(manager, "digest", now=LATER)
            assert run.counts["memories_read"] == 7
            found.append(sorted((await digests(manager)).values()))
    assert found[0] == found[1] and len(found[0]) == 2


async def test_a_run_past_its_budget_leaves_the_rest_to_the_next(config: Config, embedder: Embedder) -> None:
    """No step starts after sleep.digest_budget, but every run makes one: runs one after another finish."""
    sleep = config.sleep.model_copy(update={"digest_budget": timedelta(0), "digest_batch": 3})
    async with MemoryManager.open(config.model_copy(update={"sleep": sleep}), embedder=embedder) as manager:
        await converse(manager, CONVERSATION)
        runs = [(await run_job(manager, "digest", now=LATER)).counts for _ in range(3)]
        assert [(r["memories_read"], r["deferred"]) for r in runs] == [(3, True), (3, True), (1, False)]
        assert len(await manager.records.digest_memory_ids()) == 2


async def test_compaction_never_merges_a_digest(manager: MemoryManager) -> None:
    await converse(manager, CONVERSATION)
    await run_job(manager, "digest", now=LATER)
    digest_ids = await manager.records.digest_memory_ids()
    candidates = {m.memory_id for m, _, _ in await manager.records.merge_candidates("default")}
    assert digest_ids and not digest_ids & candidates and len(candidates) == 7
    await manager.run_compaction(now=LATER)
    assert {m.status for m in (await manager.records.get_memories(sorted(digest_ids))).values()} == {
        MemoryStatus.ACTIVE
    }


def test_the_digest_job_runs_in_the_sleep_cycle_after_consolidation() -> None:
    assert SLEEP_CYCLE.index("compact") < SLEEP_CYCLE.index("digest")


async def test_the_daemon_runs_a_deferred_digest_again_until_it_has_caught_up(
    config: Config, embedder: Embedder
) -> None:
    from agent_memory.interfaces.serve import SleepSchedule

    serve = config.serve.model_copy(update={"digest_interval": timedelta(hours=1)})
    sleep = config.sleep.model_copy(update={"digest_budget": timedelta(0), "digest_batch": 2})
    config = config.model_copy(update={"serve": serve, "sleep": sleep})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await converse(manager, CONVERSATION)
        schedule = SleepSchedule(manager, config)
        schedule.start()
        schedule.scheduler.modify_job("digest", next_run_time=datetime.now(UTC))  # the interval is an hour
        try:
            for _ in range(300):
                runs = await manager.records.job_runs("digest")
                if runs and runs[0].status == "ok" and runs[0].counts["deferred"] is False:
                    break
                await asyncio.sleep(0.1)
        finally:
            await schedule.stop()
        assert [r.counts["memories_read"] for r in reversed(runs)] == [2, 2, 2, 1], runs  # one step a run
        assert len(await manager.records.digest_memory_ids()) == 2


def test_the_command_line_runs_the_digest_until_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MEMORY__SLEEP__DIGEST_BUDGET", "PT0S")
    monkeypatch.setenv("AGENT_MEMORY__SLEEP__DIGEST_BATCH", "10")
    data = str(tmp_path / "mem")
    sample = str(Path(__file__).resolve().parents[1] / "data" / "sample_conversation.jsonl")
    assert main(["--data-dir", data, "ingest", sample]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "digest", "--until-done"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) >= 3 and all(" digest ok " in line for line in lines), lines
    assert '"deferred": true' in lines[0] and '"deferred": false' in lines[-1]


def test_an_import_from_the_command_line_ends_with_its_digests_once_enough_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No daemon: the store closes when `ingest` ends, so the command makes the digests an idle store would; under
    `sleep.digest_idle_min` it leaves them to the job, and its output is the import's summary alone."""
    sample = str(Path(__file__).resolve().parents[1] / "data" / "sample_conversation.jsonl")
    few = str(tmp_path / "few")
    assert main(["--data-dir", few, "ingest", sample]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and "digests" not in out + err, out
    assert main(["--data-dir", few, "stats", "--json"]) == 0
    waiting = json.loads(capsys.readouterr().out)["memories_to_digest"]
    assert 0 < waiting < 100
    monkeypatch.setenv("AGENT_MEMORY__SLEEP__DIGEST_IDLE_MIN", "5")
    enough = str(tmp_path / "enough")
    assert main(["--data-dir", enough, "ingest", sample]) == 0
    out, err = capsys.readouterr()
    assert f"gathering the statements of {waiting} memories into digests" in err
    line = next(x for x in out.splitlines() if x.startswith("digests: "))
    assert f"in {waiting} memories" in line and " 0 new " not in line, line
    assert main(["--data-dir", enough, "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memories_to_digest"] == 0


# ----- digests while the store is idle ------------------------------------------------------------------------


def _idle(config: Config, *, least: int, delay: timedelta, folder: str, batch: int = 500) -> Config:
    sleep = config.sleep.model_copy(
        update={"digest_idle_min": least, "digest_idle_delay": delay, "digest_batch": batch}
    )
    return config.model_copy(update={"sleep": sleep, "data_dir": config.data_dir / folder})


async def _statement_tally(manager: MemoryManager) -> tuple[int, int]:
    """(statements placed, the topics' sizes summed): equal unless a statement was counted twice."""
    rows = await manager.records._fetch(
        "SELECT (SELECT count(*) FROM digest_statements), (SELECT coalesce(sum(size), 0) FROM digest_topics)"
    )
    return int(rows[0][0]), int(rows[0][1])


async def test_once_enough_memories_wait_an_idle_store_digests_them_as_the_job_would(
    config: Config, embedder: Embedder
) -> None:
    """An import's digests come once the store is idle, not at the job's next hourly run: the same digests the job
    makes, in steps of two memories, and once five waited the steps go on past the point where fewer wait, so the
    job then finds nothing new."""
    async with MemoryManager.open(
        config.model_copy(update={"data_dir": config.data_dir / "job"}), embedder=embedder
    ) as manager:
        await converse(manager, CONVERSATION)
        await run_job(manager, "digest", now=LATER)
        by_the_job = sorted((await digests(manager)).values())
    eager = _idle(config, least=5, delay=timedelta(milliseconds=200), folder="idle", batch=2)
    async with MemoryManager.open(eager, embedder=embedder) as manager:
        await converse(manager, CONVERSATION)
        assert (await manager.stats())["memories_to_digest"] == 7
        for _ in range(600):  # up to 30 s on a loaded machine; about 1 s here
            if len(await digests(manager)) == 2:
                break
            await asyncio.sleep(0.05)
        assert sorted((await digests(manager)).values()) == by_the_job
        assert (await manager.stats())["memories_to_digest"] == 0
        run = await run_job(manager, "digest", now=LATER)
        assert run.counts["memories_read"] == 0 and run.counts["digests_new"] == 0, run.counts
        await manager.flush()
        assert (await manager.doctor()).consistent


async def test_fewer_waiting_than_the_least_or_the_task_off_leave_them_to_the_job(
    config: Config, embedder: Embedder
) -> None:
    """A live chat's few memories wait for the job (their digests are not rewritten at every pause), and with
    `sleep.digest_idle_delay` zero nothing is digested but by the job."""
    for least, delay, folder in ((8, timedelta(milliseconds=100), "few"), (1, timedelta(0), "off")):
        async with MemoryManager.open(_idle(config, least=least, delay=delay, folder=folder), embedder=embedder) as m:
            await converse(m, CONVERSATION)
            await asyncio.sleep(0.6)  # idle six times the delay: the task looked, and left them
            caught = await m.digests.catch_up()
            assert caught["memories_read"] == 0 and await digests(m) == {}, caught
            assert (await m.stats())["memories_to_digest"] == 7
            run = await run_job(m, "digest", now=LATER)
            assert run.counts["memories_read"] == 7 and run.counts["digests_new"] == 2


async def test_the_job_and_the_idle_task_at_once_place_each_statement_once(config: Config, embedder: Embedder) -> None:
    """One step at a time, whichever runs it: the job and the background task's steps, started together, read each
    memory once (both reading from the same cursor counted every statement twice)."""
    one_step = config.sleep.model_copy(
        update={"digest_batch": 2, "digest_idle_min": 1, "digest_idle_delay": timedelta(hours=1)}
    )
    async with MemoryManager.open(config.model_copy(update={"sleep": one_step}), embedder=embedder) as manager:
        await converse(manager, CONVERSATION)
        run, caught = await asyncio.gather(run_job(manager, "digest", now=LATER), manager.digests.catch_up(LATER))
        assert run.counts["memories_read"] + caught["memories_read"] == 7, (run.counts, caught)
        placed, sizes = await _statement_tally(manager)
        assert placed == sizes == run.counts["statements"] + caught["statements"]
        assert len(await digests(manager)) == 2


def test_the_idle_digest_settings_refuse_what_cannot_be() -> None:
    from pydantic import ValidationError

    from agent_memory.config import SleepConfig

    with pytest.raises(ValidationError, match="digest_idle_min"):
        SleepConfig(digest_idle_min=0)
    with pytest.raises(ValidationError, match="digest_idle_delay"):
        SleepConfig(digest_idle_delay=timedelta(seconds=-1))
    assert SleepConfig().digest_idle_min == 100 and SleepConfig().digest_idle_delay == timedelta(seconds=10)
