"""Revisions in SQLite: a change to a memory checks the revision the caller read, keeps the revision it replaces in
`memory_revisions`, and queues the projections, all in one transaction (migration 0019). Mixed into
`SqliteRecords` (records.py), which owns the connections; revisions.py is the component that uses it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiosqlite

from agent_memory.errors import InvalidInput, MemoryNotCurrent, MemoryNotFound, RevisionConflict
from agent_memory.models import LogPosition, Memory, MemoryId, MemoryStatus, Revision
from agent_memory.storage.inserts import enqueue, insert_memory, replace_entities
from agent_memory.storage.rows import dt, ts

REVISION_COLUMNS = "memory_id, revision, content, status, began_at, ended_at, change, agent, reason"
at_epoch = datetime.min.replace(tzinfo=UTC)
LOGGED = ""
"""A kept revision's content when its words are its turn's as logged (a compressed memory's revision before the
cut): `get(memory_id, original=True)` reads them back from the log."""


@dataclass(frozen=True, slots=True)
class CompressibleRow:
    """What compression reads of a memory it may cut."""

    rowid: int
    memory_id: str
    revision: int
    content: str
    keywords: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Change:
    """Who changes a memory, when and why, and the revision they read."""

    memory_id: str
    expected_revision: int
    at: datetime
    agent: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class NewText:
    """A memory's new words with what is derived from them before the transaction: its vector and entities."""

    content: str
    embedding: bytes | None
    embedding_model: str
    entities: tuple[str, ...]


class RevisionQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

    async def revise(self, change: Change, text: NewText) -> None:
        """Change a memory's words in place: the revision it had is kept, its vector, entities and keywords are
        replaced, and the projections are queued. Raises RevisionConflict (nothing changed) when the memory is not
        at `change.expected_revision`."""
        async with self.transaction() as db:
            current = await _current(db, change)
            await _keep_revision(db, change, current, "update")
            await db.execute(  # the agent's words are the memory now: its length is theirs (logged_chars)
                "UPDATE memories SET content = ?, keywords = '[]', embedding = ?, embedding_model = ?, "
                "revision = revision + 1, revised_at = ?, logged_chars = NULL WHERE memory_id = ?",
                (text.content, text.embedding, text.embedding_model, ts(change.at), change.memory_id),
            )
            await replace_entities(db, change.memory_id, text.entities)
            await db.execute("INSERT OR IGNORE INTO pending_keywords (memory_id) VALUES (?)", (change.memory_id,))
            await enqueue(db, change.memory_id, change.at)

    async def replace(self, change: Change, new: Memory, text: NewText) -> None:
        """Supersede a memory by `new`: the old one keeps its words, becomes `superseded` with `superseded_by`, and
        a SUPERSEDES link goes from the new one to it. RevisionConflict as for `revise`."""
        async with self.transaction() as db:
            current = await _current(db, change)
            await insert_memory(db, new, text.embedding, text.embedding_model)
            await db.execute("INSERT OR IGNORE INTO pending_keywords (memory_id) VALUES (?)", (new.memory_id,))
            await enqueue(db, new.memory_id, change.at)
            await _keep_revision(db, change, current, "supersede")
            await db.execute(
                "UPDATE memories SET status = 'superseded', superseded_by = ?, revision = revision + 1, "
                "revised_at = ? WHERE memory_id = ?",
                (new.memory_id, ts(change.at), change.memory_id),
            )
            await db.execute(
                "INSERT INTO memory_links (source_id, target_id, relation, weight, created_at, reason) "
                "VALUES (?, ?, 'SUPERSEDES', 1, ?, ?)",
                (new.memory_id, change.memory_id, ts(change.at), change.reason or ""),
            )
            await db.execute(  # a note's successor is the same kind of note (notes.py): a decision replaced is one
                "INSERT INTO notes (memory_id, namespace, kind, tags, source, agent, written_at) "
                "SELECT ?, namespace, kind, tags, source, coalesce(?, agent), ? FROM notes WHERE memory_id = ?",
                (new.memory_id, change.agent, ts(change.at), change.memory_id),
            )
            await db.execute(
                "INSERT INTO outbox (op, memory_id, created_at, scope) VALUES ('upsert_memory', ?, ?, 'payload')",
                (change.memory_id, ts(change.at)),
            )

    async def set_forgotten(self, change: Change, *, forgotten: bool) -> None:
        """Forget an active memory (it must be at `change.expected_revision`), or restore a forgotten one (any
        revision): a status change, kept in the history, projected to the vectors' payload."""
        async with self.transaction() as db:
            if forgotten:
                current = await _current(db, change)
            else:
                current = await _forgotten(db, change.memory_id)
                change = Change(change.memory_id, current[0], change.at, change.agent, change.reason)
            await _keep_revision(db, change, current, "forget" if forgotten else "restore")
            await db.execute(
                "UPDATE memories SET status = ?, revision = revision + 1, revised_at = ? WHERE memory_id = ?",
                ("forgotten" if forgotten else "active", ts(change.at), change.memory_id),
            )
            await db.execute(
                "INSERT INTO outbox (op, memory_id, created_at, scope) VALUES ('upsert_memory', ?, ?, 'payload')",
                (change.memory_id, ts(change.at)),
            )

    async def forgettable(
        self,
        *,
        namespace: str | None,
        roles: Sequence[str],
        before: datetime | None,
        every: bool,
        after_rowid: int,
        limit: int,
    ) -> list[tuple[int, str, str, str, datetime]]:
        """(rowid, memory id, content, role, said at) of active turn memories a forgetting policy may take:
        generation 0, text, not kept by the fast path, from a turn in `roles` or said before `before` (or, with
        `every`, all of them, for a policy judged on the words), in rowid order from `after_rowid`."""
        marks = ",".join("?" * len(roles))
        by_role = f"t.role IN ({marks})" if roles else "0"
        rows = await self._fetch(
            "SELECT m.rowid, m.memory_id, m.content, t.role, t.at FROM memories m "
            "JOIN turns t ON t.turn_id = m.source_turn_id "
            "WHERE m.rowid > ? AND m.status = 'active' AND m.generation = 0 AND m.media = 'text' AND m.fast_path = 0 "
            f"AND (? IS NULL OR m.namespace = ?) AND ({by_role} OR (? IS NOT NULL AND t.at < ?) OR ?) "
            "ORDER BY m.rowid LIMIT ?",
            (after_rowid, namespace, namespace, *roles, ts(before), ts(before), int(every), limit),
        )
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), dt(r[4]) or at_epoch) for r in rows]

    async def forget_many(self, memory_ids: Sequence[str], *, at: datetime, agent: str, reason: str) -> int:
        """Forget these memories (those still active) in one transaction, each keeping its revision; returns how
        many were forgotten."""
        if not memory_ids:
            return 0
        marks = ",".join("?" * len(memory_ids))
        async with self.transaction() as db:
            active = [
                r[0]
                for r in await db.execute_fetchall(
                    f"SELECT memory_id FROM memories WHERE memory_id IN ({marks}) AND status = 'active'",
                    list(memory_ids),
                )
            ]
            await db.executemany(
                f"INSERT INTO memory_revisions ({REVISION_COLUMNS}) SELECT memory_id, revision, content, status, "
                "coalesce(revised_at, created_at), ?, 'forget', ?, ? FROM memories WHERE memory_id = ?",
                [(ts(at), agent, reason, i) for i in active],
            )
            await db.executemany(
                "UPDATE memories SET status = 'forgotten', revision = revision + 1, revised_at = ? WHERE memory_id = ?",
                [(ts(at), i) for i in active],
            )
            await db.executemany(
                "INSERT INTO outbox (op, memory_id, created_at, scope) VALUES ('upsert_memory', ?, ?, 'payload')",
                [(i, ts(at)) for i in active],
            )
        return len(active)

    async def compressible(
        self,
        *,
        namespace: str | None,
        tiers: Sequence[str],
        said_before: datetime,
        min_chars: int,
        after_rowid: int,
        limit: int,
    ) -> list[CompressibleRow]:
        """Active turn memories compression may cut, in rowid order from `after_rowid`: generation 0, text, not kept
        by the fast path, in one of `tiers`, from a turn said before `said_before`, longer than `min_chars`, and
        holding their turn's words as logged (never updated, so never compressed before either)."""
        marks = ",".join("?" * len(tiers))
        rows = await self._fetch(
            "SELECT m.rowid, m.memory_id, m.revision, m.content, m.keywords FROM memories m "
            "JOIN turns t ON t.turn_id = m.source_turn_id "
            "WHERE m.rowid > ? AND m.status = 'active' AND m.generation = 0 AND m.media = 'text' AND m.fast_path = 0 "
            f"AND m.tier IN ({marks}) AND t.at < ? AND length(m.content) > ? AND (? IS NULL OR m.namespace = ?) "
            "AND NOT EXISTS (SELECT 1 FROM memory_revisions r WHERE r.memory_id = m.memory_id AND r.change = 'update') "
            "ORDER BY m.rowid LIMIT ?",
            (after_rowid, *tiers, ts(said_before), min_chars, namespace, namespace, limit),
        )
        return [
            CompressibleRow(int(r[0]), str(r[1]), int(r[2]), str(r[3]), tuple(json.loads(r[4] or "[]"))) for r in rows
        ]

    async def compress_many(
        self, cuts: Sequence[tuple[str, int, NewText]], *, at: datetime, agent: str, reason: str
    ) -> list[str]:
        """Give each (memory id, revision read, new text) its cut words in one transaction, as `revise` does (vector,
        entities and keywords replaced, projections queued), where the memory is still active at the revision read
        (others are left alone). The revision kept says LOGGED instead of the words: they are the turn's, in the log,
        and SQLite does not hold them twice; the memory keeps their length (`logged_chars`). Returns the ids of the
        memories cut."""
        done: list[str] = []
        async with self.transaction() as db:
            for memory_id, revision, text in cuts:
                change = Change(memory_id, revision, at, agent, reason)
                try:
                    current = await _current(db, change)
                except (RevisionConflict, MemoryNotCurrent, MemoryNotFound):
                    continue
                await _keep_revision(db, change, (current[0], LOGGED, *current[2:]), "update")
                await db.execute(  # the words it had are the turn's as logged: their length is kept (logged_chars)
                    "UPDATE memories SET logged_chars = length(content), content = ?, keywords = '[]', embedding = ?, "
                    "embedding_model = ?, revision = revision + 1, revised_at = ? WHERE memory_id = ?",
                    (text.content, text.embedding, text.embedding_model, ts(at), memory_id),
                )
                await replace_entities(db, memory_id, text.entities)
                await db.execute("INSERT OR IGNORE INTO pending_keywords (memory_id) VALUES (?)", (memory_id,))
                await enqueue(db, memory_id, at)
                done.append(memory_id)
        return done

    async def uncounted_cuts(self, *, after_rowid: int, limit: int) -> list[tuple[int, str, LogPosition]]:
        """(rowid, memory id, its turn's place in the log) of memories compression cut without keeping their logged
        length (cut before migration 0032), in rowid order from `after_rowid`: their words are still the cut (no
        update since), and they are not erased."""
        rows = await self._fetch(
            "SELECT m.rowid, m.memory_id, t.segment, t.offset, t.length FROM memory_revisions r "
            "JOIN memories m ON m.memory_id = r.memory_id JOIN turns t ON t.turn_id = m.source_turn_id "
            f"WHERE r.change = 'update' AND r.content = '{LOGGED}' AND m.rowid > ? AND m.logged_chars IS NULL "
            "AND m.status <> 'erased' AND NOT EXISTS (SELECT 1 FROM memory_revisions l WHERE l.memory_id = r.memory_id "
            "AND l.change = 'update' AND l.revision > r.revision) ORDER BY m.rowid LIMIT ?",
            (after_rowid, limit),
        )
        return [(int(r[0]), str(r[1]), LogPosition(int(r[2]), int(r[3]), int(r[4]))) for r in rows]

    async def set_logged_chars(self, lengths: Mapping[str, int]) -> None:
        """Keep each memory's logged length (`uncounted_cuts`' memories, their turns read back from the log)."""
        async with self.transaction(projected=False) as db:
            await db.executemany(
                "UPDATE memories SET logged_chars = ? WHERE memory_id = ? AND logged_chars IS NULL",
                [(length, memory_id) for memory_id, length in lengths.items()],
            )

    async def revisions(self, memory_id: str) -> list[Revision]:
        """Every earlier revision of the memory, oldest first; MemoryNotFound for an unknown id."""
        rows = await self._fetch(
            f"SELECT {REVISION_COLUMNS} FROM memory_revisions WHERE memory_id = ? ORDER BY revision", (memory_id,)
        )
        if not rows and not await self._fetch("SELECT 1 FROM memories WHERE memory_id = ?", (memory_id,)):
            raise MemoryNotFound(memory_id)
        return [_revision(r) for r in rows]

    async def revisions_at(self, memory_ids: Sequence[str], at: datetime) -> dict[str, Revision]:
        """For each of these memories changed after `at`, the earlier revision that was current at `at`."""
        found: dict[str, Revision] = {}
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = await self._fetch(  # a compressed revision's words are its turn's: the memory now says them too
                f"SELECT {REVISION_COLUMNS} FROM memory_revisions WHERE memory_id IN ({marks}) "
                "AND began_at <= ? AND ended_at > ? AND content != ''",
                [*chunk, ts(at), ts(at)],
            )
            found |= {str(r[0]): _revision(r) for r in rows}
        return found

    async def superseded_after(self, namespace: str, at: datetime, *, limit: int) -> list[tuple[str, bytes]]:
        """Memories made by `at` and superseded after it, most recently superseded first, with their vectors: what
        a search as of `at` must weigh beside the active ones."""
        rows = await self._fetch(
            "SELECT memory_id, embedding FROM memories WHERE namespace = ? AND status = 'superseded' "
            "AND revised_at > ? AND created_at <= ? AND embedding IS NOT NULL ORDER BY revised_at DESC LIMIT ?",
            (namespace, ts(at), ts(at), limit),
        )
        return [(str(r[0]), bytes(r[1])) for r in rows]

    async def revision_counts(self, memory_ids: Sequence[str]) -> dict[str, int]:
        """How many earlier revisions each of these memories has (absent: none)."""
        marks = ",".join("?" * len(memory_ids))
        rows = await self._fetch(
            f"SELECT memory_id, count(*) FROM memory_revisions WHERE memory_id IN ({marks}) GROUP BY memory_id",
            list(memory_ids),
        )
        return {str(r[0]): int(r[1]) for r in rows}

    async def supersede_chain(self, memory_id: str) -> list[MemoryId]:
        """The memories this one was superseded or merged into, in order, up to the current one."""
        rows = await self._fetch(
            "WITH RECURSIVE chain(id, next, depth) AS (SELECT memory_id, superseded_by, 0 FROM memories "
            "WHERE memory_id = ? UNION ALL SELECT m.memory_id, m.superseded_by, c.depth + 1 FROM chain c "
            "JOIN memories m ON m.memory_id = c.next WHERE c.depth < 64) SELECT id FROM chain ORDER BY depth",
            (memory_id,),
        )
        return [MemoryId(r[0]) for r in rows[1:]]


