"""Each namespace's transcript speakers, for the read path: the labels its memories open with ("Melanie: ..."),
counted as they are stored (cognition/speakers.py says which labels are speakers and what a question does with
them).

A read asks `of(namespace)`. After a write it first counts the memories stored since the last count (a seek on the
rowid: only what is new), so the next question knows a speaker from their first turns. SQLite groups the memories
by their opening, so counting is one scan and a few hundred rows to read; a store counts them all when it opens,
while the text model loads (`warm`). An erase calls `drop()`: what it removed is then no longer counted, as the
counts start again from the memories that remain. A memory is counted as it was stored: an update of its words
(revisions.py) does not move its count, which the 5% share of a label absorbs, and the next open counts it anew.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from agent_memory.cognition.salience import speaker_label
from agent_memory.cognition.speakers import named, transcript_speakers
from agent_memory.errors import StorageError
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)

ON_THE_LOOP = 500
"""Up to this many distinct openings are read for labels on the event loop (about a millisecond); more (a first
count of a large store: 1,924 openings in LongMemEval's 25,847 memories) on a worker thread."""


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

    async def warm(self) -> None:
        """Count every memory's label now (a store opening counts them while the text model loads), so the first
        question does not wait for it. A failure is left to the first question, which counts again."""
        try:
            await self._catch_up()
        except StorageError as exc:
            log.warning("the transcript speakers were not counted: %s", exc)

    async def _catch_up(self) -> None:
        async with self._lock:
            seen, epoch = self._records.commits, self._epoch
            if seen == self._seen:
                return
            openings = await self._records.openings_after(self._after)
            labelled = _labels(openings) if len(openings) <= ON_THE_LOOP else await asyncio.to_thread(_labels, openings)
            if epoch != self._epoch:  # dropped meanwhile: the next read counts again from the start
                return
            for namespace, label, memories, last in labelled:
                self._labels.setdefault(namespace, Counter())[label] += memories
                self._speakers.pop(namespace, None)
                self._after = max(self._after, last)
            self._seen = seen


def _labels(openings: list[tuple[str, str, int, int]]) -> list[tuple[str, str, int, int]]:
    """Each opening's speaker label ("" for none), about 2 µs an opening."""
    return [(namespace, speaker_label(opening), memories, last) for namespace, opening, memories, last in openings]
