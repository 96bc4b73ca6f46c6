"""The invariants: one owner, outbox replay after a crash, doctor finding and repairing damage."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from agent_memory import MemoryManager, StoreLocked, TurnInput, doctor
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.storage.lock import OwnerLock
from agent_memory.storage.outbox import GATHER_DELAYS

ROOT = Path(__file__).resolve().parents[1]


async def test_second_open_in_the_same_process_fails_naming_the_owner(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder):
        with pytest.raises(StoreLocked, match=f"process {os.getpid()}"):
            async with MemoryManager.open(config, embedder=embedder):
                pass
    async with MemoryManager.open(config, embedder=embedder) as again:  # released on close
        assert (await again.stats())["pid"] == os.getpid()


async def test_an_open_refused_while_its_model_loads_waits_for_the_load_and_leaves_nothing_open(
    config: Config, embedder: Embedder
) -> None:
    """The text model loads on its own thread while the engines open: an open the lock refuses reports the lock
    once the load has ended, and closes the model it loaded (no thread of it is left running)."""
    async with MemoryManager.open(config, embedder=embedder) as owner:
        refused = MemoryManager(config)  # its own embedder, not yet loaded
        with pytest.raises(StoreLocked):
            await refused.initialize()
        with pytest.raises(RuntimeError, match="shutdown"):  # its threads are shut down: nothing can run on them
            await refused.embedder.embed(["Priya moved to Porto."])
        assert (await owner.stats())["pid"] == os.getpid()  # the owner's store untouched


def test_another_process_is_refused_with_our_pid(tmp_path: Path) -> None:
    lock = OwnerLock(tmp_path / "owner.lock")
    lock.acquire()
    try:
        code = (
            "import sys; from pathlib import Path; from agent_memory.storage.lock import OwnerLock\n"
            "from agent_memory.errors import StoreLocked\n"
            f"try:\n    OwnerLock(Path({str(tmp_path / 'owner.lock')!r})).acquire()\n"
            "except StoreLocked as e:\n    print(e); sys.exit(3)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stderr
        assert f"process {os.getpid()}" in done.stdout
    finally:
        lock.release()


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from agent_memory import MemoryManager, load_config

    async def main():
        config = load_config(environ={}, data_dir=sys.argv[1])
        manager = MemoryManager(config)
        await manager.initialize()
        await manager.projector.stop()          # the projector never runs: the crash comes first
        result = await manager.process_turn("s1", 0, "Biscuit the dog had surgery in Alvalade.")
        print(json.dumps({"memory_id": result.memory_id}), flush=True)
        os._exit(0)                             # no close, no drain: like a SIGKILL after the commit

    asyncio.run(main())
    """
)


