"""The SQL of an erase (eraser.py): what a request takes with it, the intent row, and the purge.

A component over the records' connections, not one more mixin: the eraser reads everything it touches here.

What an erase takes (`resolve`): the turns named (by id, by session, or a whole namespace) and every memory made
from one of them (generation 0: the turn's text and images); the memories named, and for a derived one (a merge,
a digest) everything it was made from, since its words are theirs; then, upwards, every merged memory made from
something erased (erased too, its other sources made active again) and every digest that quotes it (rewritten
without those statements by the eraser, or erased when too few are left). Log records that repeat an erased turn's
key (shadowed repeats) go with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent_memory.errors import MemoryErased, MemoryNotFound, TurnNotFound
from agent_memory.models import LogPosition
from agent_memory.storage.inserts import replace_entities
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.rows import ts


@dataclass
class Closure:
    """Everything one erase takes, resolved once and kept in its intent row."""

    memory_ids: set[str] = field(default_factory=set)
    turn_ids: set[str] = field(default_factory=set)
    places: list[tuple[LogPosition, str]] = field(default_factory=list)
    """Log records to replace by tombstones: (position, the turn id the record holds)."""
    digests: set[str] = field(default_factory=set)
    """Digest memories that quote an erased memory: rewritten without it."""
    restored: set[str] = field(default_factory=set)
    """Sources of an erased merged memory that are not erased themselves: made active again."""
    images: set[str] = field(default_factory=set)
    """media_path of the erased image memories."""
    facts: set[str] = field(default_factory=set)
    """Facts that go whatever their sources (a whole namespace's); others go when every source they name does."""
    rebuild_graph: bool = False
    """Whether an entity goes with them (no other memory names it): Kuzu keeps a deleted node's strings in its
    pages, so the graph is rebuilt into new files."""

    def as_row(self) -> dict[str, Any]:
        return {
            "memory_ids": json.dumps(sorted(self.memory_ids)),
            "turn_ids": json.dumps(sorted(self.turn_ids)),
            "places": json.dumps([[p.segment, p.offset, p.length, t] for p, t in self.places]),
            "digests": json.dumps(sorted(self.digests)),
            "restored": json.dumps(sorted(self.restored)),
            "images": json.dumps(sorted(self.images)),
            "facts": json.dumps(sorted(self.facts)),
            "rebuild_graph": int(self.rebuild_graph),
        }

    @classmethod
    def from_row(cls, row: Any) -> Closure:
        return cls(
            set(json.loads(row["memory_ids"])),
            set(json.loads(row["turn_ids"])),
            [(LogPosition(s, o, n), t) for s, o, n, t in json.loads(row["places"])],
            set(json.loads(row["digests"])),
            set(json.loads(row["restored"])),
            set(json.loads(row["images"])),
            set(json.loads(row["facts"])),
            bool(row["rebuild_graph"]),
        )


@dataclass(frozen=True)
class DigestRewrite:
    """A digest after its erased statements are gone: new words, or None when too few are left (then erased)."""

    memory_id: str
    topic_id: int
    content: str | None
    keywords: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    embedding: bytes | None = None
    total: bytes | None = None
    size: int = 0
    latest: tuple[str | None, str | None, int | None, str | None] = (None, None, None, None)
    """(source turn, session, turn number, event time) of its latest remaining statement."""


def _marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


class ErasureRecords:
    def __init__(self, records: SqliteRecords) -> None:
        self._records = records

    async def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self._records._fetch(sql, params)

    async def _in(self, sql: str, ids: Iterable[str], *extra: Any) -> list[Any]:
        """`sql` with `{in}` filled by one placeholder per id (in chunks SQLite accepts)."""
        found: list[Any] = []
        listed = sorted(set(ids))
        for start in range(0, len(listed), 500):
            chunk = listed[start : start + 500]
            found += await self._rows(sql.format(marks=_marks(chunk)), [*extra, *chunk])
        return found

    # ----- what an erase takes ------------------------------------------------------------------------------

    async def resolve(
        self,
        namespace: str,
        *,
        memory_ids: Sequence[str],
        turn_ids: Sequence[str],
        session_id: str | None,
        whole_namespace: bool,
    ) -> Closure:
        closure = Closure()
        await self._named_turns(closure, namespace, turn_ids, session_id, whole_namespace)
        await self._named_memories(closure, namespace, memory_ids)
        while True:  # downwards: a derived memory's sources, a turn's memories, a memory's turn
            before = (len(closure.memory_ids), len(closure.turn_ids))
            await self._sources(closure)
            if (len(closure.memory_ids), len(closure.turn_ids)) == before:
                break
        await self._derived(closure)
        closure.places = await self._places(closure.turn_ids)
        rows = await self._in(
            "SELECT media_path FROM memories WHERE media_path IS NOT NULL AND memory_id IN ({marks})",
            closure.memory_ids,
        )
        closure.images = {str(r[0]) for r in rows}
        named = await self._in(
            "SELECT DISTINCT entity FROM memory_entities WHERE memory_id IN ({marks})", closure.memory_ids
        )
        for (entity,) in named:
            others = await self._rows("SELECT memory_id FROM memory_entities WHERE entity = ?", (entity,))
            if not {str(r[0]) for r in others} <= closure.memory_ids:
                continue
            closure.rebuild_graph = True
            break
        return closure

    async def _named_turns(
        self, closure: Closure, namespace: str, turn_ids: Sequence[str], session_id: str | None, whole: bool
    ) -> None:
        if turn_ids:
            rows = await self._in(
                "SELECT turn_id FROM turns WHERE namespace = ? AND turn_id IN ({marks})", turn_ids, namespace
            )
            found = {str(r[0]) for r in rows}
            if missing := sorted(set(turn_ids) - found):
                raise TurnNotFound(missing[0])
            closure.turn_ids |= found
        if session_id is not None:
            rows = await self._rows(
                "SELECT turn_id FROM turns WHERE namespace = ? AND session_id = ?", (namespace, session_id)
            )
            closure.turn_ids |= {str(r[0]) for r in rows}
        if whole:
            rows = await self._rows("SELECT turn_id FROM turns WHERE namespace = ?", (namespace,))
            closure.turn_ids |= {str(r[0]) for r in rows}
            rows = await self._rows("SELECT memory_id FROM memories WHERE namespace = ?", (namespace,))
            closure.memory_ids |= {str(r[0]) for r in rows}
            rows = await self._rows("SELECT fact_id FROM facts WHERE namespace = ?", (namespace,))
            closure.facts |= {str(r[0]) for r in rows}

    async def _named_memories(self, closure: Closure, namespace: str, memory_ids: Sequence[str]) -> None:
        if not memory_ids:
            return
        rows = await self._in(
            "SELECT memory_id FROM memories WHERE namespace = ? AND memory_id IN ({marks})", memory_ids, namespace
        )
        found = {str(r[0]) for r in rows}
        for missing in sorted(set(memory_ids) - found):
            erased = await self.erased(missing)
            if erased is not None:
                raise MemoryErased(missing, *erased)
            raise MemoryNotFound(missing)
        closure.memory_ids |= found

    async def _sources(self, closure: Closure) -> None:
        rows = await self._in(
            "SELECT memory_id FROM memories WHERE generation = 0 AND source_turn_id IN ({marks})", closure.turn_ids
        )
        closure.memory_ids |= {str(r[0]) for r in rows}
        rows = await self._in(
            "SELECT memory_id, generation, source_turn_id FROM memories WHERE memory_id IN ({marks})",
            closure.memory_ids,
        )
        derived = [str(r[0]) for r in rows if r[1] > 0]
        closure.turn_ids |= {str(r[2]) for r in rows if r[1] == 0 and r[2] is not None}
        links = await self._in(
            "SELECT target_id FROM memory_links WHERE relation = 'EVOLVED_FROM' AND source_id IN ({marks})", derived
        )
        closure.memory_ids |= {str(r[0]) for r in links}

    async def _derived(self, closure: Closure) -> None:
        """Upwards: merged memories made from an erased one are erased (their other sources restored); digests
        that quote one are rewritten."""
        digests = {
            str(r[0]) for r in await self._rows("SELECT memory_id FROM digest_topics WHERE memory_id IS NOT NULL")
        }
        frontier = set(closure.memory_ids)
        while frontier:
            rows = await self._in(
                "SELECT DISTINCT source_id FROM memory_links WHERE relation = 'EVOLVED_FROM' AND target_id IN ({marks})",
                frontier,
            )
            above = {str(r[0]) for r in rows} - closure.memory_ids
            closure.digests |= above & digests
            merged = above - digests
            closure.memory_ids |= merged
            frontier = merged
        closure.digests -= closure.memory_ids
        rows = await self._in(
            "SELECT memory_id FROM memories WHERE status = 'merged' AND superseded_by IN ({marks})", closure.memory_ids
        )
        closure.restored = {str(r[0]) for r in rows} - closure.memory_ids

    async def _places(self, turn_ids: set[str]) -> list[tuple[LogPosition, str]]:
        rows = await self._in(
            "SELECT turn_id, segment, offset, length, namespace, session_id, turn_number FROM turns "
            "WHERE turn_id IN ({marks})",
            turn_ids,
        )
        places = [(LogPosition(r[1], r[2], r[3]), str(r[0])) for r in rows]
        keys = {(r[4], r[5], r[6]) for r in rows}
        if keys:
            shadowed = await self._rows(
                "SELECT turn_id, segment, offset, length, namespace, session_id, turn_number FROM shadowed_records"
            )
            places += [(LogPosition(r[1], r[2], r[3]), str(r[0])) for r in shadowed if (r[4], r[5], r[6]) in keys]
        return sorted(places, key=lambda p: (p[0].segment, p[0].offset))

    async def texts(self, closure: Closure) -> list[str]:
        """The words an erase removes, as SQLite holds them (the log's are read by the eraser)."""
        ids = closure.memory_ids
        rows = await self._in("SELECT content FROM memories WHERE memory_id IN ({marks})", ids)
        rows += await self._in("SELECT content FROM memory_revisions WHERE memory_id IN ({marks})", ids)
        rows += await self._in("SELECT sentence FROM digest_statements WHERE memory_id IN ({marks})", ids)
        rows += await self._in("SELECT value FROM fact_decisions WHERE turn_id IN ({marks})", closure.turn_ids)
        facts = await self._facts_of(closure)
        return [str(r[0]) for r in rows] + [value for _, value, left in facts if not left]

    async def _facts_of(self, closure: Closure) -> list[tuple[str, str, list[str]]]:
        """Facts with an erased source: (fact id, value, the sources left)."""
        erased = closure.turn_ids | closure.memory_ids
        found: list[tuple[str, str, list[str]]] = []
        for fact_id, value, sources in await self._rows("SELECT fact_id, value, sources FROM facts"):
            listed = json.loads(sources)
            if str(fact_id) in closure.facts:
                found.append((str(fact_id), str(value), []))
            elif erased.intersection(listed):
                found.append((str(fact_id), str(value), [s for s in listed if s not in erased]))
        return found

    async def erased(self, memory_id: str) -> tuple[str, str] | None:
        """(erase id, when) of the erase that took this memory, if one did."""
        rows = await self._rows(
            "SELECT erase_id, requested_at FROM erasures, json_each(erasures.memory_ids) WHERE json_each.value = ?",
            (memory_id,),
        )
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    # ----- the intent and the purge ---------------------------------------------------------------------------

    async def write_intent(
        self,
        erase_id: str,
        namespace: str,
        reason: str,
        selector: dict[str, Any],
        closure: Closure,
        texts: bytes,
        now: datetime,
    ) -> None:
        row = closure.as_row()
        async with self._records.transaction(projected=False) as db:
            await db.execute(
                "INSERT INTO erasures (erase_id, namespace, requested_at, reason, selector, memory_ids, turn_ids, places, "
                "digests, restored, images, facts, rebuild_graph, texts, state) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'intent')",
                (
                    erase_id, namespace, ts(now), reason, json.dumps(selector), row["memory_ids"], row["turn_ids"],
                    row["places"], row["digests"], row["restored"], row["images"], row["facts"], row["rebuild_graph"], texts,
                ),
            )  # fmt: skip

    async def unfinished(self) -> list[dict[str, Any]]:
        """The intent rows of erases a crash cut short, oldest first, by column name."""
        names = ("erase_id", "state", "texts", "memory_ids", "turn_ids", "places", "digests", "restored", "images",
                 "facts", "rebuild_graph")  # fmt: skip
        rows = await self._rows(f"SELECT {', '.join(names)} FROM erasures WHERE state != 'done' ORDER BY requested_at")
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def purge(
        self,
        erase_id: str,
        closure: Closure,
        rewrites: Sequence[DigestRewrite],
        now: datetime,
        vectors: Mapping[str, tuple[int, bytes]] | None = None,
    ) -> None:
        """Every row that holds an erased word, in one transaction (idempotent: a second run finds nothing left).
        `vectors`: memory id -> (revision, float32 vector) of the memories embedded again without an erased turn
        (`SqliteRecords.vector_followers`); one changed since keeps its vector."""
        facts = await self._facts_of(closure)
        compactions = await self._rows("SELECT compaction_id, merged_into, source_ids FROM compaction_history")
        erased_ids = closure.memory_ids
        dropped_compactions = [
            int(c)
            for c, merged, sources in compactions
            if merged in erased_ids or erased_ids.intersection(json.loads(sources))
        ]
        ids, turns = sorted(erased_ids), sorted(closure.turn_ids)
        async with self._records.transaction() as db:

            async def each(sql: str, values: Sequence[Any], *extra: Any) -> None:
                for start in range(0, len(values), 500):
                    chunk = list(values[start : start + 500])
                    await db.execute(sql.format(marks=_marks(chunk)), [*extra, *chunk])

            await each("UPDATE memories SET status = 'active', superseded_by = NULL, revision = revision + 1 "
                       "WHERE status = 'merged' AND memory_id IN ({marks})", sorted(closure.restored))  # fmt: skip
            await each("UPDATE memories SET superseded_by = NULL WHERE superseded_by IN ({marks})", ids)
            await each("UPDATE memories SET source_turn_id = NULL WHERE source_turn_id IN ({marks})", turns)
            for rewrite in rewrites:
                await self._rewrite_digest(db, rewrite, now)
            await each("DELETE FROM digest_statements WHERE memory_id IN ({marks})", ids)
            await each("UPDATE digest_topics SET memory_id = NULL WHERE memory_id IN ({marks})", ids)
            await db.execute("DELETE FROM digest_topics WHERE topic_id NOT IN (SELECT topic_id FROM digest_statements)")
            await each("DELETE FROM compaction_history WHERE compaction_id IN ({marks})", dropped_compactions)
            await each("DELETE FROM save_decisions WHERE turn_id IN ({marks})", turns)
            await each("DELETE FROM save_decisions WHERE memory_id IN ({marks})", ids)
            await each("DELETE FROM fact_decisions WHERE turn_id IN ({marks})", turns)
            await each("DELETE FROM fact_decisions WHERE fact_id IN ({marks})", sorted(closure.facts))
            for fact_id, _, left in facts:
                if left:
                    await db.execute("UPDATE facts SET sources = ? WHERE fact_id = ?", (json.dumps(left), fact_id))
                else:
                    await db.execute("DELETE FROM facts WHERE fact_id = ?", (fact_id,))
            await each("DELETE FROM memories WHERE memory_id IN ({marks})", ids)  # FTS, links, entities, revisions
            await db.execute("DELETE FROM reembedding")  # a staged vector may be made from what goes: reembed again
            await each("DELETE FROM shadowed_records WHERE turn_id IN ({marks})", [t for _, t in closure.places])
            await each("DELETE FROM turns WHERE turn_id IN ({marks})", turns)
            neighbours = await _context_around(db, turns)  # their context vectors were read from an erased turn
            followed = (vectors or {}).items()
            await db.executemany(
                "UPDATE memories SET embedding = ? WHERE memory_id = ? AND revision = ?",
                [(blob, memory_id, revision) for memory_id, (revision, blob) in followed],
            )
            touched = sorted(erased_ids | closure.restored | closure.digests | neighbours | {m for m, _ in followed})
            await db.executemany(
                "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)",
                [(memory_id, ts(now)) for memory_id in touched],
            )  # the projector finds the erased ones gone, and deletes their points and nodes
            await db.execute("UPDATE erasures SET state = 'purged' WHERE erase_id = ?", (erase_id,))

    async def _rewrite_digest(self, db: Any, rewrite: DigestRewrite, now: datetime) -> None:
        if rewrite.content is None:
            return  # erased with the rest: the caller put it among the memories to delete
        turn, session, number, event_at = rewrite.latest
        await db.execute(
            "UPDATE memories SET content = ?, keywords = ?, embedding = ?, revision = revision + 1, revised_at = ?, "
            "source_turn_id = ?, session_id = ?, turn_number = ?, event_at = coalesce(?, event_at) WHERE memory_id = ?",
            (
                rewrite.content, json.dumps(list(rewrite.keywords)), rewrite.embedding, ts(now), turn, session, number,
                event_at, rewrite.memory_id,
            ),
        )  # fmt: skip
        await replace_entities(db, rewrite.memory_id, rewrite.entities)
        await db.execute(
            "UPDATE digest_topics SET total = coalesce(?, total), size = ?, updated_at = ? WHERE topic_id = ?",
            (rewrite.total, rewrite.size, ts(now), rewrite.topic_id),
        )

    async def digest_topic(self, memory_id: str) -> tuple[int, str] | None:
        rows = await self._rows("SELECT topic_id, speaker FROM digest_topics WHERE memory_id = ?", (memory_id,))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    async def quoting(self, table: str, column: str) -> list[tuple[str, str]]:
        """(rowid, text) of a table's free-text column, for the retrieval records that may quote erased words."""
        return [(str(r[0]), str(r[1])) for r in await self._rows(f"SELECT rowid, {column} FROM {table}")]

    async def drop_quoting(self, table: str, rowids: Sequence[str]) -> None:
        if not rowids:
            return
        async with self._records.transaction(projected=False) as db:
            for start in range(0, len(rowids), 500):
                chunk = list(rowids[start : start + 500])
                await db.execute(f"DELETE FROM {table} WHERE rowid IN ({_marks(chunk)})", chunk)

    async def live_texts(self, closure: Closure) -> list[str]:
        """The words the store keeps on purpose: a window of an erased text found here is not distinctive. Rows of
        an erased memory are left out even if a fault left them behind, so the scan would find them, not hide them."""
        erased = closure.memory_ids
        rows = await self._rows("SELECT memory_id, content FROM memories")
        rows += await self._rows("SELECT memory_id, content FROM memory_revisions")
        rows += await self._rows("SELECT memory_id, sentence FROM digest_statements")
        texts = [str(r[1]) for r in rows if str(r[0]) not in erased]
        facts = await self._rows("SELECT subject || ' ' || attribute || ' ' || value, sources, fact_id FROM facts")
        gone = closure.turn_ids | erased
        return texts + [
            str(r[0])
            for r in facts
            if str(r[2]) not in closure.facts and not gone.issuperset(json.loads(r[1]) or ["-"])
        ]

    async def finish(self, erase_id: str, proof: dict[str, Any], now: datetime) -> None:
        async with self._records.transaction(projected=False) as db:
            await db.execute(
                "UPDATE erasures SET state = 'done', texts = NULL, proof = ?, finished_at = ? WHERE erase_id = ?",
                (json.dumps(proof), ts(now), erase_id),
            )

    async def compact_files(self, *, vacuum: bool) -> None:
        """FTS5 segments merged (no segment keeps a deleted term), then the WAL copied back and cut to zero; with
        `vacuum`, the whole file rewritten first. secure_delete is on for every connection (records._configure)."""
        async with self._records.transaction(projected=False) as db:
            await db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
        async with self._records._write_lock:
            writer = self._records._writer
            if vacuum:
                await writer.execute("VACUUM")
            await writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def digest_sources(self, topic_id: int, erased: set[str]) -> list[Any]:
        """The statements a topic keeps once the erased memories' are gone, with their memories' place and time."""
        rows = await self._rows(
            "SELECT s.memory_id, s.at, s.sentence, m.source_turn_id, m.session_id, m.turn_number, m.event_at "
            "FROM digest_statements s JOIN memories m ON m.memory_id = s.memory_id WHERE s.topic_id = ? "
            "ORDER BY s.at, s.memory_id, s.position",
            (topic_id,),
        )
        return [r for r in rows if str(r[0]) not in erased]


async def _context_around(db: Any, turn_ids: Sequence[str]) -> set[str]:
    """Delete the context vectors computed with one of `turn_ids` as a neighbour (their basis names it: see
    context_records.py) and return their memories, whose points the projector then drops; the context job computes
    them again from the turns that are left."""
    found: set[str] = set()
    for turn_id in turn_ids:
        rows = await db.execute_fetchall(
            "SELECT memory_id FROM context_vectors WHERE basis LIKE ? OR basis LIKE ?",
            (f"%|{turn_id}|%", f"%|{turn_id}"),
        )
        found.update(str(r[0]) for r in rows)
    if found:
        ids = sorted(found)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            await db.execute(f"DELETE FROM context_vectors WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk)
    return found
