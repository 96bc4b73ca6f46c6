"""Memory, turn and record ids: version 7 UUIDs that sort in the order this process made them. No I/O but the clock
and the system's random source."""

from __future__ import annotations

import os
import threading
import time
import uuid

_ID_LOCK = threading.Lock()
_last_id = [0, 0]  # the millisecond and the 12-bit counter of the last id this process made


def new_id() -> str:
    """A time-ordered UUID (version 7 layout, RFC 9562 with its 12-bit counter): ids this process makes sort in the
    order they were made, within a millisecond too, so a tie broken by id goes to the older memory in every store.
    62 random bits keep ids from different processes apart. Valid as a Qdrant point id."""
    rand = int.from_bytes(os.urandom(10), "big")
    with _ID_LOCK:
        ms, counter = time.time_ns() // 1_000_000, rand >> 69 & 0x7FF  # a new millisecond starts low, with room
        if ms <= _last_id[0]:  # the same millisecond, or the clock stepped back: count on from the last id
            ms, counter = _last_id[0], _last_id[1] + 1
            if counter > 0xFFF:  # 4,096 ids in one millisecond: borrow the next one
                ms, counter = ms + 1, 0
        _last_id[0], _last_id[1] = ms, counter
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64
    value |= 0b10 << 62 | rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))
