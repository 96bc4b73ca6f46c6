"""The vector upgrade (vector_upgrade.py): what the int8 document model stored is made again by the float32 model,
in place, as the float32 write path would have made it, while no one writes; a memory changed meanwhile keeps its
change; `agent-memory ingest` stores int8 vectors for the upgrade to replace. Real MiniLM (both precisions),
SQLite and Qdrant Edge in temporary directories."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from agent_memory.bench.filling import ingest
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.cli_ingest import Tally, _ingest_batch, prepared_ahead
from agent_memory.interfaces.routing import LocalStore
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.reembed import embed_as_written
from agent_memory.scoring import with_previous
from agent_memory.storage.outbox import TEXT

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2023, 5, 8, 12, tzinfo=UTC)
FLOAT32, INT8 = "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8"
TURNS = [  # short turns, each but a session's first embedded with the one before it; then a long one, in chunks
    ("s1", "Priya: I started learning the cello last month. How is work?"),
    ("s1", "Tom: Work is fine, busy with the move to the new office."),
    ("s1", "Priya: It is bright orange, the new cello case."),
    ("s2", "Tom: I am looking at flats near the river now."),
    ("s2", "Priya: The dog and I went running on the beach."),
    ("s2", " ".join(f"Line {n} of the deploy log: step {n} took {n * 7} ms on host build-{n % 5}." for n in range(60))),
]


def store_config(data_dir: Path, **embedding: str) -> Config:
    environ = {f"AGENT_MEMORY__EMBEDDING__{key.upper()}": value for key, value in embedding.items()}
    environ |= {"AGENT_MEMORY__SAVE__KEEP_ALL": "true", "AGENT_MEMORY__MAX_CONTENT_BYTES": "2048"}
    return load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(data_dir))


def turns() -> list[TurnInput]:
    return [TurnInput(session, n, text, at=T0) for n, (session, text) in enumerate(TURNS)]


async def stored(manager: MemoryManager) -> dict[str, tuple[np.ndarray, str, int, str]]:
    """content -> (text vector, model, revision, memory id) of every memory with one."""
    rows = await manager.records._fetch(
        "SELECT content, embedding, embedding_model, revision, memory_id FROM memories WHERE length(embedding) > 0"
    )
    return {r[0]: (np.frombuffer(r[1], dtype=np.float32).copy(), r[2], r[3], r[4]) for r in rows}


async def made_int8(data_dir: Path) -> dict[str, tuple[np.ndarray, str, int, str]]:
    """A store whose vectors the int8 document model made, as an int8 import leaves it."""
    config = store_config(data_dir, document_precision="int8")
    quick = make_embedder(config)
    try:
        async with MemoryManager.open(config, embedder=quick) as manager:
            await manager.process_turns(turns())
            await manager.notes.write(
                "Decision: the export job keeps its state in SQLite, one writer.", kind="decision"
            )
            return await stored(manager)
    finally:
        await quick.aclose()


@pytest.fixture
async def float32_made(tmp_path: Path, embedder: Embedder) -> dict[str, tuple[np.ndarray, str, int, str]]:
    """The same memories as the float32 write path makes them from the start."""
    async with MemoryManager.open(store_config(tmp_path / "direct"), embedder=embedder) as manager:
        await manager.process_turns(turns())
        await manager.notes.write("Decision: the export job keeps its state in SQLite, one writer.", kind="decision")
        return await stored(manager)


async def nearest(manager: MemoryManager, vector: np.ndarray) -> tuple[str, float]:
    await manager.flush()
    hit = (await manager.vectors.search(TEXT, vector.tolist(), limit=1))[0]
    return str(hit.memory_id), float(hit.score)


async def test_an_int8_store_is_made_again_as_the_float32_write_path_makes_it(
    tmp_path: Path,
    embedder: Embedder,
    float32_made: dict[str, tuple[np.ndarray, str, int, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = await made_int8(tmp_path / "store")
    assert {model for _, model, _, _ in before.values()} == {INT8}
    assert len(before) == len(float32_made) > len(TURNS)  # the long turn's chunks, and the note
    quiet = store_config(tmp_path / "store", upgrade_delay="PT1H")  # the background task never takes a batch
    with caplog.at_level(logging.INFO, logger="agent_memory.engines"):
        async with MemoryManager.open(quiet, embedder=embedder):
            pass
    said = [r.getMessage() for r in caplog.records if r.name == "agent_memory.engines"]
    assert len(said) == 1 and INT8 in said[0] and "made again with it while" in said[0], said
    async with MemoryManager.open(quiet, embedder=embedder) as manager:
        upgrade = manager.vector_upgrade
        assert upgrade.stale == INT8 and await upgrade.left() == len(before)
        content = TURNS[2][1]
        target, was = float32_made[content][0], before[content]
        memory_id, score = await nearest(manager, target)
        assert memory_id == was[3] and score == pytest.approx(float(target @ was[0]), abs=1e-5)
        assert float(target @ was[0]) < 0.9999  # int8's vector, not float32's

        assert (await manager.stats())["vectors_to_upgrade"] == len(before)
        totals: list[int] = []
        assert await upgrade.catch_up(totals.append) == len(before)
        assert await upgrade.left() == 0 and totals[-1] == len(before)
        assert (await manager.stats())["vectors_to_upgrade"] == 0
        after = await stored(manager)
        memory_id, score = await nearest(manager, target)  # Qdrant holds the new vector too
        assert memory_id == was[3] and score > 0.9999
    for text, (vector, model, revision, memory_id) in after.items():
        assert model == FLOAT32 and (revision, memory_id) == before[text][2:]  # nothing but the vector changed
        assert np.allclose(vector, float32_made[text][0], atol=1e-5), text
        assert not np.allclose(vector, before[text][0], atol=1e-4), text


async def test_a_bulk_import_stores_what_the_int8_document_model_stores(tmp_path: Path, embedder: Embedder) -> None:
    """`process_turns(..., bulk=True)` embeds with the int8 document pass of the shipped model: the vectors of a
    store made with `document_precision = "int8"`, named alike; a turn without `bulk` is float32's."""
    int8_made = await made_int8(tmp_path / "int8")
    async with MemoryManager.open(store_config(tmp_path / "store", upgrade_delay="PT1H"), embedder=embedder) as m:
        await m.process_turns(turns(), bulk=True)
        await m.process_turns([TurnInput("s3", 0, "Tom: The ferry to Vigo leaves at seven.", at=T0)])
        imported = await stored(m)
    for text, (vector, model, _, _) in imported.items():
        if text.startswith("Tom: The ferry"):
            assert model == FLOAT32
        elif text in dict(TURNS).values():  # the long turn's chunks are embedded by the chunker, in float32
            assert model == INT8 and np.allclose(vector, int8_made[text][0], atol=1e-6), text


