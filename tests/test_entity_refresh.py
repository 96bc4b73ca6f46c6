"""The entity refresh (entity_refresh.py): when the rules that find a memory's entities change, the memories the
write path made are given the entities the current rules find in their words, in SQLite and in the graph, without
touching their vectors; a memory revised meanwhile keeps its revision's. Real MiniLM, SQLite, Kuzu and Qdrant Edge
in temporary directories."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.manager import MemoryManager
from agent_memory.models import MemoryId, TurnInput
from agent_memory.sleep.jobs import run_job
from agent_memory.storage.entity_records import EntityState, WordsRead

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2023, 5, 8, 12, tzinfo=UTC)
TURNS = [
    "Here are a few ideas:\n1. Consider a day trip to Sintra.\n2. Ensure you book the train early.",
    "Root cause: the pool was too small. Fix: Priya raised it to forty.",
    "Melanie: I painted the lake at Lisbon last weekend.",
    "Use a timer. Keep the sessions short and see how Tomasz feels.",
]
OLD_RULES = {  # what the first rules found: every capitalised sentence opener was a name
    0: ["here", "consider", "sintra", "ensure"],
    1: ["root", "fix", "priya"],
    2: ["melanie", "lisbon"],
    3: ["use", "keep", "tomasz"],
}


def store_config(data_dir: Path, **extraction: str) -> Config:
    environ = {f"AGENT_MEMORY__EXTRACTION__{key.upper()}": value for key, value in extraction.items()}
    environ |= {"AGENT_MEMORY__SAVE__KEEP_ALL": "true"}
    environ.setdefault("AGENT_MEMORY__EXTRACTION__REFRESH_DELAY", "PT1H")  # only when a test asks
    return load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(data_dir))


async def first_rules_store(data_dir: Path, embedder: Embedder) -> dict[str, int]:
    """A store as the first rules left it: each memory holds OLD_RULES' entities, in SQLite and in the graph, and
    the records say so. Returns memory id -> the turn it holds."""
    async with MemoryManager.open(store_config(data_dir), embedder=embedder) as manager:
        await manager.process_turns(
            [TurnInput("s1", n, text, at=T0 + timedelta(minutes=n)) for n, text in enumerate(TURNS)]
        )
        await manager.flush()
        rows = await manager.records._fetch("SELECT memory_id, content FROM memories")
    which = {str(r[0]): TURNS.index(str(r[1])) for r in rows}
    db = sqlite3.connect(data_dir / "memory.db")
    with db:
        db.execute("DELETE FROM memory_entities")
        db.executemany(
            "INSERT INTO memory_entities (memory_id, entity, namespace) VALUES (?, ?, 'default')",
            [(memory_id, name) for memory_id, n in which.items() for name in OLD_RULES[n]],
        )
        db.executemany(  # the graph as the projector made it then
            "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, '2023-05-08T12:00:00+00:00')",
            [(memory_id,) for memory_id in which],
        )
        db.execute("UPDATE entity_refresh SET rules = 'proper-nouns-1', cursor = NULL")
    db.close()
    return which


async def entities_in_sqlite(manager: MemoryManager) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for memory_id, entity in await manager.records._fetch("SELECT memory_id, entity FROM memory_entities"):
        found.setdefault(str(memory_id), set()).add(str(entity))
    return found


async def test_a_store_of_the_first_rules_gets_each_memorys_entities_found_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    which = await first_rules_store(tmp_path, embedder)
    async with MemoryManager.open(store_config(tmp_path), embedder=embedder) as manager:
        await manager.flush()
        some = next(i for i, n in which.items() if n == 0)
        assert await manager.graph.entities(MemoryId(some)) == sorted(OLD_RULES[0])
        before = await manager.stats()
        assert before["entities_to_refresh"] == len(TURNS)

        run = await run_job(manager, "entities")
        await manager.flush()

        assert run.error is None and run.counts == {"refreshed": 3, "left": 0}  # the third turn names no opener
        now = SimpleExtractor()
        wanted = {memory_id: set(now.entities(TURNS[n])) for memory_id, n in which.items()}
        assert wanted[some] == {"sintra"} and set().union(*wanted.values()) == {
            "sintra",
            "priya",
            "melanie",
            "lisbon",
            "tomasz",
        }
        assert await entities_in_sqlite(manager) == {i: e for i, e in wanted.items() if e}
        for memory_id, names in wanted.items():
            assert set(await manager.graph.entities(MemoryId(memory_id))) == names
        after = await manager.stats()
        assert after["entities_to_refresh"] == 0
        assert after["vectors_moved"] == before["vectors_moved"]  # the graph alone was projected again
        assert after["graph"]["MENTIONS"] == sum(len(names) for names in wanted.values())
        assert (await manager.doctor()).consistent
        assert (await run_job(manager, "entities")).counts == {"refreshed": 0, "left": 0}  # done: nothing to look at


async def test_the_refresh_runs_by_itself_once_the_store_is_idle(tmp_path: Path, embedder: Embedder) -> None:
    which = await first_rules_store(tmp_path, embedder)
    config = store_config(tmp_path, refresh_delay="PT0.05S", refresh_batch="3")  # two batches
    async with MemoryManager.open(config, embedder=embedder) as manager:
        async with asyncio.timeout(30):
            while await manager.entity_refresh.left():  # noqa: ASYNC110 (SQLite state)
                await asyncio.sleep(0.05)
        assert manager.entity_refresh.refreshed == 3
        found = await entities_in_sqlite(manager)
        assert all("consider" not in names and "fix" not in names for names in found.values())
        assert found[next(i for i, n in which.items() if n == 1)] == {"priya"}


async def test_fewer_entities_a_memory_is_a_change_of_rules_too(tmp_path: Path, embedder: Embedder) -> None:
    async with MemoryManager.open(store_config(tmp_path), embedder=embedder) as manager:
        await manager.process_turns([TurnInput("s1", 0, "Priya met Tomasz and Melanie in Lisbon.", at=T0)])
        assert (await manager.stats())["entities_to_refresh"] == 0  # a new store follows the current rules
    async with MemoryManager.open(store_config(tmp_path, max_entities="2"), embedder=embedder) as manager:
        assert (await manager.stats())["entities_to_refresh"] == 1
        assert await manager.entity_refresh.catch_up() == 1
        assert list((await entities_in_sqlite(manager)).values()) == [{"priya", "tomasz"}]


async def test_a_memory_whose_words_changed_since_they_were_read_keeps_its_entities(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with MemoryManager.open(store_config(tmp_path), embedder=embedder) as manager:
        result = (await manager.process_turns([TurnInput("s1", 0, "Consider Sintra. Priya agrees.", at=T0)]))[0]
        memory_id = str(result.memory_id)
        revised = await manager.update(memory_id, "Tomasz went to Porto.", expected_revision=1)
        stale = WordsRead(memory_id, "Consider Sintra. Priya agrees.", frozenset({"sintra", "priya"}))
        changed = await manager.records.refresh_entities([(stale, ("sintra", "priya"))], EntityState("x", None), T0)
        assert changed == 0 and revised.revision == 2
        assert await entities_in_sqlite(manager) == {memory_id: {"tomasz", "porto"}}


def test_the_cli_runs_the_refresh_and_reports_it(tmp_path: Path, embedder: Embedder, capsys) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(first_rules_store(tmp_path, embedder))
    assert main(["--data-dir", str(tmp_path), "entities", "--json"]) == 0
    assert '"refreshed": 3' in capsys.readouterr().out


async def test_every_kind_of_memory_it_looks_at_holds_what_its_words_give(tmp_path: Path, embedder: Embedder) -> None:
    """A turn's, a long turn's chunks', a note's and a revision's entities are what the extractor finds in the
    memory's words: a refresh under the same rules changes none of them (it would rewrite them otherwise)."""
    config = store_config(tmp_path).model_copy(update={"max_content_bytes": 1024})
    long_turn = " ".join(
        f"Step {n}: Consider the Harbor build on host Ilha-{n}, then Ensure it passes." for n in range(40)
    )
    async with MemoryManager.open(config, embedder=embedder) as manager:
        done = await manager.process_turns(
            [TurnInput("s1", 0, TURNS[0], at=T0), TurnInput("s1", 1, long_turn, at=T0 + timedelta(minutes=1))]
        )
        assert len(done[1].chunk_memory_ids) > 1
        await manager.notes.write("Fix: Priya moved the Harbor cache to Redis. Use the new key prefix.", kind="finding")
        revised = await manager.update(str(done[0].memory_id), "Consider Porto. Tomasz booked it.", expected_revision=1)
        assert set(revised.entities) == {"porto", "tomasz"}
        looked_at = await manager.records.words_left("")
        assert looked_at == 2 + len(done[1].chunk_memory_ids)
        await manager.records.refresh_entities([], EntityState("proper-nouns-1", None), T0)  # as if the rules changed
        assert await manager.entity_refresh.catch_up() == 0
        assert (await manager.stats())["entities_to_refresh"] == 0
