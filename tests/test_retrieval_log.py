"""Retrieval records are written behind the retrievals in batches; until then retrievals see their accesses."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory import MemoryManager, TurnInput
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.models import new_id
from agent_memory.retrieval_log import RECORD_BATCH, RetrievalRecord

NOW = datetime(2026, 3, 20, 18, 0, tzinfo=UTC)
LINES = ["I prefer oat milk flat whites.", "My sister Ana lives in Porto.", "The dentist is on Friday at 9."]


async def stored(manager: MemoryManager) -> list[str]:
    turns = [TurnInput("s", n, text, at=NOW + timedelta(minutes=n)) for n, text in enumerate(LINES)]
    return [r.memory_id or "" for r in await manager.process_turns(turns)]


async def written(manager: MemoryManager) -> tuple[int, int]:
    """(retrieval events, accesses) in SQLite, read without flushing what waits."""
    events = await manager.records._fetch("SELECT count(*) FROM retrieval_events")
    accesses = await manager.records._fetch("SELECT count(*) FROM access_log")
    return int(events[0][0]), int(accesses[0][0])


async def test_records_wait_and_retrievals_count_them_across_each_write(manager: MemoryManager) -> None:
    """The same memory asked for again and again: each retrieval sees every earlier access, whether it is still
    waiting or written, across the batch boundaries; SQLite has them only once a batch is written."""
    (oat, *_) = await stored(manager)
    seen = []
    for _ in range(RECORD_BATCH + 5):
        (found,) = await manager.retrieve("oat milk", k=1)
        assert found.memory.memory_id == oat
        seen.append(found.memory.access_count)
        if len(seen) == 3:
            assert await written(manager) == (0, 0) and manager.retrieval_log.pending == 3
    assert seen == list(range(RECORD_BATCH + 5))  # none counted twice, none missed
    await asyncio.sleep(0)  # the batch's write runs as its own task
    await manager.retrieval_log.flush()
    assert await written(manager) == (RECORD_BATCH + 5, RECORD_BATCH + 5)
    memory = await manager.get(oat)
    assert memory.access_count == RECORD_BATCH + 5 and memory.last_accessed_at is not None


async def test_a_full_batch_is_written_without_being_asked(manager: MemoryManager) -> None:
    await stored(manager)
    for n in range(RECORD_BATCH):
        await manager.retrieve(f"oat milk {n}", k=2)
    for _ in range(200):
        if (await written(manager))[0] == RECORD_BATCH:
            break
        await asyncio.sleep(0.01)
    assert (await written(manager))[0] == RECORD_BATCH and manager.retrieval_log.pending == 0


async def test_records_are_written_after_the_delay(config: Config, embedder: Embedder) -> None:
    quick = config.model_copy(
        update={"retrieval": config.retrieval.model_copy(update={"record_delay": timedelta(milliseconds=50)})}
    )
    async with MemoryManager.open(quick, embedder=embedder) as manager:
        await stored(manager)
        await manager.retrieve("oat milk", k=2)
        assert await written(manager) == (0, 0)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if (await written(manager))[0]:
                break
        assert await written(manager) == (1, 2)


async def test_what_reads_the_records_writes_them_first(manager: MemoryManager) -> None:
    """stats(), settle() and open_gaps() see every retrieval before them; a turn's save decision sees the gaps."""
    (oat, *_) = await stored(manager)
    await manager.retrieve("oat milk", k=1)
    assert (await manager.stats())["records"]["retrieval_events"] == 1
    await manager.retrieve("When does the ferry to Ibiza leave?", k=1)  # nothing relevant: a gap
    assert manager.retrieval_log.pending == 1
    assert [g.query for g in await manager.open_gaps()] == ["When does the ferry to Ibiza leave?"]
    await manager.retrieve("oat milk", k=1)  # no gap: a turn does not wait for this one
    await manager.process_turn("s", 10, "The ferry to Ibiza leaves at 7 from the north pier.", at=NOW)
    assert manager.retrieval_log.pending == 1
    await manager.settle()
    assert manager.retrieval_log.pending == 0 and (await written(manager))[0] == 3
    assert (await manager.get(oat)).access_count == 2


