"""The records behind re-embedding (reembed.py): what each text vector was made from, the staged new vectors, the
other vectors a text model made (retrieval gaps' questions, digest topics' sums), and the swap, in one transaction;
and behind the vector upgrade (vector_upgrade.py): one model's vectors found a batch at a time, replaced in place."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.errors import StorageError
from agent_memory.models import LogPosition
from agent_memory.storage.rows import ts

# Every memory with a text vector, with what the write path embedded it from: its own turn's place in the log (to
# tell an unchanged turn from one revised or compressed since) and the place of the turn logged just before it in
# its session, kept or not. Notes and the chunks of a long turn stand alone, as they did when written.
_TARGETS = """
WITH around AS (
    SELECT turn_id, segment, offset, length,
           LAG(segment) OVER w AS before_segment, LAG(offset) OVER w AS before_offset,
           LAG(length) OVER w AS before_length
    FROM turns WINDOW w AS (PARTITION BY namespace, session_id ORDER BY turn_number)
)
SELECT m.memory_id, m.revision, m.content,
       EXISTS (SELECT 1 FROM notes AS n WHERE n.memory_id = m.memory_id)
           OR EXISTS (SELECT 1 FROM memory_chunks AS c WHERE c.memory_id = m.memory_id) AS alone,
       a.segment, a.offset, a.length, a.before_segment, a.before_offset, a.before_length
FROM memories AS m LEFT JOIN around AS a ON a.turn_id = m.source_turn_id
WHERE m.embedding IS NOT NULL AND length(m.embedding) > 0
ORDER BY m.rowid
"""


# The same for the oldest `limit` memories whose vector `model` made (vector_upgrade.py), through the index on the
# model's name; each memory's turn before comes from the session's unique (namespace, session_id, turn_number).
_MADE_BY = """
SELECT m.memory_id, m.revision, m.content,
       EXISTS (SELECT 1 FROM notes AS n WHERE n.memory_id = m.memory_id)
           OR EXISTS (SELECT 1 FROM memory_chunks AS c WHERE c.memory_id = m.memory_id) AS alone,
       t.segment, t.offset, t.length, b.segment, b.offset, b.length, m.embedding
FROM (SELECT rowid, memory_id, revision, content, source_turn_id, embedding
      FROM memories INDEXED BY memories_embedding_model
      WHERE embedding_model = :model AND embedding IS NOT NULL AND length(embedding) > 0
      ORDER BY rowid LIMIT :limit) AS m
LEFT JOIN turns AS t ON t.turn_id = m.source_turn_id
LEFT JOIN turns AS b ON b.rowid = (
    SELECT p.rowid FROM turns AS p
    WHERE p.namespace = t.namespace AND p.session_id = t.session_id AND p.turn_number < t.turn_number
    ORDER BY p.turn_number DESC LIMIT 1
)
ORDER BY m.rowid
"""


# The text memories of the turn logged just above a given one in its session (`vectors_after`), with what the
# write path embeds them from: that turn's place and the given turn's, as in _TARGETS.
_AFTER = """
SELECT m.memory_id, m.revision, m.content,
       EXISTS (SELECT 1 FROM notes AS n WHERE n.memory_id = m.memory_id)
           OR EXISTS (SELECT 1 FROM memory_chunks AS c WHERE c.memory_id = m.memory_id) AS alone,
       t.segment, t.offset, t.length, b.segment, b.offset, b.length, t.turn_number, m.embedding
FROM turns AS b
JOIN turns AS t ON t.rowid = (
    SELECT n.rowid FROM turns AS n
    WHERE n.namespace = b.namespace AND n.session_id = b.session_id AND n.turn_number > b.turn_number
    ORDER BY n.turn_number LIMIT 1
)
JOIN memories AS m ON m.source_turn_id = t.turn_id
WHERE b.namespace = ? AND b.session_id = ? AND b.turn_number = ?
  AND m.generation = 0 AND m.media = 'text' AND m.embedding IS NOT NULL AND length(m.embedding) > 0
ORDER BY m.rowid
"""


@dataclass(frozen=True, slots=True)
class VectorSource:
    """One memory's text vector and what it was made from."""

    memory_id: str
    revision: int
    content: str
    alone: bool  # a note or a chunk: embedded without a neighbour's words
    turn: LogPosition | None  # its own turn in the log, when it came from one
    before: LogPosition | None  # the turn logged just before that one in its session


class ReembedQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

    async def vector_sources(self) -> list[VectorSource]:
        """Every memory that holds a text vector, oldest first."""
        return [_source(r) for r in await self._fetch(_TARGETS)]

    async def vectors_made_by(self, model: str, limit: int) -> list[tuple[VectorSource, bytes]]:
        """The oldest `limit` memories whose text vector `model` made: what each was made from, and the vector."""
        return [(_source(r), bytes(r[10])) for r in await self._fetch(_MADE_BY, {"model": model, "limit": limit})]

    async def vectors_made_by_count(self, model: str) -> int:
        """How many memories hold a text vector `model` made."""
        rows = await self._fetch(
            "SELECT count(*) FROM memories INDEXED BY memories_embedding_model WHERE embedding_model = ? "
            "AND embedding IS NOT NULL AND length(embedding) > 0",
            (model,),
        )
        return int(rows[0][0])

    async def replace_vectors(self, rows: Sequence[tuple[str, bytes, bytes]], *, model: str, now: datetime) -> int:
        """Each (memory id, the vector read, its new float32 vector made by `model`): the new one in place, and the
        memory's point queued for the projector, in one transaction. A memory whose vector is no longer the one
        read keeps what it has: revised, or embedded again by an erase without a turn's words (a vector made from
        the old state must not bring those words back). Returns how many were replaced."""
        replaced = 0
        async with self.transaction() as db:
            for memory_id, read, blob in rows:
                cursor = await db.execute(
                    "UPDATE memories SET embedding = ?, embedding_model = ? WHERE memory_id = ? AND embedding = ?",
                    (blob, model, memory_id, read),
                )
                if cursor.rowcount:
                    replaced += 1
                    await db.execute(
                        "INSERT INTO outbox (op, memory_id, created_at, scope) "
                        "VALUES ('upsert_memory', ?, ?, 'vectors')",
                        (memory_id, ts(now)),
                    )
        return replaced

    async def vector_followers(self, erased_turns: set[str], erased_memories: set[str]) -> list[VectorSource]:
        """The memories whose vector may hold an erased turn's: a short turn is embedded with the turn logged just
        before it (write_path.py, `_before`). So after each erased turn, the memories of the first later turn that
        holds any (the turns between hold none to embed again; when that turn is not the next one, its vector is
        made again as it was: a superset, for stores written before that rule, when a turn took the session's
        latest memory); each comes with the turn that now precedes it (`before`: the nearest earlier turn not
        erased), so its vector can be made as if the erased turn had never been said. Erased memories, notes, chunks and
        derived memories are left out."""
        if not erased_turns:
            return []
        listed = sorted(erased_turns)
        sessions: set[tuple[str, str]] = set()
        for start in range(0, len(listed), 500):
            chunk = listed[start : start + 500]
            rows = await self._fetch(
                f"SELECT DISTINCT namespace, session_id FROM turns WHERE turn_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            sessions.update((str(r[0]), str(r[1])) for r in rows)
        found: list[VectorSource] = []
        for namespace, session_id in sorted(sessions):
            turns = await self._fetch(
                "SELECT turn_id, segment, offset, length FROM turns WHERE namespace = ? AND session_id = ? "
                "ORDER BY turn_number",
                (namespace, session_id),
            )
            held = await self._fetch(
                "SELECT m.source_turn_id, m.memory_id, m.revision, m.content, "
                "EXISTS (SELECT 1 FROM notes AS n WHERE n.memory_id = m.memory_id) "
                "OR EXISTS (SELECT 1 FROM memory_chunks AS c WHERE c.memory_id = m.memory_id) "
                "FROM memories AS m JOIN turns AS t ON t.turn_id = m.source_turn_id "
                "WHERE t.namespace = ? AND t.session_id = ? AND m.generation = 0 AND m.media = 'text' "
                "AND length(m.embedding) > 0",
                (namespace, session_id),
            )
            memories: dict[str, list[sqlite3.Row]] = {}
            for row in held:
                if str(row[1]) not in erased_memories:
                    memories.setdefault(str(row[0]), []).append(row)
            before: LogPosition | None = None
            pending = False
            for turn_id, segment, offset, length in turns:
                if turn_id in erased_turns:
                    pending = True
                    continue
                here = LogPosition(int(segment), int(offset), int(length))
                if pending and turn_id in memories:
                    found += [
                        VectorSource(str(m[1]), int(m[2]), str(m[3]), bool(m[4]), here, before)
                        for m in memories[turn_id]
                        if not m[4]
                    ]
                    pending = False
                before = here
        return found

    async def vectors_after(
        self, turns: Sequence[tuple[str, str, int]]
    ) -> list[tuple[tuple[str, str, int], VectorSource, bytes]]:
        """For each (namespace, session id, turn number) of a logged turn: the text memories of the turn logged just
        above it in its session, each with that turn's key, what its vector is made from (`before`: the given turn)
        and the vector held now. Derived memories, notes and chunks (they stand alone) are left out."""
        found: list[tuple[tuple[str, str, int], VectorSource, bytes]] = []
        for key in turns:
            rows = await self._fetch(_AFTER, key)
            found += [((key[0], key[1], int(r[10])), _source(r), bytes(r[11])) for r in rows if not r[3]]
        return found

    async def vector_models(self) -> set[str]:
        """The names of the models that made the stored text vectors."""
        rows = await self._fetch(
            "SELECT DISTINCT coalesce(embedding_model, '') FROM memories "
            "WHERE embedding IS NOT NULL AND length(embedding) > 0"
        )
        return {str(r[0]) for r in rows}

    async def staged_vectors(self, model: str) -> dict[str, int]:
        """memory id -> revision of the vectors staged by `model`; rows staged by another model are dropped."""
        async with self.transaction(projected=False) as db:
            await db.execute("DELETE FROM reembedding WHERE model != ?", (model,))
        return {str(r[0]): int(r[1]) for r in await self._fetch("SELECT memory_id, revision FROM reembedding")}

    async def stage_vectors(self, rows: Sequence[tuple[str, int, bytes]], model: str) -> None:
        """Keep (memory id, revision, float32 vector) rows made by `model` until the swap, in one transaction."""
        async with self.transaction(projected=False) as db:
            await db.executemany(
                "INSERT INTO reembedding (memory_id, revision, model, vector) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (memory_id) DO UPDATE SET revision = excluded.revision, model = excluded.model, "
                "vector = excluded.vector",
                [(memory_id, revision, model, blob) for memory_id, revision, blob in rows],
            )

    async def gap_questions(self) -> list[tuple[str, str]]:
        """(gap id, question) of every retrieval gap that holds a vector of its question."""
        rows = await self._fetch("SELECT gap_id, query FROM retrieval_gaps WHERE vector IS NOT NULL ORDER BY rowid")
        return [(str(r[0]), str(r[1])) for r in rows]

    async def topic_sentences(self) -> dict[int, list[str]]:
        """topic id -> its statements' sentences: a digest topic's total is the sum of their unit vectors."""
        rows = await self._fetch(
            "SELECT topic_id, sentence FROM digest_statements ORDER BY topic_id, memory_id, position"
        )
        found: dict[int, list[str]] = {}
        for topic_id, sentence in rows:
            found.setdefault(int(topic_id), []).append(str(sentence))
        return found

    async def swap_vectors(
        self, model: str, *, gaps: Mapping[str, bytes], topics: Mapping[int, bytes], expected: Mapping[str, int]
    ) -> int:
        """Move every staged vector into its memory, with `model` as the model that made it, the gaps' and topics'
        new vectors in place, the context vectors dropped (made again by the next model that computes them), and
        the staging table emptied: one transaction, so a store holds one model's vectors or the other's. `expected`
        is memory id -> revision of the memories that must be staged; if any is missing or stale, nothing is
        changed. Returns how many memories were swapped."""
        async with self.transaction(projected=False) as db:
            staged = {
                str(r[0]): int(r[1])
                for r in await db.execute_fetchall(
                    "SELECT memory_id, revision FROM reembedding WHERE model = ?", (model,)
                )
            }
            wrong = [m for m, revision in expected.items() if staged.get(m) != revision]
            if wrong:
                raise StorageError(
                    f"Re-embedding is not complete: {len(wrong)} memories have no current vector staged "
                    f"(first {wrong[0]}); nothing was changed"
                )
            cursor = await db.execute(
                "UPDATE memories SET embedding = s.vector, embedding_model = s.model FROM reembedding AS s "
                "WHERE memories.memory_id = s.memory_id AND memories.revision = s.revision AND s.model = ?",
                (model,),
            )
            swapped = cursor.rowcount
            await db.executemany(
                "UPDATE retrieval_gaps SET vector = ? WHERE gap_id = ?", [(v, g) for g, v in gaps.items()]
            )
            await db.executemany(
                "UPDATE digest_topics SET total = ? WHERE topic_id = ?", [(v, t) for t, v in topics.items()]
            )
            await db.execute("DELETE FROM context_vectors")
            await db.execute("DELETE FROM reembedding")
        return int(swapped)


def _source(row: Sequence[Any]) -> VectorSource:
    """A VectorSource from a row of _TARGETS or _MADE_BY."""
    return VectorSource(
        str(row[0]),
        int(row[1]),
        str(row[2]),
        bool(row[3]),
        LogPosition(int(row[4]), int(row[5]), int(row[6])) if row[4] is not None else None,
        LogPosition(int(row[7]), int(row[8]), int(row[9])) if row[7] is not None else None,
    )
