"""Each namespace's transcript speakers, for the read path: the labels its memories open with ("Melanie: ..."),
counted as they are stored (cognition/speakers.py says which labels are speakers and what a question does with
them).

A read asks `of(namespace)`. After a write it first reads the openings of the memories stored since the last read
(a seek on the rowid: only what is new), so the next question knows a speaker from their first turns. The first
read of a process counts every memory once (100,000 openings are a few megabytes); counting a large batch runs on a
worker thread. An erase calls `drop()`: what it removed is then no longer counted, as the counts start again from
the memories that remain.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from agent_memory.cognition.salience import speaker_label
from agent_memory.cognition.speakers import named, transcript_speakers
from agent_memory.storage.records import SqliteRecords

BATCH = 5000
"""Openings read a query."""
ON_THE_LOOP = 500
"""Up to this many openings are parsed on the event loop (about a millisecond); more on a worker thread."""


class TranscriptSpeakers:
    def __init__(self, records: SqliteRecords) -> None:
        self._records = records
        self._labels: dict[str, Counter[str]] = {}  # namespace -> label -> turn memories it opens ("" for none)
        self._speakers: dict[str, tuple[str, ...]] = {}  # namespace -> its speakers, until the counts change
        self._after = 0  # turn memories up to this rowid are counted
        self._seen = -1  # records.commits when they were
        self._epoch = 0  # drop() counts up, so a read under way when it came does not keep what it read
        self._lock = asyncio.Lock()

    async def of(self, namespace: str) -> tuple[str, ...]:
        """The namespace's transcript speakers, most frequent first; () when its memories are not a transcript."""
        if self._records.commits != self._seen:
            await self._catch_up()
        if (known := self._speakers.get(namespace)) is not None:
            return known
        labels = self._labels.get(namespace)
        found = self._speakers[namespace] = transcript_speakers(labels, sum(labels.values())) if labels else ()
        return found

    async def named(self, namespace: str, question: str) -> tuple[str, ...]:
        """The namespace's speakers that `question` names (cognition/speakers.py, `named`)."""
        return named(question, await self.of(namespace)) if question.strip() else ()

    def drop(self) -> None:
        """Forget every count: an erase removed memories, and they must not be counted (nor their speakers known)."""
        self._labels.clear()
        self._speakers.clear()
        self._after, self._seen, self._epoch = 0, -1, self._epoch + 1

    async def _catch_up(self) -> None:
        async with self._lock:
            seen, epoch = self._records.commits, self._epoch
            if seen == self._seen:
                return
            while True:
                rows = await self._records.openings_after(self._after, BATCH)
                counted = await asyncio.to_thread(_count, rows) if len(rows) > ON_THE_LOOP else _count(rows)
                if epoch != self._epoch:  # dropped meanwhile: the next read counts again from the start
                    return
                for namespace, labels in counted.items():
                    self._labels.setdefault(namespace, Counter()).update(labels)
                    self._speakers.pop(namespace, None)
                if rows:
                    self._after = rows[-1][0]
                if len(rows) < BATCH:
                    break
            self._seen = seen


def _count(rows: Sequence[tuple[int, str, str]]) -> dict[str, Counter[str]]:
    counted: dict[str, Counter[str]] = {}
    for _, namespace, opening in rows:
        counted.setdefault(namespace, Counter())[speaker_label(opening)] += 1
    return counted
