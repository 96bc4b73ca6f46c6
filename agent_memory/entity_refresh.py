"""The entity refresh: when the rules that find a memory's entities change, every memory the write path made is
given the entities the new rules find in its words, while nothing is written.

A memory's entities (proper-noun phrases: cognition/extraction.py) link it to the other memories that name the same
person or place, in the graph walk and in Kuzu. The first rules took any capitalised sentence opener for a name, so
the imperatives that open an assistant's list items ("Consider", "Use") and a note's headings ("Fix:") linked
memories that share nothing. The extractor's `rules` names what it does (its version and `max_entities`); the
records keep the rules the stored entities follow (migration 0031). When they differ, this component extracts the
entities of the memories made by the write path (generation 0, text: a turn's, a chunk's, a note's words) again,
`extraction.refresh_batch` memories a transaction in memory_id order, and writes those that changed, each with an
outbox row that re-projects its graph node (its vectors do not change). Digests keep theirs: they were found in
their sources' words, and are made again as their topics grow.

It runs as the vector upgrade does (idle_work.py): once no write was committed and no question asked for
`extraction.refresh_delay`, batch after batch until someone writes or asks; `catch_up()` does all of it now. A
memory revised while its batch was extracted keeps the entities its revision wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from functools import partial

from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.config import ExtractionConfig
from agent_memory.idle_work import IdleWork
from agent_memory.storage.entity_records import EntityState, WordsRead
from agent_memory.storage.records import SqliteRecords


class EntityRefresh:
    """Gives the stored memories the entities the extractor's current rules find; see the module docstring."""

    def __init__(
        self,
        records: SqliteRecords,
        extractor: SimpleExtractor,
        config: ExtractionConfig,
        *,
        clock: Callable[[], datetime],
        notify: Callable[[], None],
        activity: Callable[[], int],
    ) -> None:
        """`notify` wakes the projector after a batch changed something (its graph rows); `activity` grows with
        every write and every question (the background work runs only while it stands still but for its own
        batches)."""
        self._records, self._extractor, self._config = records, extractor, config
        self._clock, self._notify, self._activity = clock, notify, activity
        self._lock = asyncio.Lock()  # one batch at a time, the background task's or a caller's
        self._idle = IdleWork(
            "entity refresh",
            partial(self._batch, config.refresh_batch),
            activity=activity,
            delay=config.refresh_delay.total_seconds(),
            finished=f"every memory's entities follow {extractor.rules}",
        )
        self.refreshed = 0

    async def start(self) -> None:
        """Start the background work. A store with no memory the write path made follows the current rules from its
        first write: it is marked so now, rather than have its first idle moment extract all it holds again."""
        rules = self._extractor.rules
        if (await self._records.entity_state()).rules != rules and not await self._records.words_left(""):
            await self._records.refresh_entities([], EntityState(rules, None), self._clock())
        self._idle.start()

    async def stop(self) -> None:
        await self._idle.stop()

    async def left(self) -> int:
        """How many memories are still to be looked at under the current rules."""
        state = await self._records.entity_state()
        if state.rules != self._extractor.rules:
            return await self._records.words_left("")
        return 0 if state.cursor is None else await self._records.words_left(state.cursor)

    async def catch_up(self) -> int:
        """Refresh every memory left now; returns how many were given other entities."""
        done = 0
        while True:
            changed, found = await self._batch(self._config.refresh_batch)
            done += changed
            if not found:
                return done

    async def _batch(self, size: int) -> tuple[int, int]:
        """Look at the next `size` memories: (given other entities, looked at). Looked at 0: nothing is left."""
        rules = self._extractor.rules
        async with self._lock:
            state = await self._records.entity_state()
            if state.rules == rules and state.cursor is None:
                return 0, 0
            after = state.cursor if state.rules == rules and state.cursor is not None else ""
            read = await self._records.words_after(after, size)
            found = await asyncio.to_thread(self._changed, read)
            cursor = read[-1].memory_id if len(read) == size else None
            changed = await self._records.refresh_entities(found, EntityState(rules, cursor), self._clock())
        self.refreshed += changed
        if changed:
            self._notify()
        return changed, len(read) or 1  # the last, empty batch still wrote that every memory is done

    def _changed(self, read: list[WordsRead]) -> list[tuple[WordsRead, tuple[str, ...]]]:
        """The memories whose words give other entities than those stored, with the new ones (a worker thread)."""
        found = [(words, self._extractor.entities(words.content)) for words in read]
        return [(words, entities) for words, entities in found if frozenset(entities) != words.entities]
