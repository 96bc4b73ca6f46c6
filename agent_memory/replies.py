"""What a context shows under its best memories: the reply, the turn logged just after a memory's own in its
session, when the save decision did not keep it and it is about the question.

The save decision lets go of a third of a conversation's turns: reactions, questions, short answers. Often such a
turn holds what the kept one leads to ("Still enjoying my soda and candy" kept, "Have you considered swapping soda
for flavored seltzer?" not; a user's chess position kept, the assistant's "28. Kg3 would be my move." not). It is
still in the log, which is the truth, so a context reads it back under the memory it follows rather than losing it
twice. Only the first `retrieval.context_replies` candidates bring one; only a short reply (up to
`retrieval.locality_max_chars`, as for the session lift: a long turn is no reaction, and would spend the budget
whole); only one that shares a content word with the question (a speaker's name aside: it opens every turn of a
transcript); and only when it fits the budget with its memory (cognition/context.py): any other reply would spend
the budget that the next memories need (docs/benchmarks.md, "Replies").

A reply is a turn no memory was ever made from: a forgotten or merged turn has a memory, an erased one has no row,
and neither comes back this way. A reply said or logged after `as_of` was not known then and is not shown.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from agent_memory.cognition.ranking import Ranked
from agent_memory.cognition.retrieval import content_words
from agent_memory.cognition.salience import speaker_label
from agent_memory.cognition.speakers import without_names
from agent_memory.models import MemoryId, Reply
from agent_memory.speakers import TranscriptSpeakers
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.records import SqliteRecords

MAX_BYTES_PER_CHAR = 6  # a character's most bytes in a log line: JSON's "\uXXXX"
RECORD_OVERHEAD = 2048  # a log line's bytes besides its content: ids, times, emotion, checksum


def about(asked: Collection[str], reply: str) -> bool:
    """Whether a reply, past its speaker's label ("Evan: ..."), holds one of the question's content words."""
    label = speaker_label(reply)
    said = reply.split(": ", 1)[1] if label and ": " in reply else reply
    return not content_words(said).isdisjoint(asked)


class Replies:
    def __init__(self, records: SqliteRecords, journal: JsonlJournal, speakers: TranscriptSpeakers) -> None:
        self._records = records
        self._journal = journal
        self._speakers = speakers

    async def of(
        self,
        ranked: Ranked,
        query: str,
        namespace: str,
        *,
        count: int,
        max_chars: int,
        as_of: datetime | None = None,
    ) -> dict[MemoryId, Reply]:
        """The reply of each of the first `count` ranked memories that has one about `query`, up to `max_chars`
        long, read from the log."""
        first = [result.memory.memory_id for result in ranked.results[:count]]
        if not first:
            return {}
        found = [
            (memory_id, turn)
            for memory_id, turn, judged in await self._records.dropped_replies(first)
            if (as_of is None or (turn.at <= as_of and judged <= as_of))  # said and logged by then
            and turn.position.length <= max_chars * MAX_BYTES_PER_CHAR + RECORD_OVERHEAD  # not read to be dropped
        ]
        if not found:
            return {}
        names = await self._speakers.named(namespace, query)
        asked = content_words(without_names(query, names))
        logged = await self._journal.read_each([turn.position for _, turn in found])
        return {  # a record erased meanwhile (a tombstone or another turn at its place) leaves its reply out
            MemoryId(memory_id): Reply(
                turn.turn_id, turn.session_id, turn.turn_number, turn.role, turn.at, record.content
            )
            for (memory_id, turn), record in zip(found, logged, strict=True)
            if record is not None
            and record.turn_id == turn.turn_id
            and len(record.content) <= max_chars
            and about(asked, record.content)
        }
