"""SQLite records: versioned migrations, FTS5 kept in step by triggers, the outbox's bookkeeping."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_memory.errors import StorageError
from agent_memory.models import utc_now
from agent_memory.storage.recall_records import COMMON_MIN_DOCS
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.rows import migrations


async def test_migrations_apply_once_in_order(tmp_path: Path) -> None:
    found = migrations()
    assert [v for v, _, _ in found] == list(range(1, len(found) + 1))
    records = await SqliteRecords.open(tmp_path / "memory.db")
    assert await records.schema_version() == len(found)
    await records.aclose()
    again = await SqliteRecords.open(tmp_path / "memory.db")  # reopening applies nothing twice
    assert await again.schema_version() == len(found)
    await again.aclose()
    with sqlite3.connect(tmp_path / "memory.db") as db:
        rows = db.execute("SELECT version, name FROM schema_migrations").fetchall()
        assert rows == [(v, name) for v, name, _ in found]
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    assert {
        "turns",
        "memories",
        "memory_entities",
        "access_log",
        "save_decisions",
        "retrieval_events",
        "compaction_history",
        "outbox",
        "memories_fts",
    } <= tables


async def test_a_migration_that_fails_names_itself_and_leaves_no_connection_open(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "memory.db") as db:  # an object that a migration creates, already there
        db.execute("CREATE TABLE turns (x)")
    threads = threading.active_count()
    with pytest.raises(StorageError, match="Migration 0001_initial.sql failed: table turns already exists"):
        await SqliteRecords.open(tmp_path / "memory.db")
    for _ in range(200):  # a closed connection's thread ends just after close() returns
        if threading.active_count() == threads:
            break
        await asyncio.sleep(0.01)
    assert threading.active_count() == threads  # an open connection keeps its thread: the process never exits


async def test_fts_follows_inserts_updates_and_deletes(records: SqliteRecords) -> None:
    now = utc_now().isoformat()
    async with records.transaction() as db:
        await db.execute(
            "INSERT INTO memories (memory_id, namespace, memory_type, content, keywords, created_at, event_at) "
            "VALUES ('m1', 'default', 'episodic', 'Running the marathons in Lisbon', '[\"lisbon\"]', ?, ?)",
            (now, now),
        )
    assert [i for i, _ in await records.keyword_search("default", ["run"], limit=5)] == ["m1"]  # porter stem
    async with records.transaction() as db:
        await db.execute("UPDATE memories SET content = 'Swimming in Porto' WHERE memory_id = 'm1'")
    assert await records.keyword_search("default", ["run"], limit=5) == []
    assert [i for i, _ in await records.keyword_search("default", ["porto"], limit=5)] == ["m1"]
    assert await records.keyword_search("other", ["porto"], limit=5) == []
    async with records.transaction() as db:
        await db.execute("DELETE FROM memories WHERE memory_id = 'm1'")
    assert await records.keyword_search("default", ["porto"], limit=5) == []


async def test_failed_transaction_rolls_back(tmp_path: Path) -> None:
    records = await SqliteRecords.open(tmp_path / "memory.db")
    now = utc_now().isoformat()
    try:
        async with records.transaction() as db:
            await db.execute("INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', 'm1', ?)", (now,))
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert await records.pending_outbox_count() == 0
    await records.aclose()


async def test_a_retrieval_event_writes_its_accesses_and_passes_over_a_result_that_is_gone(
    records: SqliteRecords,
) -> None:
    now = utc_now()
    async with records.transaction() as db:
        await db.executemany(
            "INSERT INTO memories (memory_id, namespace, memory_type, content, keywords, created_at, event_at) "
            "VALUES (?, 'default', 'episodic', 'text', '[]', ?, ?)",
            [(m, now.isoformat(), now.isoformat()) for m in ("m1", "m2", "m3")],
        )
    await records.record_retrieval("r1", "default", "q", at=now, k=2, results=[("m2", 0.9), ("m1", 0.5)])
    await records.record_retrieval("r2", "default", "q", at=now, k=1, results=[("m2", 0.8)])
    # a result erased after it was found (migration 0023): the event and the other accesses are written
    await records.record_retrieval("r3", "default", "q", at=now, k=2, results=[("m3", 0.9), ("gone", 0.1)])
    with pytest.raises(StorageError, match="UNIQUE"):  # a failing statement writes nothing
        await records.record_retrieval("r3", "default", "q", at=now, k=1, results=[("m1", 0.9)])
    counts = {
        m: (x.access_count, x.last_accessed_at) for m, x in (await records.get_memories(["m1", "m2", "m3"])).items()
    }
    assert counts == {"m1": (1, now), "m2": (2, now), "m3": (1, now)}
    accesses = await records._fetch("SELECT retrieval_id, memory_id, rank FROM access_log ORDER BY access_id")
    assert [tuple(a) for a in accesses] == [("r1", "m2", 1), ("r1", "m1", 2), ("r2", "m2", 1), ("r3", "m3", 1)]
    events = await records._fetch("SELECT retrieval_id FROM retrieval_events ORDER BY retrieval_id")
    assert [e[0] for e in events] == ["r1", "r2", "r3"]


@pytest.fixture(params=["fts5", "projection"])
async def records(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[SqliteRecords]:
    """The records, with the keyword layer answered by FTS5 or by its in-memory projection (built empty, then
    kept in step with what the test writes): every keyword test holds for both."""
    opened = await SqliteRecords.open(tmp_path / "memory.db")
    if request.param == "projection":
        await opened.start_keyword_index().wait()
    try:
        yield opened
    finally:  # also when the test fails: an open connection's thread would keep pytest from exiting
        await opened.aclose()


async def test_keyword_search_finds_a_namespace_crowded_out_of_the_best_matches(records: SqliteRecords) -> None:
    """The layer ranks the best matches across namespaces before it filters; when another namespace's (or merged)
    memories fill that cut, it falls back to the full join instead of returning too little."""
    now = utc_now().isoformat()
    rows = [(f"o{i}", "other", "active", "Porto Porto Porto in spring") for i in range(12)]
    rows += [(f"x{i}", "default", "merged", "Porto Porto again") for i in range(4)]
    rows += [("d1", "default", "active", "We once spent a long and rainy week somewhere near Porto")]
    async with records.transaction() as db:
        await db.executemany(
            "INSERT INTO memories (memory_id, namespace, status, memory_type, content, keywords, created_at, event_at) "
            "VALUES (?, ?, ?, 'episodic', ?, '[]', ?, ?)",
            [(*row, now, now) for row in rows],
        )
    assert [i for i, _ in await records.keyword_search("default", ["porto"], limit=3)] == ["d1"]
    assert len(await records.keyword_search("other", ["porto"], limit=3)) == 3


async def test_keyword_search_ranks_common_words_only_beside_rarer_ones(records: SqliteRecords) -> None:
    """A word most memories hold is common (COMMON_MIN_DOCS and `common_share`): memories holding only it are not
    ranked, while every memory holding a rarer word keeps exactly the BM25 score the plain OR query gives it."""
    now = utc_now().isoformat()
    rows = [(f"c{i}", "Coffee again this morning" + " coffee" * (i % 3)) for i in range(COMMON_MIN_DOCS + 100)]
    rows += [(f"p{i}", "Porto in spring" + (", and coffee by the river" if i % 2 else "")) for i in range(20)]
    rows += [(f"t{i}", "Tea at noon") for i in range(COMMON_MIN_DOCS + 200)]  # so coffee's BM25 weight stays > 0
    async with records.transaction() as db:
        await db.executemany(
            "INSERT INTO memories (memory_id, namespace, memory_type, content, keywords, created_at, event_at) "
            "VALUES (?, 'default', 'episodic', ?, '[]', ?, ?)",
            [(*row, now, now) for row in rows],
        )
    words = ["coffee", "porto"]
    pruned = dict(await records.keyword_search("default", words, limit=50, common_share=0.05))
    exact = dict(await records.keyword_search("default", words, limit=50, common_share=1.0))
    assert set(pruned) == {f"p{i}" for i in range(20)}  # no memory with only "coffee" was scored
    assert {f"p{i}" for i in range(20)} <= set(exact) and any(i.startswith("c") for i in exact)
    for memory_id, score in pruned.items():
        assert score == pytest.approx(exact[memory_id], rel=1e-12)
    alone = dict(await records.keyword_search("default", ["porto"], limit=50))
    assert pruned["p1"] > alone["p1"] and pruned["p0"] == pytest.approx(alone["p0"])  # coffee counts where held
    # With no rarer word beside it, a common word is searched as it is: nothing else would be found.
    assert len(await records.keyword_search("default", ["coffee"], limit=5, common_share=0.05)) == 5
    assert len(await records.keyword_search("default", ["coffee", "morning"], limit=5, common_share=0.05)) == 5
