"""Recovery: the log is the truth for what was said, so every logged record SQLite lacks is indexed.

A turn is appended to the log, then judged and committed to SQLite. A process that dies in between leaves a
logged record SQLite lacks; so does a commit that failed (the store was full, the call was cancelled). With
concurrent writers the records commit out of log order, so what is missing may lie anywhere behind the last
committed offset: each commit therefore records where recovery must start (the journal's low water: the earliest
record appended and not yet committed), and on open recovery reads the log from there. `doctor --repair` reads it
all.

A turn key (namespace, session, turn number) maps to one record. A record that repeats an indexed key (written by
a store from before this rule: a crash, then the same turn sent again) is noted as shadowed and never indexed. In
a running process, a turn whose commit failed after its append is an orphan: the same key sent again indexes the
record already logged instead of logging a second one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from agent_memory.models import LogPosition, LogRecord
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
TurnKey = tuple[str, str, int]
Index = Callable[[Sequence[LogRecord], Sequence[LogPosition]], Awaitable[object]]
CHUNK = 2048


def key_of(record: LogRecord) -> TurnKey:
    return (record.namespace, record.session_id, record.turn_number)


@dataclass(frozen=True, slots=True)
class Recovered:
    indexed: int
    shadowed: int


class LogRecovery:
    """Finds the logged records SQLite lacks and hands them to `index` (the manager's judge-and-commit path)."""

    def __init__(
        self, journal: JsonlJournal, records: SqliteRecords, *, index: Index, clock: Callable[[], datetime]
    ) -> None:
        self._journal, self._records, self._index, self._clock = journal, records, index, clock
        self._orphans: dict[TurnKey, tuple[LogPosition, LogRecord]] = {}

    async def recover(self, *, whole_log: bool = False) -> Recovered:
        """Index every logged record SQLite lacks, from the recorded start (or the first record, `whole_log`)."""
        start = None if whole_log else await self._records.recovery_start()
        fresh, repeats = await self._unindexed(start)
        if repeats:
            log.warning("recovery: %d log records repeat a turn already indexed; the indexed ones stand", len(repeats))
            await self._records.shadow(repeats, now=self._clock())
        if fresh:
            log.warning("recovery: indexing %d turns found in the log but not in SQLite", len(fresh))
            await self._index([r for _, r in fresh], [p for p, _ in fresh])
        return Recovered(len(fresh), len(repeats))

    async def _unindexed(
        self, start: LogPosition | None
    ) -> tuple[list[tuple[LogPosition, LogRecord]], list[tuple[LogPosition, LogRecord]]]:
        shadowed = await self._records.shadowed_ids()
        fresh: list[tuple[LogPosition, LogRecord]] = []
        repeats: list[tuple[LogPosition, LogRecord]] = []
        keys: set[TurnKey] = set()
        chunk: list[tuple[LogPosition, LogRecord]] = []

        async def sort_out() -> None:
            known = await self._records.known_turn_ids(r.turn_id for _, r in chunk)
            unknown = [(p, r) for p, r in chunk if r.turn_id not in known and r.turn_id not in shadowed]
            stored = await self._records.stored_turns([key_of(r) for _, r in unknown])  # one query a chunk
            for position, record in unknown:
                key = key_of(record)
                (repeats if key in keys or key in stored else fresh).append((position, record))
                keys.add(key)
            chunk.clear()

        async for item in self._journal.scan(start):
            chunk.append(item)
            if len(chunk) >= CHUNK:
                await sort_out()
        await sort_out()
        return fresh, repeats

    def orphaned(self, records: Iterable[LogRecord], positions: Iterable[LogPosition]) -> None:
        """These records were logged but their commit failed: the same keys sent again index them."""
        for record, position in zip(records, positions, strict=True):
            self._orphans[key_of(record)] = (position, record)

    async def adopt(self, keys: Iterable[TurnKey]) -> bool:
        """Index the orphans among `keys`; returns whether there were any (the keys are then taken)."""
        found = {key: self._orphans.pop(key) for key in keys if key in self._orphans}
        if not found:
            return False
        log.warning("indexing %d logged turns whose commit had failed, sent again", len(found))
        try:
            await self._index([r for _, r in found.values()], [p for p, _ in found.values()])
        except BaseException:
            self._orphans.update(found)
            raise
        self._journal.settle(p for p, _ in found.values())
        return True