async def test_outbox_is_replayed_after_a_crash_between_commit_and_projection(
    config: Config, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", CHILD, str(config.data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    memory_id = json.loads(done.stdout.strip().splitlines()[-1])["memory_id"]
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert memory_id in await manager.graph.memory_ids()
        assert memory_id in await manager.vectors.ids("text")
        assert "surgery" in " ".join((await manager.get(memory_id)).keywords)  # derived on the reopen's drain
        assert (await manager.stats())["pending_outbox"] == 0
        assert (await manager.doctor()).consistent
        assert "rebuilding" not in caplog.text  # an empty graph whose memories all wait in the outbox only lags
        results = await manager.retrieve("dog surgery")
        assert results[0].memory.memory_id == memory_id


async def test_turns_logged_but_not_committed_are_recovered(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turn("s1", 0, "The first turn made it all the way.")
        from agent_memory.models import LogRecord, Role, TurnId, new_id, utc_now

        orphan = LogRecord(
            TurnId(new_id()),
            "default",
            "s1",
            1,
            Role.USER,
            "This turn reached the log, then the process died.",
            utc_now(),
            None,
        )
        await manager.journal.append(orphan)  # what a crash before the SQLite commit leaves behind
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert manager.recovered_turns == 1
        assert (await manager.stats())["records"]["turns"] == 2
        assert (await manager.retrieve("process died", k=1))[0].memory.source_turn_id == orphan.turn_id
        assert (await manager.doctor()).consistent


async def test_doctor_finds_and_repairs_damaged_projections(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        results = await manager.process_turns(
            [
                {"session_id": "s1", "turn_number": i, "content": f"Fact number {i} about the Harbor project."}
                for i in range(20)
            ]
        )
        await manager.flush()
        victim = results[3].memory_id
        await manager.graph.delete_memories([victim])
        await manager.vectors.delete("text", [results[5].memory_id, results[6].memory_id])
        report = await manager.doctor()
        assert not report.consistent
        kinds = {(d.store, d.kind): d.ids for d in report.disagreements}
        assert kinds[("graph", "missing memories")] == (victim,)
        assert set(kinds[("vectors", "missing memories")]) == {results[5].memory_id, results[6].memory_id}
        repaired = await manager.doctor(repair=True)
        assert repaired.consistent and len(repaired.repaired) == 2
        stats = await manager.stats()
        assert stats["graph"]["Memory"] == 20 and stats["vectors"]["text"] == 20
        assert stats["graph"]["NEXT"] == 19


async def test_doctor_finds_a_vector_payload_that_differs_from_sqlite(config: Config, embedder: Embedder) -> None:
    """The payload fields a search filters on (namespace, status, tier, event time) are checked point by point: a
    point whose status or event time drifted would be searched as what it is not (the time layer's window, the
    semantic layer's active memories). --repair rebuilds the vectors from SQLite."""
    async with MemoryManager.open(config, embedder=embedder) as manager:
        results = await manager.process_turns(
            [
                {"session_id": "s1", "turn_number": i, "content": f"Fact number {i} about the Harbor project."}
                for i in range(6)
            ]
        )
        await manager.flush()
        assert (await manager.doctor()).consistent
        moved, merged = results[1].memory_id, results[4].memory_id
        await manager.vectors.set_payloads("text", [(moved, {"event_at": 0.0}), (merged, {"status": "merged"})])
        report = await manager.doctor()
        kinds = {(d.store, d.kind): d.ids for d in report.disagreements}
        assert kinds == {("vectors", f"memories {doctor.PAYLOADS}"): tuple(sorted((moved, merged)))}
        repaired = await manager.doctor(repair=True)
        assert repaired.consistent and repaired.repaired == ("vectors rebuilt from the stored embeddings",)
        payloads = await manager.vectors.payloads("text")
        assert payloads[merged]["status"] == "active"
        assert payloads[moved]["event_at"] == (await manager.get(moved)).event_at.timestamp()


async def test_a_deleted_projection_folder_is_rebuilt_on_open(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns(
            [{"session_id": "s1", "turn_number": i, "content": f"note {i} on Porto"} for i in range(5)]
        )
    shutil.rmtree(config.data_dir / "vectors")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert (await manager.stats())["vectors"]["text"] == 5 and (await manager.doctor()).consistent
    shutil.rmtree(config.data_dir / "graph")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        stats = await manager.stats()
        assert stats["graph"]["Memory"] == 5 and stats["graph"]["NEXT"] == 4 and (await manager.doctor()).consistent
        assert (await manager.retrieve("note 3 on Porto", k=1))[0].memory.content == "note 3 on Porto"


async def test_doctor_repairs_a_deleted_vector_collection(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        results = await manager.process_turns(
            [{"session_id": "s1", "turn_number": i, "content": f"note {i} on Porto"} for i in range(5)]
        )
        await manager.flush()
        await manager.vectors.delete("text", [r.memory_id for r in results])
        report = await manager.doctor(repair=True)
        assert report.repaired == ("vectors rebuilt from the stored embeddings",)
        assert report.consistent and (await manager.stats())["vectors"]["text"] == 5


async def test_doctor_reports_a_log_offset_that_points_elsewhere(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns(
            [{"session_id": "s1", "turn_number": i, "content": f"line {i} of notes"} for i in range(3)]
        )
        async with manager.records.transaction() as db:
            await db.execute("UPDATE turns SET offset = offset + 1 WHERE turn_number = 2")
        report = await manager.doctor()
        assert [(d.store, d.kind) for d in report.disagreements] == [
            ("log", "turn offsets that do not point at their record")
        ]


async def test_doctor_reports_a_turn_whose_log_record_is_gone(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        results = await manager.process_turns(
            [{"session_id": "s1", "turn_number": i, "content": f"line {i} of notes"} for i in range(3)]
        )
        async with manager.records.transaction() as db:  # no record in the log carries this checksum any more
            await db.execute("UPDATE turns SET checksum = 'no-such-checksum' WHERE turn_number = 1")
        report = await manager.doctor()
        assert [(d.store, d.kind, d.ids) for d in report.disagreements] == [
            ("log", "turns whose log record is gone (cannot be repaired)", (results[1].turn_id,))
        ]


async def test_an_unreadable_graph_is_set_aside_and_rebuilt(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns(
            [{"session_id": "s1", "turn_number": i, "content": f"Ines visited Porto, day {i}"} for i in range(6)]
        )
        await manager.flush()
        before = (await manager.stats())["graph"]
        assert before["Memory"] == 6
    (config.data_dir / "graph" / "graph.kuzu").write_bytes(b"\x00garbage, as a crash mid-checkpoint might leave" * 50)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert (await manager.stats())["graph"] == before
        assert (await manager.doctor()).consistent
    assert (config.data_dir / "graph.broken" / "graph.kuzu").exists()


async def test_an_unreadable_vector_shard_is_set_aside_and_rebuilt(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns(
            [{"session_id": "s1", "turn_number": i, "content": f"note {i} about Lisbon"} for i in range(4)]
        )
    for path in (config.data_dir / "vectors" / "text").rglob("*"):
        if path.is_file():
            path.write_bytes(b"not a segment")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert (await manager.stats())["vectors"]["text"] == 4
        assert (await manager.retrieve("Lisbon", k=1))[0].memory.content.startswith("note")
        assert (await manager.doctor()).consistent
    assert (config.data_dir / "vectors.broken" / "text").exists()


async def test_a_read_projects_the_vectors_it_searches_and_leaves_the_graph_to_the_projector(
    config: Config, embedder: Embedder
) -> None:
    """A retrieval right after a turn applies the new memory's vector part itself; its graph part (Kuzu, which
    retrieval does not read) stays queued for the background projector, and a full drain finishes it."""
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.projector.stop()  # nothing drains behind the test's back
        stored = await manager.process_turn("s1", 0, "Our dog Biscuit needs knee surgery next Tuesday.")
        assert stored.memory_id is not None
        results = await manager.retrieve("when is the dog's surgery")
        assert results[0].memory.memory_id == stored.memory_id and "semantic" in results[0].layers
        assert stored.memory_id in await manager.vectors.ids("text")
        assert stored.memory_id not in await manager.graph.memory_ids()
        async with manager.records.transaction() as db:
            rows = await db.execute_fetchall("SELECT vectors_at IS NOT NULL, done_at IS NOT NULL FROM outbox")
            waiting = await db.execute_fetchall("SELECT count(*) FROM pending_keywords")
        assert [tuple(r) for r in rows] == [(1, 0)]
        assert waiting[0][0] == 0 and results[0].memory.keywords  # the read derived the new memory's keywords
        assert await manager.projector.drain() == 1
        assert stored.memory_id in await manager.graph.memory_ids()
        assert (await manager.stats())["pending_outbox"] == 0 and (await manager.doctor()).consistent


async def test_the_background_applies_what_a_search_needs_soon_after_a_write_and_the_graph_later(
    config: Config, embedder: Embedder
) -> None:
    """`projector_read_delay` after a write, with no read asking, the vector part and the keywords are applied
    (the next search finds nothing to apply on its own path); the graph part waits for its batch."""
    config = config.model_copy(update={"projector_delay": timedelta(minutes=10), "projector_read_delay": timedelta(0)})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        stored = await manager.process_turn("s1", 0, "Our dog Biscuit needs knee surgery next Tuesday.")
        assert stored.memory_id is not None
        async with asyncio.timeout(10):
            while await manager.records.has_pending_for_reads():  # noqa: ASYNC110 (SQLite state, no event)
                await asyncio.sleep(0.01)
        assert stored.memory_id in await manager.vectors.ids("text")
        assert stored.memory_id not in await manager.graph.memory_ids()
        async with manager.records.transaction() as db:
            rows = await db.execute_fetchall("SELECT vectors_at IS NOT NULL, done_at IS NOT NULL FROM outbox")
            waiting = await db.execute_fetchall("SELECT count(*) FROM pending_keywords")
        assert [tuple(r) for r in rows] == [(1, 0)] and waiting[0][0] == 0
        assert await manager.projector.drain_for_reads() == 0  # a search now has nothing to apply first
        assert await manager.projector.drain() == 1
        assert stored.memory_id in await manager.graph.memory_ids()


async def test_a_stream_of_writes_reaches_the_graph_in_whole_batches_and_a_pause_applies_the_rest(
    config: Config, embedder: Embedder
) -> None:
    """While turns keep coming, the graph's drain waits for a whole batch (Kuzu checkpoints the database at each
    commit after a COPY), up to GATHER_DELAYS more delays; once they stop, what waits is applied one delay later.
    Without the gathering this stream is about one graph transaction a delay (8 or more)."""
    delay = timedelta(milliseconds=200)
    config = config.model_copy(update={"projector_delay": delay, "projector_batch": 10_000})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        kept, written = [], []
        clock = asyncio.get_running_loop().time
        started = clock()
        for n in range(60):
            result = await manager.process_turn("s1", n, f"Ticket {n}: the invoice export for client {n * 7} failed.")
            if result.memory_id:
                kept.append(result.memory_id)
                written.append(clock())  # a kept turn adds outbox rows; the drain gathers while they keep coming
            await asyncio.sleep(0.02)
        streamed = clock() - started
        assert streamed > 6 * delay.total_seconds() and len(kept) > 30  # a stream, longer than several delays
        async with asyncio.timeout(10):
            while await manager.records.pending_outbox_count():  # noqa: ASYNC110 (SQLite state, no event)
                await asyncio.sleep(0.05)
        # The gathering ends early only when a delay passes with no new row: count the gaps between kept writes
        # that long (a write slowed by a loaded machine), with a margin for the time between commit and return.
        times = [started, *written]
        stalls = sum(later - earlier > 0.75 * delay.total_seconds() for earlier, later in itertools.pairwise(times))
        # a transaction per GATHER_DELAYS + 1 delays of the stream (one more for the part cycle), one for the rest
        # after it, one per stall; about one a delay (12 here) without the gathering
        gathered = streamed / ((GATHER_DELAYS + 1) * delay.total_seconds()) + 2
        assert gathered < streamed / delay.total_seconds() / 2  # well under a transaction a delay
        assert 1 <= manager.projector.graph_batches <= gathered + stalls, (
            manager.projector.graph_batches,
            streamed,
            stalls,
        )
        assert set(kept) <= await manager.graph.memory_ids()


async def test_the_projectors_graph_rows_are_what_a_rebuild_reads(manager: MemoryManager) -> None:
    """The graph rows the projector reads for a batch (each memory's session predecessor in one query) are the ones
    a rebuild reads for the whole store, for sessions written interleaved and out of order."""
    turns = [
        TurnInput(f"s{n % 3}", 10 - n // 3, f"Order {n}: the crate for Ada Lovelace shipped to Porto.")
        for n in range(21)
    ]
    for start in range(0, len(turns), 5):
        await manager.process_turns(turns[start : start + 5])
    rebuilt = {m.memory_id: m for m in await manager.records.all_graph_memories()}
    batched = {m.memory_id: m for m in await manager.records.graph_memories(list(rebuilt))}
    assert len(rebuilt) == 21 and batched == rebuilt
    assert sum(m.previous_in_session is not None for m in batched.values()) == 18  # all but each session's first