SAID = [  # a phatic turn is not kept, and the one after it is embedded with it; a turn after a long one stands alone
    ("s1", "Priya: I started learning the cello last month."),
    ("s1", "Thanks!"),
    ("s1", "It is bright orange, the new cello case."),
    ("s1", "Tom: " + "The movers said the piano goes first, then the boxes of sheet music. " * 10),
    ("s1", "Priya: Is it heavy to carry?"),
    ("s1", "Tom: Not very."),
]


async def test_a_turns_vector_is_the_same_however_the_turns_were_batched_and_as_the_upgrade_makes_it(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A short turn is summed with the turn logged just before it in its session, kept or not: one batch, one turn a
    call and an int8 import upgraded to float32 give the same vectors (reembed's rule, `embed_as_written`)."""
    said = [TurnInput(session, n, text, at=T0) for n, (session, text) in enumerate(SAID)]
    async with MemoryManager.open(store_config(tmp_path / "one"), embedder=embedder) as manager:
        await manager.process_turns(said)
        batched = await stored(manager)
    async with MemoryManager.open(store_config(tmp_path / "each"), embedder=embedder) as manager:
        for turn in said:
            await manager.process_turns([turn])
        alone = await stored(manager)
    quick = make_embedder(store_config(tmp_path / "int8", document_precision="int8"))
    try:
        async with MemoryManager.open(store_config(tmp_path / "int8", document_precision="int8"), embedder=quick) as m:
            await m.process_turns(said[:3], bulk=True)
            await m.process_turns(said[3:], bulk=True)
    finally:
        await quick.aclose()
    async with MemoryManager.open(store_config(tmp_path / "int8", upgrade_delay="PT1H"), embedder=embedder) as manager:
        assert await manager.vector_upgrade.catch_up() == len(SAID) - 1
        upgraded = await stored(manager)
    assert len(batched) == len(SAID) - 1 and "Thanks!" not in batched  # the phatic turn is no memory
    for text, (vector, *_) in batched.items():
        assert np.allclose(vector, alone[text][0], atol=1e-5) and np.allclose(vector, upgraded[text][0], atol=1e-5)
    own = await embedder.embed([text for _, text in SAID])
    weight = store_config(tmp_path / "one").embedding.previous_weight
    assert np.allclose(batched[SAID[2][1]][0], with_previous(own[2], own[1], weight), atol=1e-5)  # with "Thanks!"
    assert np.allclose(batched[SAID[4][1]][0], own[4], atol=1e-5)  # after a long turn: alone
    assert np.allclose(batched[SAID[5][1]][0], with_previous(own[5], own[4], weight), atol=1e-5)


class Counting:
    """A real embedder passed through, counting the texts it embeds; `importer()` counts the import's model too."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.texts = inner, 0
        self.imports: Counting | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def importer(self) -> Counting:
        self.imports = Counting(self.inner.importer())  # type: ignore[attr-defined]
        return self.imports

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return await self.inner.embed(texts)


@contextlib.asynccontextmanager
async def counted_store(data_dir: Path, embedder: Embedder) -> AsyncIterator[tuple[MemoryManager, Counting, Counting]]:
    """A store opened with `embedder` counted: (manager, the write path's model, the import's model)."""
    counting = Counting(embedder)
    config = store_config(data_dir, upgrade_delay="PT1H")
    async with MemoryManager.open(config, embedder=counting) as m:
        assert counting.imports is not None
        yield m, counting, counting.imports


async def test_an_imports_next_batch_prepared_ahead_is_taken_by_its_bulk_turns_only(
    tmp_path: Path, embedder: Embedder
) -> None:
    """`prepare_turns(..., bulk=True)` (ingest, while the batch before commits) embeds by the import's int8 model: a
    bulk turn takes that vector and embeds nothing, a live turn with the same words never takes an int8 vector; a
    phatic text is not prepared, as its turn is not embedded."""
    int8_made = await made_int8(tmp_path / "int8")
    async with counted_store(tmp_path / "store", embedder) as (m, counting, importer):
        texts = [text for _, text in TURNS[:5]]
        await m.prepare_turns([*texts, "ok thanks"], bulk=True)
        assert importer.texts == 5 and counting.texts == 0
        await m.process_turns(turns()[:5], bulk=True)
        assert importer.texts == 5  # every vector was ready
        await m.process_turns([TurnInput("s9", 0, TURNS[0][1], at=T0)])  # the same words, live: float32's own
        assert counting.texts == 1
        await m.prepare_turns([TURNS[3][1]], bulk=True)  # prepared for an import, sent live: embedded again
        await m.process_turns([TurnInput("s8", 0, TURNS[3][1], at=T0)])
        assert counting.texts == 2
        made = await m.records._fetch("SELECT content, embedding, embedding_model, session_id FROM memories")
    for content, blob, model, session in made:
        vector = np.frombuffer(blob, dtype=np.float32)
        if session in ("s9", "s8"):
            assert model == FLOAT32 and not np.allclose(vector, int8_made[content][0], atol=1e-4)
        else:
            assert model == INT8 and np.allclose(vector, int8_made[content][0], atol=1e-6), content


async def test_the_bench_harness_embeds_each_batch_ahead_by_the_live_model(
    tmp_path: Path, embedder: Embedder, float32_made: dict[str, tuple[np.ndarray, str, int, str]]
) -> None:
    """`agent-memory bench` ingests (filling.ingest) as an import sends its turns, in batches that run across
    sessions with the next batch embedded while one commits, but by the model of live turns: every vector is the
    float32 write path's, each text embedded once (a batch prepared by the wrong model would be embedded again),
    the import's model never used. It says how far it is as `agent-memory ingest` does."""
    async with counted_store(tmp_path / "store", embedder) as (m, counting, importer):
        lines: list[str] = []
        count, _ = await ingest(m, turns(), batch=4, long_turns=(chunked := []), progress=lines.append, total=6)
        made = await stored(m)
    async with counted_store(tmp_path / "one-batch", embedder) as (plain, once, _):
        await plain.process_turns(turns())
    assert count == len(TURNS) and len(chunked) == 1 and chunked[0] > 1  # batches of 4: s1's three, then s2's start
    assert lines[0].startswith("ingest: 4/6 turns (67%), ") and lines[-1].startswith("ingest: 6/6 turns (100%), ")
    assert importer.texts == 0 and counting.texts == once.texts
    without_note = {content: row for content, row in float32_made.items() if not content.startswith("Decision:")}
    assert made.keys() == without_note.keys()
    for content, (vector, model, _, _) in made.items():
        assert model == FLOAT32 and np.allclose(vector, without_note[content][0], atol=1e-5), content


async def test_ingest_embeds_each_batch_ahead_by_the_imports_model_unless_it_passes_over_stored_turns(
    tmp_path: Path, embedder: Embedder
) -> None:
    """`prepared_ahead` (agent-memory ingest, bench_ingest): a batch is handed over once its texts are embedded
    and the next batch's are on their way, so its turns embed nothing; while a resumed import passes over stored
    turns (`Tally.skipping`), nothing is embedded ahead."""
    batches = [turns()[:3], turns()[3:5]]  # the five short turns, a session a batch
    async with counted_store(tmp_path / "store", embedder) as (m, _, importer):
        embedded_when_handed = []
        async with contextlib.aclosing(prepared_ahead(m, iter(batches))) as ready:
            async for batch in ready:
                embedded_when_handed.append(importer.texts)
                await m.process_turns(batch, bulk=True)
        assert embedded_when_handed == [3, 5] and importer.texts == 5  # each text once, ahead of its batch
        tally, store = Tally(), LocalStore(m)
        await _ingest_batch(store, batches[0], tally, resume=True)  # stored: a resumed import passes over it
        assert tally.skipping and tally.skipped == 3
        later = [TurnInput("s7", n, f"Tom: Day {n} of the trip, we reached Porto.", at=T0) for n in range(3)]
        async with contextlib.aclosing(prepared_ahead(m, iter([later]), wanted=lambda: not tally.skipping)) as ready:
            async for batch in ready:
                assert importer.texts == 5  # not embedded ahead: it might have been stored too
                await _ingest_batch(store, batch, tally, resume=True)
        assert not tally.skipping and tally.written == 3 and importer.texts == 8


async def test_an_import_sums_a_turn_with_its_predecessor_from_the_batch_before_without_embedding_it_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A session that goes on across an import's batches: its next short turn is summed with the int8 vector the
    batch before made (kept by model, apart from the live turns'), not with one the model makes again, and gets the
    vector an int8 store makes; a live turn in that session is summed with a float32 vector, never the import's."""
    int8_made = await made_int8(tmp_path / "int8")
    async with counted_store(tmp_path / "store", embedder) as (m, counting, importer):
        for batch in (turns()[:1], turns()[1:2], turns()[2:3]):  # s1, one turn a batch
            await m.process_turns(batch, bulk=True)
        assert importer.texts == 3 and counting.texts == 0
        live = await m.process_turns([TurnInput("s1", 9, "Tom: Lovely, send me a photo of it.", at=T0)])
        assert counting.texts == 2  # its own words, and its predecessor's again in float32
        made = await stored(m)
    for text, (vector, model, _, _) in made.items():
        if model == INT8:
            assert np.allclose(vector, int8_made[text][0], atol=1e-6), text
    assert live[0].saved and made["Tom: Lovely, send me a photo of it."][1] == FLOAT32


async def test_the_background_task_upgrades_while_no_one_writes(tmp_path: Path, embedder: Embedder) -> None:
    before = await made_int8(tmp_path / "store")
    eager = store_config(tmp_path / "store", upgrade_delay="PT0.2S", upgrade_batch="2")
    async with MemoryManager.open(eager, embedder=embedder) as manager:
        deadline = time.monotonic() + 60
        while await manager.vector_upgrade.left() and time.monotonic() < deadline:  # noqa: ASYNC110 (SQLite state)
            await asyncio.sleep(0.2)
        assert await manager.vector_upgrade.left() == 0
        assert manager.vector_upgrade.upgraded == len(before)
        found = await manager.retrieve("what colour is the cello case?", k=1)
        assert found[0].memory.content == TURNS[2][1]


async def test_questions_pause_the_background_task(tmp_path: Path, embedder: Embedder) -> None:
    """A question waits on the model thread behind a batch, so the upgrade starts only when no one asks either."""
    before = await made_int8(tmp_path / "store")
    eager = store_config(tmp_path / "store", upgrade_delay="PT0.5S", upgrade_batch="1")
    async with MemoryManager.open(eager, embedder=embedder) as manager:
        asked_until = time.monotonic() + 2.0
        while time.monotonic() < asked_until:  # a question every 50 ms: never 0.5 s without one
            await manager.retrieve("who went running on the beach?", k=1)
            await asyncio.sleep(0.05)
        assert manager.vector_upgrade.upgraded == 0 and await manager.vector_upgrade.left() == len(before)
        deadline = time.monotonic() + 60
        while await manager.vector_upgrade.left() and time.monotonic() < deadline:  # noqa: ASYNC110 (SQLite state)
            await asyncio.sleep(0.2)
        assert manager.vector_upgrade.upgraded == len(before)


async def test_a_vector_changed_while_the_new_one_was_made_keeps_the_change(tmp_path: Path, embedder: Embedder) -> None:
    before = await made_int8(tmp_path / "store")
    memory_id = before[TURNS[3][1]][3]
    quiet = store_config(tmp_path / "store", upgrade_delay="PT1H")
    async with MemoryManager.open(quiet, embedder=embedder) as manager:
        found = await manager.records.vectors_made_by(INT8, 100)
        assert len(found) == len(before)
        await manager.update(memory_id, "Tom: I bought a flat near the river.", expected_revision=1)
        rows = [(source.memory_id, read, np.ones(384, dtype="<f4").tobytes()) for source, read in found]
        replaced = await manager.records.replace_vectors(rows, model=FLOAT32, now=T0)
        assert replaced == len(before) - 1  # every one but the memory revised meanwhile
        revised = (await stored(manager))["Tom: I bought a flat near the river."]
        expected = (await embedder.embed(["Tom: I bought a flat near the river."]))[0]
        assert revised[1] == FLOAT32 and revised[2] == 2
        assert float(revised[0] @ expected) > 0.99  # the update's own vector, not the stale batch's


async def test_a_vector_an_erase_made_again_is_not_overwritten_from_before_the_erase(
    tmp_path: Path, embedder: Embedder
) -> None:
    """The turn after an erased one was embedded with it; the erase makes that vector again without it. A new vector
    made from the store as it was before the erase must not bring the erased words back."""
    before = await made_int8(tmp_path / "store")
    erased, follower = before[TURNS[0][1]][3], before[TURNS[1][1]][3]
    quiet = store_config(tmp_path / "store", upgrade_delay="PT1H")
    async with MemoryManager.open(quiet, embedder=embedder) as manager:
        found = await manager.records.vectors_made_by(INT8, 100)
        made = await embed_as_written(
            [source for source, _ in found], journal=manager.journal, embed=embedder.embed, settings=quiet.embedding
        )
        await manager.erase(reason="test", memory_ids=[erased])
        rows = [(s.memory_id, read, v.astype("<f4").tobytes()) for (s, read), v in zip(found, made, strict=True)]
        replaced = await manager.records.replace_vectors(rows, model=FLOAT32, now=T0)
        assert replaced == len(found) - 2  # not the erased memory, nor the one its erase embedded again
        left = (await stored(manager))[TURNS[1][1]]
        assert left[3] == follower and left[1] == INT8  # the erase's vector, still to be upgraded
        stale = {s.memory_id: v for (s, _), v in zip(found, made, strict=True)}[follower]
        assert not np.allclose(left[0], stale, atol=1e-4)  # not the one made with the erased turn's words
        assert await manager.vector_upgrade.catch_up() == 1
        upgraded = (await stored(manager))[TURNS[1][1]]
        alone = (await embedder.embed([TURNS[1][1]]))[0]  # the session's first turn now: embedded alone
        assert upgraded[1] == FLOAT32 and np.allclose(upgraded[0], alone, atol=1e-5)


async def test_disabled_or_storing_int8_the_upgrade_leaves_the_vectors(tmp_path: Path, embedder: Embedder) -> None:
    before = await made_int8(tmp_path / "store")
    async with MemoryManager.open(store_config(tmp_path / "store", upgrade_vectors="false"), embedder=embedder) as m:
        assert m.vector_upgrade.stale is None
        assert await m.vector_upgrade.catch_up() == 0 and await m.vector_upgrade.left() == 0
        assert {model for _, model, _, _ in (await stored(m)).values()} == {INT8}
    assert len(before) > 0


def test_ingest_stores_int8_vectors_and_the_upgrade_job_makes_them_float32(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text(
        "\n".join(
            f'{{"session_id": "{session}", "turn_number": {n}, "content": "{text}"}}'
            for n, (session, text) in enumerate(TURNS[:5])
        )
        + "\n",
        encoding="utf-8",
    )
    data_dir = tmp_path / "store"
    code = main(["--data-dir", str(data_dir), "ingest", str(history)])
    out = capsys.readouterr().out
    assert code == 0 and "ingested 5 turns" in out and "embedded by the int8 model, made again in float32" in out, out

    async def models() -> set[str]:
        config = store_config(data_dir, upgrade_delay="PT1H")
        async with MemoryManager.open(config) as manager:
            return {model for _, model, _, _ in (await stored(manager)).values()}

    assert asyncio.run(models()) == {INT8}
    assert main(["--data-dir", str(data_dir), "upgrade", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    kept = int(re.search(r"ingested 5 turns, (\d+) kept as memories", out).group(1))  # type: ignore[union-attr]
    assert counts == {"upgraded": kept, "left": 0} and kept > 0
    assert asyncio.run(models()) == {FLOAT32}
