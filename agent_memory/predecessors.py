"""The turn a short turn is summed with, whatever order its session's turns arrive in.

The write path sums a short turn's vector with that of the turn logged just before it in its session, kept or not
(write_path.py, `_embed`); reembed, the vector upgrade and the eraser make the same sum (reembed.py,
`embed_as_written`). "Just before" is by turn number, so a turn can arrive after a higher-numbered turn of its
session (a client that retries, an import of a file in another order). Then two vectors depend on it: its own,
whose predecessor is the nearest lower turn, logged or in its batch; and that of the turn just above it, which was
summed with another turn when it was written. `Predecessors.of` finds the first and names the turns that arrived
late; `Predecessors.refresh` makes the second again after the batch commits, so every vector is what the turns
give in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from agent_memory.config import EmbeddingConfig
from agent_memory.models import LogRecord
from agent_memory.reembed import embed_as_written
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.records import SqliteRecords

LAST_TURNS = 10_000
"""Sessions whose highest-numbered logged turn is cached (cleared when full; a miss reads SQLite and the log)."""

Session = tuple[str, str]  # (namespace, session id)


@dataclass(frozen=True, slots=True)
class Found:
    """The words of the turn logged just before each of a batch's turns in its session (None for a session's
    first), and the turns of the batch below a turn logged before it."""

    words: list[str | None]
    late: list[LogRecord]


class Predecessors:
    """Finds each turn's predecessor from its batch, a cache of each session's highest turn, or SQLite and the log."""

    def __init__(self, records: SqliteRecords, journal: JsonlJournal) -> None:
        self._records, self._journal = records, journal
        self._top: dict[Session, tuple[int, str]] = {}  # each session's highest-numbered logged turn: (number, words)

    def clear(self) -> None:
        self._top.clear()

    async def of(self, records: Sequence[LogRecord]) -> Found:
        """The predecessor of each of `records` (one batch, not yet committed): the nearest lower-numbered turn of
        its session, in the batch or logged before it."""
        sessions: dict[Session, list[LogRecord]] = {}
        for record in records:
            sessions.setdefault((record.namespace, record.session_id), []).append(record)
        words: dict[int, str | None] = {}
        late: list[LogRecord] = []
        for session, mine in sessions.items():
            top = await self._highest(session)
            below: tuple[int, str] | None = None  # the batch's turn just below, as the turns go up
            for record in sorted(mine, key=lambda r: r.turn_number):
                logged = top
                if top is not None and top[0] > record.turn_number:  # a logged turn above it: it came late
                    late.append(record)
                    logged = await self._logged_before(record)
                nearest = max((t for t in (logged, below) if t is not None), default=None, key=lambda t: t[0])
                words[id(record)] = nearest[1] if nearest else None
                below = (record.turn_number, record.content)
            if len(self._top) >= LAST_TURNS:
                self._top.clear()
            self._top[session] = max((t for t in (top, below) if t is not None), key=lambda t: t[0])
        return Found([words[id(r)] for r in records], late)

    async def refresh(
        self,
        late: Sequence[LogRecord],
        batch: Sequence[LogRecord],
        *,
        embed: Callable[[Sequence[str]], Awaitable[np.ndarray]],
        model: str,
        settings: EmbeddingConfig,
        now: datetime,
    ) -> int:
        """After the batch committed: the vectors of the logged turns just above `late` ones, made again with the
        late turn as their predecessor by `embed` (`model`'s), as reembed makes them. A turn above one of the batch
        is left alone: its predecessor was found in the batch. Returns how many vectors were replaced."""
        if not late:
            return 0
        mine = {(r.namespace, r.session_id, r.turn_number) for r in batch}
        after = await self._records.vectors_after([(r.namespace, r.session_id, r.turn_number) for r in late])
        found = [(source, read) for key, source, read in after if key not in mine]
        if not found:
            return 0
        vectors = await embed_as_written(
            [source for source, _ in found], journal=self._journal, embed=embed, settings=settings
        )
        rows = [
            (source.memory_id, read, np.asarray(vector, dtype="<f4").tobytes())
            for (source, read), vector in zip(found, vectors, strict=True)
        ]
        return await self._records.replace_vectors(rows, model=model, now=now)

    async def _highest(self, session: Session) -> tuple[int, str] | None:
        cached = self._top.get(session)
        if cached is not None:
            return cached
        row = await self._records.last_turn(*session)
        return (row.turn_number, (await self._journal.read(row.position)).content) if row else None

    async def _logged_before(self, record: LogRecord) -> tuple[int, str] | None:
        row = await self._records.previous_turn(record.namespace, record.session_id, record.turn_number)
        return (row.turn_number, (await self._journal.read(row.position)).content) if row else None
