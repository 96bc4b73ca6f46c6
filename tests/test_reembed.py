"""Re-embedding a store with another text model in place (reembed.py, `agent-memory reembed`): every vector a
model made is made again as the write path would make it with the new model, nothing else changes, an interrupted
run resumes, a memory changed between two runs is embedded again, and a store with a running owner is refused.

The new model is a real one of another size (`model_folder`: MiniLM with a seeded 384 -> 128 projection, run by
sentence-transformers); the store is made by the shipped MiniLM."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.errors import ConfigError, StoreLocked
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.cli_reembed import reembed_store
from agent_memory.manager import MemoryManager
from agent_memory.models import MemoryStatus, TurnInput
from agent_memory.sleep.jobs import run_job

ROOT = Path(__file__).resolve().parents[1]
LOCAL_MODEL_SIZE = 128  # conftest's model_folder
T0 = datetime(2023, 5, 8, 12, tzinfo=UTC)
LATER = T0 + timedelta(days=90)
CONVERSATION = [  # short turns of three sessions: each but a session's first is embedded with the one before it
    ("s1", "Priya: I started learning the cello last month. How is work?"),
    ("s1", "Tom: Work is fine, busy with the move to the new office."),
    ("s2", "Priya: We hiked up to the old lighthouse on Sunday!"),
    ("s2", "Tom: I am looking at flats near the river now."),
    ("s3", "Priya: I played my first cello piece at the recital, I love the cello."),
    ("s3", "Priya: The dog and I went running on the beach."),
]
NOTE = "Decision: the export job keeps its state in SQLite, one writer, batches of 200."
LONG = " ".join(
    f"Line {n} of the deploy log: step {n} finished in {n * 7} ms on host build-{n % 5}." for n in range(90)
)


def store_config(data_dir: Path, **embedding: str) -> Config:
    environ = {f"AGENT_MEMORY__EMBEDDING__{key.upper()}": value for key, value in embedding.items()}
    environ |= {"AGENT_MEMORY__SAVE__KEEP_ALL": "true", "AGENT_MEMORY__MAX_CONTENT_BYTES": "2048"}
    return load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(data_dir))


@pytest.fixture
def shipped(tmp_path: Path) -> Config:
    return store_config(tmp_path / "store")


@pytest.fixture
def local(tmp_path: Path, model_folder: Path) -> Config:
    """The same store, configured for the other model."""
    return store_config(
        tmp_path / "store", backend="torch", model_path=str(model_folder), dimension=str(LOCAL_MODEL_SIZE)
    )


@pytest.fixture
async def other(local: Config) -> AsyncIterator[Embedder]:
    embedder = make_embedder(local)
    await embedder.load()
    yield embedder
    await embedder.aclose()


async def fill(manager: MemoryManager) -> dict[str, str]:
    """A conversation, a note, a long turn (chunks), a digest topic, an open gap, an update and a forget; returns
    their ids by name."""
    turns = [TurnInput(s, n, text, at=T0 + timedelta(days=10 * int(s[1:]))) for n, (s, text) in enumerate(CONVERSATION)]
    ids = {f"turn{n}": r.memory_id or "" for n, r in enumerate(await manager.process_turns(turns))}
    ids["note"] = (await manager.notes.write(NOTE, kind="decision")).memory.memory_id
    long = await manager.process_turn("logs", 0, LONG, at=T0)
    ids |= {f"chunk{n}": chunk for n, chunk in enumerate(long.chunk_memory_ids)}
    assert (await run_job(manager, "digest", now=LATER)).status == "ok"
    await manager.retrieve("which submarine did the admiral command?")  # nothing like it: a gap opens
    updated = await manager.update(
        ids["turn3"], "Tom: I am looking at flats near the river in Lisbon now.", expected_revision=1
    )
    ids["updated"] = updated.memory_id
    await manager.forget(ids["turn5"], expected_revision=1)
    await manager.settle()
    return ids


async def vectors(manager: MemoryManager) -> dict[str, tuple[np.ndarray, str, int, str]]:
    """memory id -> (text vector, model, revision, status) of every memory with one."""
    rows = await manager.records._fetch(
        "SELECT memory_id, embedding, embedding_model, revision, status FROM memories WHERE length(embedding) > 0"
    )
    return {r[0]: (np.frombuffer(r[1], dtype=np.float32), r[2], r[3], r[4]) for r in rows}


async def test_a_store_moves_to_another_model_with_every_vector_made_as_the_write_path_makes_it(
    shipped: Config, local: Config, embedder: Embedder, other: Embedder, tmp_path: Path
) -> None:
    async with MemoryManager.open(shipped, embedder=embedder) as manager:
        ids = await fill(manager)
        before = await vectors(manager)
        gaps_before = len(await manager.open_gaps())
        topics = await manager.records._fetch("SELECT count(*) FROM digest_topics")
    assert gaps_before == 1 and topics[0][0] >= 1 and len(ids) > 10

    report = await reembed_store(local, say=lambda line: None, embedder=other)

    assert report["done"] and report["memories"] == len(before) and report["was"] == 384
    assert report["gaps"] == 1 and report["topics"] == topics[0][0] and report["indexed"] == len(before)
    async with MemoryManager.open(local, embedder=other) as manager:
        after = await vectors(manager)
        assert set(after) == set(before)  # nothing came or went: only vectors changed
        for memory_id, (vector, model, revision, status) in after.items():
            assert vector.shape == (LOCAL_MODEL_SIZE,) and model == "minilm-128"
            assert (revision, status) == before[memory_id][2:]
        assert after[ids["turn5"]][3] == MemoryStatus.FORGOTTEN.value  # a forgotten memory stays forgotten
        gap = await manager.records._fetch("SELECT vector FROM retrieval_gaps")
        assert len(gap[0][0]) == LOCAL_MODEL_SIZE * 4
        total = await manager.records._fetch("SELECT total FROM digest_topics LIMIT 1")
        assert len(total[0][0]) == LOCAL_MODEL_SIZE * 8  # float64
        found = await manager.retrieve("how does the export job keep its state?", k=3)
        assert found[0].memory.memory_id == ids["note"]
        assert (await manager.doctor()).consistent  # SQLite, the rebuilt vector store and the graph agree

    # The same turns written by the new model from the start give the same vectors (to float32 precision).
    async with MemoryManager.open(store_config(tmp_path / "fresh", **_local(local)), embedder=other) as fresh:
        again = await fill(fresh)
        direct = await vectors(fresh)
    for name in ("turn0", "turn1", "turn2", "turn4", "note", "chunk0", "chunk3", "updated"):
        assert np.allclose(after[ids[name]][0], direct[again[name]][0], atol=1e-5), name


def _local(config: Config) -> dict[str, str]:
    e = config.embedding
    return {"backend": e.backend, "model_path": e.model_path, "dimension": str(e.dimension)}


async def test_a_store_made_with_int8_documents_is_made_again_in_float32(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """int8 was the document default until 2026-12-05: such a store opens without a warning (one model at two
    precisions), says so once, and `reembed` with the default makes every vector again through the float32 model."""
    made_int8 = store_config(tmp_path / "store", document_precision="int8")
    quick = make_embedder(made_int8)
    try:
        async with MemoryManager.open(made_int8, embedder=quick) as manager:
            turns = [TurnInput("s", n, text, at=T0) for n, (_, text) in enumerate(CONVERSATION)]
            ids = [r.memory_id or "" for r in await manager.process_turns(turns)]
            before = await vectors(manager)
    finally:
        await quick.aclose()
    assert {model for _, model, _, _ in before.values()} == {"all-MiniLM-L6-v2-int8"}
    shipped = store_config(tmp_path / "store")
    with caplog.at_level(logging.INFO, logger="agent_memory.engines"):
        async with MemoryManager.open(shipped, embedder=embedder):
            pass
    said = [r for r in caplog.records if r.name == "agent_memory.engines"]
    assert [r.levelno for r in said] == [logging.INFO] and "all-MiniLM-L6-v2-int8" in said[0].getMessage()
    report = await reembed_store(shipped, say=lambda line: None, embedder=embedder)
    assert report["done"] and report["memories"] == len(ids)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="agent_memory.engines"):
        async with MemoryManager.open(shipped, embedder=embedder) as manager:
            after = await vectors(manager)
    assert not [r for r in caplog.records if r.name == "agent_memory.engines"]  # one precision now
    assert {model for _, model, _, _ in after.values()} == {"all-MiniLM-L6-v2"}
    async with MemoryManager.open(shipped, embedder=embedder) as manager:
        found = await manager.retrieve("who is learning the cello?", k=1)
        assert found[0].memory.memory_id == ids[0]
    async with MemoryManager.open(store_config(tmp_path / "fresh"), embedder=embedder) as fresh:
        again = [r.memory_id or "" for r in await fresh.process_turns(turns)]
        direct = await vectors(fresh)
    for old, new in zip(ids, again, strict=True):  # as the float32 write path makes them from the start
        assert np.allclose(after[old][0], direct[new][0], atol=1e-5)
        assert not np.allclose(before[old][0], direct[new][0], atol=1e-4)  # they were another precision's


async def test_an_interrupted_run_resumes_and_embeds_again_what_changed_meanwhile(
    shipped: Config, local: Config, embedder: Embedder, other: Embedder
) -> None:
    async with MemoryManager.open(shipped, embedder=embedder) as manager:
        turns = [TurnInput("s", n, f"Turn {n}: the build on runner {n} took {n + 3} minutes.") for n in range(12)]
        ids = [r.memory_id or "" for r in await manager.process_turns(turns)]

    stopped = await reembed_store(local, say=lambda line: None, limit=5, embedder=other)
    assert not stopped["done"] and stopped["left"] == 7

    async with MemoryManager.open(shipped, embedder=embedder) as manager:  # still the old model's store
        assert (await manager.retrieve("runner 3", k=1))[0].memory.memory_id == ids[3]
        await manager.update(ids[0], "Turn 0: the build on runner 0 took an hour.", expected_revision=1)

    finished = await reembed_store(local, say=lambda line: None, embedder=other)
    assert finished["done"] and finished["memories"] == 12
    async with MemoryManager.open(local, embedder=other) as manager:
        stored = await vectors(manager)
        expected = (await other.embed(["Turn 0: the build on runner 0 took an hour."]))[0]
        assert np.allclose(stored[ids[0]][0], expected, atol=1e-5)  # staged before its update, embedded again
        assert (await manager.records._fetch("SELECT count(*) FROM reembedding"))[0][0] == 0

    assert not (await reembed_store(local, say=lambda line: None, embedder=other))["done"]  # nothing left to do


async def test_an_erase_drops_the_staged_vectors_made_from_what_it_erases(
    shipped: Config, local: Config, embedder: Embedder, other: Embedder
) -> None:
    """A staged vector is made from a memory's words: an erase between two runs leaves none behind, and the next
    run stages the store that is left."""
    async with MemoryManager.open(shipped, embedder=embedder) as manager:
        turns = [TurnInput("s", n, f"Turn {n}: the build on runner {n} took {n + 3} minutes.") for n in range(6)]
        ids = [r.memory_id or "" for r in await manager.process_turns(turns)]
    assert not (await reembed_store(local, say=lambda line: None, limit=5, embedder=other))["done"]
    async with MemoryManager.open(shipped, embedder=embedder) as manager:
        assert (await manager.records._fetch("SELECT count(*) FROM reembedding"))[0][0] == 5
        await manager.erase(reason="test", memory_ids=[ids[2]])
        assert (await manager.records._fetch("SELECT count(*) FROM reembedding"))[0][0] == 0
    finished = await reembed_store(local, say=lambda line: None, embedder=other)
    assert finished["done"] and finished["memories"] == 5


async def test_a_store_with_a_running_owner_or_none_at_all_is_refused(
    shipped: Config, local: Config, embedder: Embedder, other: Embedder, tmp_path: Path
) -> None:
    async with MemoryManager.open(shipped, embedder=embedder) as manager:
        await manager.process_turn("s", 0, "The staging database moved to port 5433.")
        with pytest.raises(StoreLocked):
            await reembed_store(local, say=lambda line: None, embedder=other)
    with pytest.raises(ConfigError, match="No store in"):
        await reembed_store(store_config(tmp_path / "nowhere"), say=lambda line: None, embedder=embedder)
    async with MemoryManager.open(shipped, embedder=embedder) as manager:  # the refusal changed nothing
        assert len(await vectors(manager)) == 1


def test_the_command_line_moves_the_store_then_finds_nothing_to_do(
    tmp_path: Path, model_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "store"
    turns = tmp_path / "turns.jsonl"
    turns.write_text('{"session_id": "s", "turn_number": 0, "content": "The staging database moved to port 5433."}\n')
    assert main(["--data-dir", str(data_dir), "ingest", str(turns)]) == 0
    settings = tmp_path / "local.toml"
    settings.write_text(
        f'[embedding]\nbackend = "torch"\nmodel_path = "{model_folder}"\ndimension = {LOCAL_MODEL_SIZE}\n',
        encoding="utf-8",
    )
    capsys.readouterr()
    assert main(["--data-dir", str(data_dir), "--config", str(settings), "reembed"]) == 0
    assert "re-embedded 1 memories" in capsys.readouterr().out
    assert main(["--data-dir", str(data_dir), "--config", str(settings), "reembed"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["--data-dir", str(data_dir), "--config", str(settings), "search", "staging database port"]) == 0
    assert "5433" in capsys.readouterr().out


async def test_a_store_made_by_another_model_of_the_same_size_warns_until_it_is_reembedded(
    tmp_path: Path, model_folder: Path, local: Config, other: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the size is refused (check_vector_size); a model of the same size under another name is let in with a
    warning that names both and says how to make every vector with it."""
    async with MemoryManager.open(local, embedder=other) as manager:
        await manager.process_turn("s", 0, "The staging database moved to port 5433.")
    renamed = tmp_path / "models" / "minilm-128-copy"
    shutil.copytree(model_folder, renamed)
    copy = store_config(local.data_dir, backend="torch", model_path=str(renamed), dimension=str(LOCAL_MODEL_SIZE))
    twin = make_embedder(copy)
    try:
        with caplog.at_level(logging.WARNING, logger="agent_memory.engines"):
            async with MemoryManager.open(copy, embedder=twin):
                pass
        assert "made by minilm-128, and questions are now embedded by minilm-128-copy" in caplog.text
        assert "agent-memory reembed" in caplog.text
        assert (await reembed_store(copy, say=lambda line: None, embedder=twin))["done"]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agent_memory.engines"):
            async with MemoryManager.open(copy, embedder=twin):
                pass
        assert "questions are now embedded by" not in caplog.text
    finally:
        await twin.aclose()
