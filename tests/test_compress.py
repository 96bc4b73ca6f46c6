"""Compression (issue #20, section 3): a cold memory's stored text cut to its salient sentences, the log keeping
every word. Real manager and engines in tmp dirs; the clock is the job's `now`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest

from agent_memory import MemoryManager
from agent_memory.cognition.compress import ELLIPSIS, salient_cut
from agent_memory.cognition.tokens import CharCounter
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import RevisionConflict
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.token import load_or_create_token
from agent_memory.models import MemoryStatus, TurnInput
from agent_memory.sleep.compress import EMBED_CHUNK
from agent_memory.sleep.jobs import SLEEP_CYCLE, run_cycle, run_job
from agent_memory.storage.journal import segment_name

SAID = datetime(2024, 3, 1, tzinfo=UTC)
LATER = SAID + timedelta(days=90)  # cold by then (half-life 7 days), and past sleep.compress_after
SALIENT = (
    "I adopted a greyhound named Pixel from the Lisbon shelter on 3 March 2024.",
    "Pixel eats 300 grams of kibble every morning.",
    "My sister Ines walks Pixel on Tuesdays.",
)
FILLER = (
    "That sounds wonderful!",
    "Honestly there is so much one could ramble on about here, and most of it would matter to nobody at all.",
    "Some afternoons simply drift along without anything worth noting happening, which is fine.",
    "It is the sort of thing that comes and goes, like most passing thoughts on a slow and quiet afternoon.",
    "Let me know if you need anything else.",
)
TEXT = " ".join([FILLER[0], SALIENT[0], FILLER[1], FILLER[2], SALIENT[1], FILLER[3], SALIENT[2], FILLER[4]])
SHORT = "The plumber fixed the kitchen sink on Tuesday."
CAP = 60
count = CharCounter().count


async def cold(manager: MemoryManager, *texts: str, session: str = "s1") -> list[str]:
    """Each text a turn memory said at SAID, then scored and tiered at LATER (cold)."""
    ids = []
    for n, text in enumerate(texts):
        result = await manager.process_turn(session, n, text, at=SAID)
        assert result.memory_id is not None
        ids.append(result.memory_id)
    await manager.flush()  # the projector derives the keywords the cut weighs
    for job in ("decay", "tier"):
        assert (await run_job(manager, job, now=LATER)).status == "ok"
    return ids


async def compress(manager: MemoryManager, **options: object) -> dict[str, object]:
    run = await run_job(manager, "compress", now=LATER, **({"cap": CAP} | options))
    assert run.status == "ok", run.error
    return dict(run.counts)


def test_the_cut_keeps_salient_sentences_in_order_within_the_cap() -> None:
    cut = salient_cut(TEXT, cap=CAP, count=count, keywords=("greyhound", "kibble"), entities=("pixel", "ines"))
    assert cut is not None and count(cut.text) <= CAP
    positions = [cut.text.index(s) for s in SALIENT]
    assert positions == sorted(positions)  # as they were said
    assert not any(f in cut.text for f in FILLER)
    assert (cut.kept, cut.dropped) == (3, 5)
    assert salient_cut(SHORT, cap=CAP, count=count) is None  # within the cap already


def test_a_memory_with_one_long_sentence_keeps_its_start() -> None:
    sentence = "I walked " + " and then ".join(f"past shop number {n}" for n in range(60)) + "."
    cut = salient_cut(sentence, cap=20, count=count)
    assert cut is not None and count(cut.text) <= 20
    assert cut.text.startswith("I walked past shop number 0") and cut.text.endswith(ELLIPSIS)


async def test_a_cold_memory_is_cut_and_its_turn_keeps_every_word(manager: MemoryManager) -> None:
    (memory_id,) = await cold(manager, TEXT)
    counts = await compress(manager)
    assert counts["compressed"] == 1 and counts["tokens_after"] <= CAP < counts["tokens_before"]
    memory = await manager.get(memory_id)
    assert memory.revision == 2 and memory.original is None
    assert all(s in memory.content for s in SALIENT) and not any(f in memory.content for f in FILLER)
    assert (await manager.get(memory_id, original=True)).original == TEXT  # read back from the log
    (earlier,) = await manager.history(memory_id)
    assert (earlier.revision, earlier.change, earlier.agent, earlier.reason) == (1, "update", "sleep", "compress")
    assert earlier.content == ""  # the words are the log's; SQLite does not hold them twice
    rows = await manager.records._fetch(
        "SELECT count(*) FROM memory_revisions WHERE content LIKE ?", (f"%{FILLER[1][:40]}%",)
    )
    assert rows[0][0] == 0
    with pytest.raises(RevisionConflict):  # an agent holding the revision it read before the cut
        await manager.update(memory_id, "Pixel is a whippet.", expected_revision=1)


async def test_a_cut_memory_keeps_its_logged_length_until_an_agent_rewrites_it(manager: MemoryManager) -> None:
    """Retrieval judges whether a turn leans on its neighbours by its length as said (ranking.py, locality)."""
    (memory_id,) = await cold(manager, TEXT)
    assert (await manager.get(memory_id)).logged_chars is None  # its words are the turn's
    await compress(manager)
    memory = await manager.get(memory_id)
    assert len(memory.content) < len(TEXT) == memory.logged_chars == memory.said_chars
    rewritten = await manager.update(memory_id, "Pixel is a whippet.", expected_revision=2)
    assert (rewritten.logged_chars, rewritten.said_chars) == (None, len("Pixel is a whippet."))
    assert (await compress(manager))["lengths_kept"] == 0  # the agent's words are not a cut of the turn's


async def test_memories_cut_before_their_length_was_kept_get_it_from_the_log(manager: MemoryManager) -> None:
    """Stores cut before migration 0032 hold no logged length: the next run reads it from each turn in the log,
    once; a turn the log cannot give back is counted and its memory left as it was."""
    ids = await cold(manager, TEXT, TEXT + " Also.", TEXT + " Again.")
    assert (await compress(manager))["compressed"] == 3
    async with manager.records.transaction(projected=False) as db:
        await db.execute("UPDATE memories SET logged_chars = NULL")  # as a store cut before migration 0032
    turn = await manager.records.get_turn(str((await manager.get(ids[2])).source_turn_id))
    assert turn is not None
    segment = manager.config.data_dir / "logs" / segment_name(turn.position.segment)
    with segment.open("r+b") as fh:  # one byte of its words changed: the record fails its checksum
        fh.seek(turn.position.offset + turn.position.length - 40)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(b"x" if byte != b"x" else b"y")
    assert (await compress(manager, dry_run=True))["lengths_kept"] == 0  # a dry run writes nothing
    assert [(await manager.get(i)).logged_chars for i in ids] == [None] * 3
    counts = await compress(manager)
    assert (counts["lengths_kept"], counts["lengths_unreadable"], counts["compressed"]) == (2, 1, 0)
    lengths = [(await manager.get(i)).logged_chars for i in ids]
    assert lengths == [len(TEXT), len(TEXT + " Also."), None]
    again = await compress(manager)
    assert (again["lengths_kept"], again["lengths_unreadable"]) == (0, 1)


async def test_the_cut_memory_is_reindexed_and_found_by_its_key_words(manager: MemoryManager) -> None:
    (memory_id,) = await cold(manager, TEXT)
    assert [m for m, _ in await manager.records.keyword_search("default", ["ramble"], limit=5)] == [memory_id]
    await compress(manager)
    await manager.flush()
    assert await manager.records.keyword_search("default", ["ramble"], limit=5) == []  # a dropped word
    assert [m for m, _ in await manager.records.keyword_search("default", ["kibble"], limit=5)] == [memory_id]
    found = await manager.retrieve("greyhound Pixel kibble", k=3, now=LATER)
    assert found and found[0].memory.memory_id == memory_id
    memory = await manager.get(memory_id)
    stored = await manager.records._fetch("SELECT embedding FROM memories WHERE memory_id = ?", (memory_id,))
    vector = np.frombuffer(stored[0][0], dtype="<f4")
    expected = (await manager.embedder.embed([memory.content]))[0]
    assert float(vector @ expected) > 0.999  # re-embedded from the cut words
    (hit,) = await manager.vectors.search("text", expected.tolist(), limit=1)
    assert hit.memory_id == memory_id and hit.score > 0.999  # and projected
    assert "greyhound" in " ".join(memory.keywords) or "kibble" in " ".join(memory.keywords)
    assert (await manager.doctor()).consistent


async def test_compression_is_idempotent_and_a_dry_run_changes_nothing(manager: MemoryManager) -> None:
    (memory_id,) = await cold(manager, TEXT)
    dry = await compress(manager, dry_run=True)
    assert dry["compressed"] == 1 and dry["dry_run"] is True
    memory = await manager.get(memory_id)
    assert (memory.revision, memory.content) == (1, TEXT) and await manager.history(memory_id) == []
    assert (await compress(manager))["compressed"] == 1
    cut = (await manager.get(memory_id)).content
    again = await compress(manager)
    assert again["compressed"] == 0 and again["read"] == 0  # a compressed memory is not read again
    assert (await compress(manager, cap=30))["compressed"] == 0  # not even with a smaller cap
    memory = await manager.get(memory_id)
    assert (memory.revision, memory.content) == (2, cut)


async def test_what_compression_leaves_alone(manager: MemoryManager) -> None:
    forgotten, superseded, updated, short = await cold(manager, TEXT, TEXT + " Also.", TEXT + " Again.", SHORT)
    await manager.forget(forgotten, expected_revision=1)
    await manager.supersede(superseded, "Pixel moved in with Ines.", expected_revision=1)
    await manager.update(updated, TEXT.replace("Pixel", "Pixie"), expected_revision=1)  # no longer the log's words
    recent = (await manager.process_turn("s2", 0, TEXT, at=LATER - timedelta(days=1))).memory_id
    assert recent is not None
    counts = await compress(manager)
    assert counts["compressed"] == 0
    for memory_id, revision in ((forgotten, 2), (superseded, 2), (updated, 2), (short, 1), (recent, 1)):
        assert (await manager.get(memory_id)).revision == revision
    assert (await manager.restore(forgotten)).status is MemoryStatus.ACTIVE  # restored: it may be cut later
    assert (await compress(manager))["compressed"] == 1


async def test_as_of_before_the_cut_still_shows_words(config: Config, embedder: Embedder) -> None:
    """The revision before a cut keeps no words; as of a time before it, the memory shows the words it has."""
    async with MemoryManager.open(config, embedder=embedder, clock=lambda: SAID) as manager:  # stored at SAID
        (memory_id,) = await cold(manager, TEXT)
        await compress(manager)
        found = await manager.retrieve("greyhound Pixel kibble", k=3, now=LATER, as_of=SAID + timedelta(days=1))
        (hit,) = [r for r in found if r.memory.memory_id == memory_id]
        assert SALIENT[0] in hit.memory.content and FILLER[1] not in hit.memory.content


async def test_the_sleep_cycle_compresses_by_the_configured_cap(config: Config, embedder: Embedder) -> None:
    assert SLEEP_CYCLE.index("tier") < SLEEP_CYCLE.index("compress") < SLEEP_CYCLE.index("compact")
    sleep = config.sleep.model_copy(update={"compress_tokens": CAP})
    async with MemoryManager.open(config.model_copy(update={"sleep": sleep}), embedder=embedder) as manager:
        (memory_id,) = await cold(manager, TEXT)
        runs = {run.job: run for run in await run_cycle(manager, now=LATER)}
        assert runs["compress"].counts["compressed"] == 1 and runs["compress"].counts["cap"] == CAP
        assert count((await manager.get(memory_id)).content) <= CAP
    sleep = config.sleep.model_copy(update={"compress_tokens": 0})
    async with MemoryManager.open(config.model_copy(update={"sleep": sleep}), embedder=embedder) as manager:
        assert (await run_job(manager, "compress", now=LATER)).counts["compressed"] == 0  # 0: off


async def test_a_run_stops_at_its_budget_and_the_next_goes_on(config: Config, embedder: Embedder) -> None:
    sleep = config.sleep.model_copy(update={"compress_budget": timedelta(0)})  # one chunk a run
    async with MemoryManager.open(config.model_copy(update={"sleep": sleep}), embedder=embedder) as manager:
        turns = [TurnInput("s1", n, f"{TEXT} That was on day {n}.", at=SAID) for n in range(EMBED_CHUNK + 6)]
        await manager.process_turns(turns)
        await manager.flush()
        for job in ("decay", "tier"):
            await run_job(manager, job, now=LATER)
        first = await compress(manager)
        assert (first["compressed"], first["deferred"]) == (EMBED_CHUNK, True)
        second = await compress(manager)
        assert (second["compressed"], second["deferred"]) == (6, False)
        assert (await compress(manager))["compressed"] == 0


async def test_compression_through_http(manager: MemoryManager) -> None:
    (memory_id,) = await cold(manager, TEXT)
    token = load_or_create_token(manager.config.data_dir)
    transport = httpx.ASGITransport(app=create_app(manager, token=token))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
        body = {"now": LATER.isoformat(), "cap": CAP, "namespace": "default"}
        dry = await c.post("/v1/jobs/compress", json=body | {"dry_run": True})
        assert dry.status_code == 200 and dry.json()["counts"]["compressed"] == 1
        assert (await c.get(f"/v1/memories/{memory_id}")).json()["revision"] == 1
        done = await c.post("/v1/jobs/compress", json=body)
        assert done.status_code == 200 and done.json()["counts"]["compressed"] == 1
        shown = (await c.get(f"/v1/memories/{memory_id}", params={"original": True})).json()
        assert shown["revision"] == 2 and shown["original"] == TEXT and FILLER[1] not in shown["content"]
        assert (await c.get(f"/v1/memories/{memory_id}")).json()["original"] is None
        bad = await c.post("/v1/jobs/compress", json={"cap": 0})
        assert bad.status_code == 422


def test_compression_on_the_command_line(config: Config, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--data-dir", str(config.data_dir)]
    turns = config.data_dir.parent / "turns.jsonl"
    line = {"session_id": "s1", "turn_number": 0, "content": TEXT, "role": "user", "at": SAID.isoformat()}
    turns.write_text(json.dumps(line) + "\n", encoding="utf-8")
    keep = config.data_dir.parent / "keep.toml"
    keep.write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    assert main([*store, "--config", str(keep), "ingest", str(turns)]) == 0
    for job in ("decay", "tier"):
        assert main([*store, job, "--now", LATER.isoformat()]) == 0
    capsys.readouterr()
    now = ["--now", LATER.isoformat(), "--cap", str(CAP)]
    assert main([*store, "compress", *now, "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["compressed"] == 1
    assert main([*store, "compress", *now, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["compressed"] == 1
    assert main([*store, "search", "greyhound kibble", "--json"]) == 0
    memory_id = json.loads(capsys.readouterr().out)[0]["memory_id"]
    assert main([*store, "get", memory_id, "--original", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["original"] == TEXT and shown["revision"] == 2 and FILLER[1] not in shown["content"]
    assert main([*store, "history", memory_id]) == 0
    assert "ended by update by sleep (compress): (its turn as logged: get --original)" in capsys.readouterr().out
    assert main([*store, "compress", "--cap", "0"]) == 2


def test_the_bm25_probe_ranks_and_cuts() -> None:
    from agent_memory.bench.compress_probe import bm25_order, cutters, probe

    docs = ["We talked about ferries.", "The greyhound Pixel eats kibble.", "Nothing much."]
    assert bm25_order(docs, "what does Pixel the greyhound eat?")[0] == 1
    entry = {
        "question": "What does my greyhound eat?",
        "answer": "300 grams of kibble",
        "answer_session_ids": ["a"],
        "haystack_session_ids": ["a", "b"],
        "haystack_sessions": [
            [{"role": "user", "content": TEXT, "has_answer": True}],
            [{"role": "assistant", "content": " ".join(FILLER) * 3}],
        ],
    }
    whole = probe([entry], lambda t: t, budget=2048)
    cut = probe([entry], cutters(CAP)["salient"], budget=2048)
    assert whole["recall"] == cut["recall"] == 1.0 and cut["kept"] < 0.5 < whole["kept"] == 1.0
    assert (cut["answers"], cut["answers_kept"]) == (1, 1)
