"""runtime/turns.py's `Reads`: a recording behind an answer gives way to a memory read in flight, never for long."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from agent_memory.runtime.turns import Reads

NONE = timedelta(0)


async def test_a_recording_waits_for_the_read_in_flight_to_end() -> None:
    reads, order = Reads(), []

    async def read() -> None:
        with reads.reading():
            await asyncio.sleep(0.05)
            order.append("read")

    async def record() -> None:
        await reads.give_way(first=NONE, most=timedelta(seconds=5))
        order.append("record")

    reading = asyncio.create_task(read())
    await asyncio.sleep(0)  # the read is in flight
    await asyncio.gather(record(), reading)
    assert order == ["read", "record"]


async def test_a_read_that_starts_within_the_first_wait_is_given_way_to() -> None:
    """The next request arrives just after the answer went back: the recording, started first, still waits."""
    reads, order = Reads(), []

    async def record() -> None:
        await reads.give_way(first=timedelta(milliseconds=30), most=timedelta(seconds=5))
        order.append("record")

    async def read() -> None:
        await asyncio.sleep(0.005)
        with reads.reading():
            await asyncio.sleep(0.06)
            order.append("read")

    await asyncio.gather(record(), read())
    assert order == ["read", "record"]


async def test_a_recording_is_held_up_at_most_so_long_and_without_reads_not_at_all() -> None:
    reads = Reads()
    started = time.perf_counter()
    await reads.give_way(first=NONE, most=timedelta(seconds=5))
    assert time.perf_counter() - started < 0.05  # nothing in flight: no wait
    with reads.reading(), reads.reading():
        started = time.perf_counter()
        await reads.give_way(first=NONE, most=timedelta(milliseconds=50))
        waited = time.perf_counter() - started
    assert 0.045 <= waited < 1.0  # two reads never ending: it went on after `most`
    await reads.give_way(first=NONE, most=timedelta(seconds=5))  # both ended: idle again