async def _current(db: aiosqlite.Connection, change: Change) -> tuple[int, str, str, str]:
    """The memory's (revision, content, status, began_at), read inside the change's transaction: the check and the
    change are one step, so of concurrent changes naming the same revision exactly one wins."""
    rows = list(
        await db.execute_fetchall(
            "SELECT revision, content, status, superseded_by, coalesce(revised_at, created_at) FROM memories "
            "WHERE memory_id = ?",
            (change.memory_id,),
        )
    )
    if not rows:
        raise MemoryNotFound(change.memory_id)
    revision, content, status, replaced_by, began_at = rows[0]
    if revision != change.expected_revision:
        raise RevisionConflict(change.memory_id, change.expected_revision, int(revision))
    if status != MemoryStatus.ACTIVE.value:
        raise MemoryNotCurrent(change.memory_id, str(status), replaced_by)
    return int(revision), str(content), str(status), str(began_at)


async def _forgotten(db: aiosqlite.Connection, memory_id: str) -> tuple[int, str, str, str]:
    rows = list(
        await db.execute_fetchall(
            "SELECT revision, content, status, coalesce(revised_at, created_at) FROM memories WHERE memory_id = ?",
            (memory_id,),
        )
    )
    if not rows:
        raise MemoryNotFound(memory_id)
    revision, content, status, began_at = rows[0]
    if status != MemoryStatus.FORGOTTEN.value:
        raise InvalidInput(f"Memory {memory_id!r} is {status}, not forgotten: there is nothing to restore")
    return int(revision), str(content), str(status), str(began_at)


async def _keep_revision(
    db: aiosqlite.Connection, change: Change, current: tuple[int, str, str, str], kind: str
) -> None:
    revision, content, status, began_at = current
    await db.execute(
        f"INSERT INTO memory_revisions ({REVISION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (change.memory_id, revision, content, status, began_at, ts(change.at), kind, change.agent, change.reason),
    )


def _revision(r: sqlite3.Row | tuple[Any, ...]) -> Revision:
    began, ended = dt(r[4]), dt(r[5])
    assert began is not None and ended is not None
    return Revision(MemoryId(r[0]), int(r[1]), r[2], MemoryStatus(r[3]), began, ended, r[6], r[7], r[8])
