"""Recovery indexes every logged record SQLite lacks, wherever it lies; a turn key maps to one record; doctor
--repair fixes what doctor reports about the log; the counts stats() reads stay equal to the tables."""

from __future__ import annotations

import asyncio

import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import DuplicateTurn
from agent_memory.models import LogRecord, Role, TurnId, new_id, utc_now


def logged_only(session_id: str, turn_number: int, content: str, namespace: str = "default") -> LogRecord:
    """A record as a writer that died between its log append and its commit leaves it."""
    return LogRecord(TurnId(new_id()), namespace, session_id, turn_number, Role.USER, content, utc_now(), None)


async def records_for(manager: MemoryManager, session_id: str, turn_number: int) -> list[LogRecord]:
    return [r async for _, r in manager.journal.scan() if (r.session_id, r.turn_number) == (session_id, turn_number)]


async def test_a_record_logged_before_the_last_commit_is_recovered(config: Config, embedder: Embedder) -> None:
    """Two concurrent writers: A is logged first, B is logged and committed after it, then the process dies
    before A commits. Recovery read the log only after the last committed offset (B's) and lost A for good."""
    orphan = logged_only("a", 0, "Writer A logged this about the Lisbon invoice, then the process died.")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.journal.append_many([orphan])
        await manager.process_turn("b", 0, "Writer B committed this about the Porto flight afterwards.")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert manager.recovered_turns == 1
        assert await manager.records.get_turn(orphan.turn_id) is not None
        assert (await manager.doctor()).consistent
        with pytest.raises(DuplicateTurn):  # the same turn sent again: its key maps to the recovered record
            await manager.process_turn("a", 0, orphan.content)
        assert len(await records_for(manager, "a", 0)) == 1


async def test_recovery_start_advances_once_everything_before_it_is_indexed(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns(
            [{"session_id": "s", "turn_number": i, "content": f"Ines ran {i} km"} for i in range(3)]
        )
        start = await manager.records.recovery_start()
        assert start is not None and (start.segment, start.offset) == manager.journal.low_water()
        assert start.offset == manager.journal.end_bytes()  # nothing unindexed: recovery reads nothing on open


async def test_doctor_reports_an_unindexed_record_anywhere_and_repair_indexes_it(
    config: Config, embedder: Embedder
) -> None:
    """A store written before recovery_start existed can hold an unindexed record behind the start: doctor says
    so and --repair indexes it (it exited 1 and fixed nothing)."""
    orphan = logged_only("a", 0, "Logged long ago about the garden budget, never indexed.")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.journal.append_many([orphan])
        await manager.process_turn("b", 0, "Committed after it: the concert review.")
        manager.journal.settle([p async for p, r in manager.journal.scan() if r.turn_id == orphan.turn_id])
        await manager.process_turn("b", 1, "And the start moves past the orphan now.")
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert manager.recovered_turns == 0  # behind the recorded start: only doctor reads the whole log
        report = await manager.doctor()
        assert [d.kind for d in report.disagreements] == ["logged turns missing from SQLite"]
        assert report.disagreements[0].ids == (orphan.turn_id,)
        repaired = await manager.doctor(repair=True)
        assert repaired.consistent, repaired.disagreements
        assert repaired.repaired == ("1 logged turns indexed from the log",)
        assert await manager.records.get_turn(orphan.turn_id) is not None
        assert (await manager.retrieve("garden budget", k=1))[0].memory.source_turn_id == orphan.turn_id


async def test_a_repeated_key_in_the_log_is_shadowed_not_indexed(config: Config, embedder: Embedder) -> None:
    """An old store can hold two records for one turn key (a crash, then the turn sent again). The first indexed
    one stands; the repeat is noted as shadowed, so doctor is consistent and the key keeps one record."""
    async with MemoryManager.open(config, embedder=embedder) as manager:
        first = await manager.process_turn("s", 0, "The train to Porto leaves at 9.")
        await manager.journal.append_many([logged_only("s", 0, "The train to Porto leaves at 9.")])
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert manager.recovered_turns == 0
        assert len(await manager.records.shadowed_ids()) == 1
        assert (await manager.doctor()).consistent
        assert [t.turn_id for t in await manager.records.turns()] == [first.turn_id]


async def test_a_turn_whose_commit_failed_is_adopted_when_sent_again(config: Config, embedder: Embedder) -> None:
    """A turn cancelled after its log append (a client gone, a shutdown deadline) is in the log, not in SQLite.
    Sent again, the logged record is indexed: no second record for the key."""
    async with MemoryManager.open(config, embedder=embedder) as manager:
        for attempt in range(20):
            before = manager.journal.end_bytes()
            task = asyncio.create_task(manager.process_turn("c", attempt, f"The invoice number {attempt} is due."))
            while manager.journal.end_bytes() == before and not task.done():  # noqa: ASYNC110 (set on a thread)
                await asyncio.sleep(0)
            if task.done():
                continue
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await manager.records.get_turn((await records_for(manager, "c", attempt))[0].turn_id) is None
            with pytest.raises(DuplicateTurn):
                await manager.process_turn("c", attempt, f"The invoice number {attempt} is due.")
            logged = await records_for(manager, "c", attempt)
            assert len(logged) == 1 and await manager.records.get_turn(logged[0].turn_id) is not None
            assert (await manager.doctor()).consistent
            return
    pytest.fail("no attempt was cancelled between its log append and its commit")


async def test_kept_counts_equal_the_tables(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        turns = [
            {
                "session_id": "chat",
                "turn_number": i,
                "content": f"Ines visited Porto and ate pastel {i}",
                "namespace": ns,
            }
            for ns in ("a", "b")
            for i in range(4)
        ]
        await manager.process_turns(turns)
        await manager.retrieve("Porto", namespace="a")
        counts = (await manager.stats())["records"]
        assert counts == await manager.records.counted_by_scan()
        assert counts["sessions"] == 2  # "chat" in two namespaces is two sessions (it was counted as one)
        assert counts["turns"] == 8 and counts["retrieval_events"] == 1


async def test_sessions_in_the_graph_do_not_collide_across_namespaces(config: Config, embedder: Embedder) -> None:
    """The Session node's id was f"{namespace}/{session_id}": team + x/chat and team/x + chat were one node."""
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turn("x/chat", 0, "Ines booked the Lisbon flight.", namespace="team")
        await manager.process_turn("chat", 0, "Tom booked the Porto train.", namespace="team/x")
        await manager.flush()
        assert (await manager.stats())["graph"]["Session"] == 2
        assert (await manager.stats())["records"]["sessions"] == 2


async def test_an_old_graph_is_rebuilt_with_the_new_session_keys(
    config: Config, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turn("chat", 0, "Ines booked the Lisbon flight.", namespace="team")
        await manager.records.set_projection_format("session_keys", 1)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert "session nodes are in an older format" in caplog.text
        assert await manager.records.projection_format("session_keys") == 2
        assert (await manager.doctor()).consistent


async def test_get_does_not_wait_for_the_projector_and_shows_keywords(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.projector.stop()  # its queue never moves: get() must not wait for it
        result = await manager.process_turn("s", 0, "Biscuit the dog had surgery in Alvalade on Friday.")
        assert result.memory_id is not None and await manager.records.keywords_pending(result.memory_id)
        memory = await asyncio.wait_for(manager.get(result.memory_id), 10)
        assert "surgery" in " ".join(memory.keywords)
        manager.projector.start()
