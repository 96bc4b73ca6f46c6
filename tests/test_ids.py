"""Memory ids (ids.new_id): version 7 UUIDs that sort in the order they were made, within a millisecond too."""

from __future__ import annotations

import threading
import time
import uuid

from agent_memory.ids import new_id


def test_ids_made_in_one_millisecond_sort_in_the_order_they_were_made() -> None:
    ids = [new_id() for _ in range(20_000)]  # many per millisecond, and past the 4,096 a millisecond's counter holds
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    parsed = [uuid.UUID(i) for i in ids]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in parsed)
    first_ms, last_ms = parsed[0].int >> 80, parsed[-1].int >> 80
    assert abs(first_ms - time.time_ns() // 1_000_000) < 60_000 and last_ms >= first_ms


def test_ids_made_on_many_threads_are_unique_and_each_threads_are_in_order() -> None:
    made: dict[int, list[str]] = {}

    def make(n: int) -> None:
        made[n] = [new_id() for _ in range(2_000)]

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for ids in made.values() for i in ids]
    assert len(set(every)) == len(every) == 8_000
    assert all(ids == sorted(ids) for ids in made.values())