async def test_overlapping_retrievals_and_writes_count_every_access_once(manager: MemoryManager) -> None:
    """Retrievals running together while writes are forced between them: every returned memory's final count is
    the number of times it was returned, and no retrieval saw a memory counted more often than it had been."""
    await stored(manager)
    returned: Counter[str] = Counter()
    wrong: list[tuple[str, int, int, int]] = []

    async def ask(n: int) -> None:
        before = returned.copy()  # returned, and so recorded, before this retrieval began
        results = await manager.retrieve(["oat milk", "Ana in Porto", "dentist Friday"][n % 3], k=2)
        for found in results:
            seen, memory_id = found.memory.access_count, found.memory.memory_id
            if not before[memory_id] <= seen <= returned[memory_id]:  # missed one, or counted one twice
                wrong.append((memory_id, before[memory_id], seen, returned[memory_id]))
        for found in results:
            returned[found.memory.memory_id] += 1
        if n % 3 == 0:
            await manager.settle()

    await asyncio.gather(*(ask(n) for n in range(150)))
    assert not wrong
    await manager.settle()
    counts = {m: (await manager.get(m)).access_count for m in returned}
    assert counts == dict(returned) and sum(counts.values()) == 300


async def test_a_record_that_cannot_be_written_loses_only_itself(
    manager: MemoryManager, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose one record cannot be written (its id is taken: the unique key fails the batch whole) is
    written record by record: the others land, that one is logged."""
    (oat, ana, _) = await stored(manager)
    log = manager.retrieval_log
    taken = new_id()
    for retrieval_id, results in ((taken, [(oat, 0.9)]), (taken, [(ana, 0.5)]), (new_id(), [(ana, 0.8)])):
        log.add(RetrievalRecord(retrieval_id, "default", "q", NOW, 1, tuple(results)))
    with caplog.at_level(logging.ERROR, logger="agent_memory.retrieval_log"):
        await log.flush()
    assert await written(manager) == (2, 2) and log.pending == 0
    assert [r.getMessage() for r in caplog.records] == [
        "the retrieval of 'q' could not be recorded (access, event, gap)"
    ]
    assert (await manager.get(oat)).access_count == 1 and (await manager.get(ana)).access_count == 1


async def test_closing_writes_what_waits(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        (oat, *_) = await stored(manager)
        await manager.retrieve("oat milk", k=1)
        assert manager.retrieval_log.pending == 1
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert (await manager.get(oat)).access_count == 1


async def test_a_batch_being_written_still_counts_until_it_commits(manager: MemoryManager) -> None:
    """Taken for a write, a batch is neither waiting nor in the rows until its commit: retrievals meanwhile must
    still see its accesses. The write is held before its statements by holding the writer's lock."""
    (oat, *_) = await stored(manager)
    await manager.retrieve("oat milk", k=1)
    await manager.settle()  # nothing left for the projector, which would want the writer's lock
    await manager.retrieve("oat milk", k=1)
    log = manager.retrieval_log
    async with manager.records._write_lock:
        writing = asyncio.create_task(log.flush())
        await asyncio.sleep(0.05)
        assert log.pending == 0 and not writing.done()
        (found,) = await manager.retrieve("oat milk", k=1)
        assert found.memory.access_count == 2
    await writing
    assert (await manager.get(oat)).access_count == 3


async def test_a_read_counts_each_batch_once_whether_it_began_before_its_commit_or_after(
    manager: MemoryManager,
) -> None:
    """Rows read before a batch's commit do not count it: it is laid over them, and stays in memory for them
    after its commit. Rows read after it count it: nothing is laid over them. Nobody waits for the other."""
    (oat, *_) = await stored(manager)
    await manager.retrieve("oat milk", k=1)
    log = manager.retrieval_log
    with log.reading():  # a retrieval under way
        ((before, counted),) = await manager.records.rows_for_ranking([oat])
        await log.flush()  # committed while that retrieval still reads
        assert before[oat].access_count == 0 and log.overlay(before, counted)[oat].access_count == 1
        ((after, now),) = await manager.records.rows_for_ranking([oat])
        assert now == counted + 1 and after[oat].access_count == 1
        assert log.overlay(after, now)[oat].access_count == 1
    (found,) = await manager.retrieve("oat milk", k=1)
    assert found.memory.access_count == 1
