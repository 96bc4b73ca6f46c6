"""The read path's queries over the records: search layers, structural graph hops, retrieval events and gaps.

Mixed into `SqliteRecords` (records.py), which owns the connections; kept apart so each file stays readable.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_memory.errors import ClosedError, StorageError
from agent_memory.models import Memory, TurnRow
from agent_memory.projection_models import GraphStep
from agent_memory.storage.keyword_projection import KeywordProjection, KeywordQuery, Matches
from agent_memory.storage.rows import MEMORY_COLUMNS, memory_row, turn_row

KEYWORD_FLOOR = 1e-3
"""A BM25 score below this matched only words most memories carry (FTS5 gives such a word an IDF of 1e-6: a
speaker's name in a small transcript). Beside a hit that scores, such a hit is noise and gets no rank in the
keyword layer; when no hit scores (a store of one or two memories), they are all the layer has, and stay."""

COMMON_MIN_DOCS = 2000
"""The keyword layer never calls a word common while it is held by this many memories or fewer: scoring that many
costs FTS5 about 4 ms (~2 µs a memory), a price worth an exact ranking. On the 10k synthetic store a floor of 500
changed the layer's top 10 for 31 of 162 queries; 2,000 changes none there, and 8 of 163 at 100k."""

OVERFETCH = 2
"""The keyword layer ranks the best OVERFETCH x its cut among all memories first, and only then joins them with
their rows to drop other namespaces and inactive memories: ranking before the join halves the layer's time (10k
memories: 7.1 -> 3.3 ms p50; 100k: 44 -> 21 ms). When that leaves too few hits, the full join runs."""

_BEST_MATCHES = (
    "WITH best AS MATERIALIZED (SELECT rowid AS id, bm25(memories_fts) AS rank FROM memories_fts "
    "WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?) "
    "SELECT m.memory_id, best.rank, m.keywords, (SELECT count(*) FROM best) FROM best "
    "JOIN memories m ON m.rowid = best.id WHERE m.namespace = ? AND m.status = 'active' ORDER BY best.rank LIMIT ?"
)
_COMMON_CUT = "WITH bound(cut) AS (SELECT max(:least, CAST(:share * coalesce((SELECT max(rowid) FROM memories), 0) AS INTEGER)))"  # max(rowid) stands for the number of memories: an index seek, where count(*) reads them all
OWNERS_SQL = (  # for each (segment, offset): the turn's own memory, then each memory it was merged into
    "WITH RECURSIVE hits(segment, offset) AS (SELECT value ->> 0, value ->> 1 FROM json_each(:positions)), "
    "up(segment, offset, id, status, next, depth) AS ("
    "SELECT t.segment, t.offset, m.memory_id, m.status, m.superseded_by, 0 FROM hits h CROSS "
    "JOIN turns t ON t.segment = h.segment AND t.offset = h.offset "
    "JOIN memories m ON m.source_turn_id = t.turn_id "
    "WHERE t.namespace = :namespace AND m.generation = 0 AND m.media = 'text' "
    "UNION ALL SELECT up.segment, up.offset, p.memory_id, p.status, p.superseded_by, up.depth + 1 FROM up "
    "JOIN memories p ON p.memory_id = up.next WHERE up.status = 'merged' AND up.depth < 16) "
    "SELECT segment, offset, id, depth FROM up"
)
_ALL_MATCHES = (
    "SELECT m.memory_id, bm25(memories_fts) AS rank, m.keywords FROM memories_fts "
    "JOIN memories m ON m.rowid = memories_fts.rowid "
    "WHERE memories_fts MATCH ? AND m.namespace = ? AND m.status = 'active' ORDER BY rank LIMIT ?"
)


WALK_WITH = (
    "WITH RECURSIVE seeds(id) AS (SELECT value FROM json_each(:seeds)), "
    "walk(seed, id, hops, relation) AS (SELECT id, id, 0, '' FROM seeds "
    "UNION SELECT w.seed, l.target_id, w.hops + 1, l.relation FROM walk w "
    "JOIN memory_links l ON l.source_id = w.id WHERE w.hops < :depth AND l.relation <> 'SUPERSEDES' "
    "UNION SELECT w.seed, l.source_id, w.hops + 1, l.relation FROM walk w "
    "JOIN memory_links l ON l.target_id = w.id WHERE w.hops < :depth AND l.relation <> 'SUPERSEDES'), "
    "rare(entity) AS (SELECT e.entity FROM (SELECT DISTINCT entity FROM memory_entities "
    "WHERE memory_id IN (SELECT id FROM seeds)) AS e WHERE (SELECT count(*) FROM (SELECT 1 FROM memory_entities AS x "
    "WHERE x.entity = e.entity AND x.namespace = :namespace LIMIT :fanout + 1)) <= :fanout) "
)
"""The walk's common parts. An entity is rare when at most `fanout` memories of the walked namespace mention it
(another namespace's memories change nothing here), and counting stops at `fanout + 1`: counting every mention of a
speaker's name took 13.6 ms at 100k memories, the bounded count 0.12 ms."""
LAST_BATCH = "(SELECT last FROM retrieval_batches)"  # read in the same statement as rows: the same snapshot
_STEPS_WITH_ROWS = (  # the steps in their order, the first step to each memory with that memory's row
    "SELECT s.kind, s.id, s.seed, s.hops, s.relation, "
    + MEMORY_COLUMNS
    + f", {LAST_BATCH} FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY ord) AS nth FROM "
    "(SELECT *, row_number() OVER () AS ord FROM steps)) AS s "
    "LEFT JOIN memories ON memories.memory_id = s.id AND s.nth = 1 ORDER BY s.ord"
)
WALK_SQL = {  # (kind, memory, seed, hops, relation); each part's plan starts from the seeds' primary keys
    "NEXT": "SELECT 'NEXT', m.memory_id, s.memory_id, abs(m.turn_number - s.turn_number), NULL FROM memories s "
    "JOIN memories m ON m.namespace = s.namespace AND m.session_id = s.session_id "
    "AND m.turn_number BETWEEN s.turn_number - :depth AND s.turn_number + :depth "
    "WHERE s.memory_id IN (SELECT id FROM seeds) AND m.memory_id <> s.memory_id AND m.status = 'active'",
    "ATTACHED": "SELECT 'ATTACHED', o.memory_id, s.memory_id, 1, NULL FROM memories s "
    "JOIN memories o ON o.source_turn_id = s.source_turn_id WHERE s.memory_id IN (SELECT id FROM seeds) "
    "AND o.media <> s.media AND o.generation = 0 AND s.generation = 0 AND o.status = 'active'",
    # CROSS JOIN keeps this order on purpose: left to itself the planner scanned the whole namespace (600 ms at 10k).
    "MENTIONS": "SELECT 'MENTIONS', o.memory_id, s.memory_id, 1, NULL FROM memory_entities s "
    "CROSS JOIN memory_entities o CROSS JOIN memories m WHERE s.memory_id IN (SELECT id FROM seeds) "
    "AND s.entity IN (SELECT entity FROM rare) AND o.entity = s.entity AND o.namespace = :namespace "
    "AND o.memory_id <> s.memory_id "
    "AND m.memory_id = o.memory_id AND m.namespace = :namespace AND m.status = 'active'",
    "LINK": "SELECT 'LINK', w.id, w.seed, min(w.hops), w.relation FROM walk w JOIN memories m ON m.memory_id = w.id "
    "WHERE w.hops > 0 AND m.status = 'active' AND m.namespace = :namespace GROUP BY w.id, w.seed",
}
STRUCTURAL_PARTS = ("NEXT", "ATTACHED", "MENTIONS")
WALK_PARTS = (*STRUCTURAL_PARTS, "LINK")


async def _once_built(projected: KeywordProjection, query: KeywordQuery) -> Matches | None:
    """The projection's answer once its build is done (a one-shot command's first search, a daemon's first seconds),
    or None, for FTS5 to answer, when the build failed: a store of several namespaces waits for the build rather than
    rank a namespace by every namespace's statistics (about 0.4 s a 10k memories, once)."""
    try:
        await projected.wait()
    except ClosedError:
        raise
    except Exception:  # the projection logged why; FTS5 answers
        return None
    return await projected.search(query)


def any_of(words: Sequence[str]) -> str:
    """An FTS5 MATCH expression for memories holding any of `words`: each quoted (no operator injection)."""
    return " OR ".join(f'"{w}"' for w in words)


# The turn after each memory's own, in its session (the next turn number logged), where a save decision dropped it
# and no memory was ever made from it: neither kept, nor forgotten, nor merged.
_DROPPED_REPLIES = """
SELECT m.memory_id, n.turn_id, n.namespace, n.session_id, n.turn_number, n.role, n.at, n.segment, n.offset,
       n.length, n.checksum,
       (SELECT min(d.decided_at) FROM save_decisions AS d WHERE d.turn_id = n.turn_id AND d.save = 0) AS decided_at
FROM memories AS m
JOIN turns AS t ON t.turn_id = m.source_turn_id
JOIN turns AS n ON n.namespace = t.namespace AND n.session_id = t.session_id AND n.turn_number = (
    SELECT min(x.turn_number) FROM turns AS x
    WHERE x.namespace = t.namespace AND x.session_id = t.session_id AND x.turn_number > t.turn_number)
WHERE m.memory_id IN ({marks}) AND m.generation = 0
  AND NOT EXISTS (SELECT 1 FROM notes AS o WHERE o.memory_id = m.memory_id)
  AND NOT EXISTS (SELECT 1 FROM memories AS k WHERE k.source_turn_id = n.turn_id)
  AND decided_at IS NOT NULL
"""


class RecallQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections
        keyword_index: KeywordProjection | None

        async def _memory_rows(
            self, memory_ids: Sequence[str], extra: str = ""
        ) -> list[tuple[list[str], list[Any]]]: ...

        path: Path | None
        commits: int
        live_commits: int

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

        async def write_one(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> None: ...

    def use_keyword_index(self) -> KeywordProjection:
        """Answer keyword_search from the in-memory projection (storage/keyword_projection.py), built in the background
        from the first search on; until it is built, FTS5 answers."""
        if self.path is None:
            raise StorageError("the keyword index needs the records database's path")
        if self.keyword_index is None:
            self.keyword_index = KeywordProjection(self.path, lambda: self.live_commits, self._prune_keyword_changes)
        return self.keyword_index

    def start_keyword_index(self) -> KeywordProjection:
        """`use_keyword_index`, with the build started now."""
        projection = self.use_keyword_index()
        projection.start()
        return projection

    async def drop_keyword_changes(self) -> int:
        """Delete every keyword change row, when no projection reads them (`retrieval.keyword_projection` off):
        the triggers keep writing them, and nothing else would delete them. Returns how many went."""
        if self.keyword_index is not None:
            return 0
        async with self.transaction(projected=False) as db:
            cursor = await db.execute("DELETE FROM keyword_changes")
            return int(cursor.rowcount)

    async def _prune_keyword_changes(self, seq: int) -> None:
        await self.write_one("DELETE FROM keyword_changes WHERE seq <= ?", (seq,))

    async def keyword_search(
        self,
        namespace: str,
        words: Sequence[str],
        *,
        limit: int,
        weighted: bool = True,
        common_share: float = 1.0,
    ) -> list[tuple[str, float]]:
        """FTS5 BM25 over active memories for any of `words` (plain words, stemmed by the index): (memory_id,
        score) best first; higher is better. When the sleep job has weighted keywords and `weighted`, a hit's
        score is multiplied by the best weight among the words its keywords carry (twice `limit` are ranked, so a
        weighted hit can climb into the cut). Below 1, `common_share` ranks only memories holding a word rarer
        than that share of the store (common_match). BM25's statistics are the namespace's (the projection's); FTS5,
        which counts the whole store, answers only in a store of one namespace while the projection is built, or
        when it is off or failed."""
        terms = list(dict.fromkeys(w.replace('"', "") for w in words if w.replace('"', "").strip()))
        if not terms:
            return []
        projected = self.keyword_index
        found = None
        if projected is not None:  # the namespace's own BM25 statistics, from the in-memory projection
            query = KeywordQuery(namespace, tuple(terms), limit, common_share, COMMON_MIN_DOCS, OVERFETCH, weighted)
            found = await projected.search(query)
            if found is None and await self._shares_store(namespace):  # FTS5 would count the others' words too
                found = await _once_built(projected, query)
        if found is not None:
            scored, weights = found.rows, found.weights
        else:
            scored, weights = await self._fts_matches(namespace, terms, limit, common_share, weighted=weighted)
        if scored and max(score for _, score, _ in scored) >= KEYWORD_FLOOR:  # real evidence: the rest is noise
            scored = [row for row in scored if row[1] >= KEYWORD_FLOOR]
        hits = [(memory_id, score * _boost(keywords, weights)) for memory_id, score, keywords in scored]
        return sorted(hits, key=lambda hit: -hit[1])[:limit] if weights else hits

    async def _shares_store(self, namespace: str) -> bool:
        """Whether another namespace holds memories: two seeks on the (namespace, event_at) index, not a scan."""
        rows = await self._fetch(
            "SELECT EXISTS (SELECT 1 FROM memories WHERE namespace > ?) OR EXISTS (SELECT 1 FROM memories WHERE namespace < ?)",
            (namespace, namespace),
        )
        return bool(rows[0][0])

    async def _fts_matches(
        self, namespace: str, terms: Sequence[str], limit: int, common_share: float, *, weighted: bool
    ) -> tuple[list[tuple[str, float, str]], dict[str, float]]:
        """keyword_search's ranking from FTS5 itself: (memory_id, score, keywords JSON) best first, and the
        weights of the query's words."""
        match, repeats, weights = await self._keyword_plan(namespace, terms, common_share, weighted=weighted)
        wanted = 2 * limit if weights else limit
        rows = await self._fetch(_BEST_MATCHES, (match, OVERFETCH * wanted, namespace, wanted))
        if len(rows) < wanted and (not rows or rows[0][3] == OVERFETCH * wanted):  # other namespaces or merged
            rows = await self._fetch(_ALL_MATCHES, (match, namespace, wanted))  # memories may have crowded the cut
        return [(r[0], -float(r[1]) / repeats, r[2]) for r in rows], weights

    async def _keyword_plan(
        self, namespace: str, terms: Sequence[str], share: float, *, weighted: bool
    ) -> tuple[str, int, dict[str, float]]:
        """The MATCH expression for `terms`, how many times it counts each word (bm25 is divided by it), and the
        sleep job's weights of the words that have one above 1: one query, one hop to a reader, for all three.

        A word held by more than `share` of the memories, and by over COMMON_MIN_DOCS, is common. With both rare
        and common words, the expression matches memories holding a rare word, and lists every word twice:
        `(r1 OR r2) AND (r1 OR r2 OR c1 OR c1)`. FTS5's bm25 sums over the expression's phrases, so each
        memory's score is exactly twice its score for `r1 OR r2 OR c1`, while the memories holding only c1 are
        never scored. Counting each word's memories stops at the cut, so it costs little even for common words."""
        counting = share < 1.0 and len(terms) > 1
        if not counting and not weighted:
            return any_of(terms), 1, {}
        lowered = sorted({t.lower() for t in terms})
        params: dict[str, Any] = {"least": COMMON_MIN_DOCS, "share": share, "namespace": namespace}
        params |= {f"t{i}": any_of([t]) for i, t in enumerate(terms)} if counting else {}
        params |= {f"w{i}": w for i, w in enumerate(lowered)} if weighted else {}
        counted = "".join(
            f", (SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH :t{i} LIMIT (SELECT cut FROM bound) + 1))"
            for i in range(len(terms) if counting else 0)
        )
        words = ", ".join(f":w{i}" for i in range(len(lowered)))
        weights_sql = (
            "(SELECT json_group_object(word, weight) FROM keyword_weights WHERE namespace = :namespace "
            f"AND word IN ({words}) AND weight > 1)"
            if weighted
            else "'{}'"
        )
        row = (await self._fetch(f"{_COMMON_CUT} SELECT {weights_sql}, cut{counted} FROM bound", params))[0]
        weights = {str(word): float(weight) for word, weight in json.loads(row[0] or "{}").items()}
        cut, counts = int(row[1]), row[2:]
        rare = [t for t, n in zip(terms, counts, strict=True) if n <= cut] if counting else list(terms)
        common = [t for t, n in zip(terms, counts, strict=True) if n > cut] if counting else []
        if not rare or not common:
            return any_of(terms), 1, weights
        return f"({any_of(rare)}) AND ({any_of(rare)} OR {any_of(common)} OR {any_of(common)})", 2, weights

    async def openings_after(self, rowid: int) -> list[tuple[str, str, int, int]]:
        """The turn memories stored after `rowid`, grouped by namespace and opening: (namespace, opening, memories,
        last rowid). An opening runs to the first ": " in a memory's first 48 characters, where a transcript's
        speaker label is ("Melanie: "), else it is the first character (speakers.py). SQLite groups them, so a
        count of 100,000 memories is one scan and a few hundred rows; the rowid seeks past what was counted."""
        rows = await self._fetch(
            "SELECT namespace, substr(content, 1, instr(substr(content, 1, 48), ': ') + 1) AS opening, count(*), "
            "max(rowid) FROM memories WHERE rowid > ? AND generation = 0 GROUP BY namespace, opening",
            (rowid,),
        )
        return [(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    async def dropped_replies(self, memory_ids: Sequence[str]) -> list[tuple[str, TurnRow, datetime]]:
        """(memory id, turn, when it was judged) for each of these turn memories whose session's next logged turn the
        save decision did not keep and no memory holds: the reply a context shows under the memory (replies.py).
        Notes have none."""
        if not memory_ids:
            return []
        marks = ",".join("?" * len(memory_ids))
        rows = await self._fetch(_DROPPED_REPLIES.format(marks=marks), list(memory_ids))
        return [(str(r[0]), turn_row(tuple(r)[1:11]), datetime.fromisoformat(r[11])) for r in rows]

    async def has_images(self, namespace: str) -> bool:
        """Whether the namespace holds an active image memory (a partial index answers it)."""
        rows = await self._fetch(
            "SELECT 1 FROM memories WHERE namespace = ? AND status = 'active' AND media = 'image' LIMIT 1",
            (namespace,),
        )
        return bool(rows)

    async def memories_at(self, namespace: str, positions: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """The memory that holds the turn logged at each (segment, offset), where the turn became one: the turn's
        own memory, or once consolidation merged it, the active memory it was merged into."""
        if not positions:
            return {}
        rows = await self._fetch(OWNERS_SQL, {"positions": json.dumps(positions), "namespace": namespace})
        deepest: dict[tuple[int, int], tuple[int, str]] = {}
        for segment, offset, memory_id, depth in rows:  # the end of each turn's chain of merges
            if depth >= deepest.get((segment, offset), (-1, ""))[0]:
                deepest[(segment, offset)] = (depth, memory_id)
        return {position: memory_id for position, (_, memory_id) in deepest.items()}

    async def graph_neighbours(
        self,
        seeds: Sequence[str],
        namespace: str,
        *,
        depth: int,
        fanout: int,
        parts: Sequence[str] = WALK_PARTS,
    ) -> list[GraphStep]:
        """The graph walk from `seeds`, answered from the rows that define its edges, in one query (one hop to the
        reader thread, however many kinds of edge):

        - NEXT: turns within `depth` places of a seed in its session;
        - ATTACHED (reported as RELATED_TO): an image and the turn it was shared in, both ways;
        - MENTIONS: memories sharing an entity that at most `fanout` memories mention (a speaker's own name links
          nothing in particular);
        - LINK: memories within `depth` link edges of a seed, either way (EVOLVED_FROM, RELATED_TO, DREAM_LINK: what
          the sleep jobs write into `memory_links`, and the graph projects), each once, at its fewest hops,
          attributed to the first seed that reached it there, with the relation of its last hop.

        Active memories of the namespace. The link walk took 0.2-0.5 ms for five seeds on a 24k-memory store with
        1,600 digests' links, where Kuzu 0.11 took 33 ms (five indexed queries, p50) or 18 ms (one for all five);
        asking for every kind of edge in one query instead of five took the walk inside a 10k retrieval from ~10 ms
        of waiting behind the candidates' rows to about one."""
        steps, _ = await self._walk(seeds, namespace, depth=depth, fanout=fanout, parts=parts, rows=False)
        return steps

    async def graph_neighbourhood(
        self, seeds: Sequence[str], namespace: str, *, depth: int, fanout: int
    ) -> tuple[list[GraphStep], dict[str, Memory], int]:
        """`graph_neighbours`, with the row of each memory it reached (entities left empty, as `rows_for_ranking`
        leaves them), read by the same query: the read path needs those rows next, and a second
        hop to a reader thread cost a 10k retrieval about as much as the walk itself. And the last batch of
        retrieval records those rows count (`rows_for_ranking`)."""
        steps, found = await self._walk(seeds, namespace, depth=depth, fanout=fanout, parts=WALK_PARTS, rows=True)
        if not found:
            return steps, {}, -1
        return steps, {i: m for i, (m, _) in found.items()}, min(batch for _, batch in found.values())

    async def rows_for_ranking(self, memory_ids: Sequence[str]) -> list[tuple[dict[str, Memory], int]]:
        """The rows of `memory_ids` (entities left empty), each part with the number of the last batch of retrieval
        records it already counts, read in the same statement (retrieval_log.py lays the later ones over it)."""
        return [
            ({r[0]: memory_row(r[:-1], ()) for r in rows}, int(rows[0][-1]))
            for _, rows in await self._memory_rows(memory_ids, LAST_BATCH)
            if rows
        ]

    async def _walk(
        self, seeds: Sequence[str], namespace: str, *, depth: int, fanout: int, parts: Sequence[str], rows: bool
    ) -> tuple[list[GraphStep], dict[str, tuple[Memory, int]]]:
        wanted = [p for p in parts if p != "MENTIONS" or fanout > 0]
        if not seeds or depth <= 0 or not wanted:
            return [], {}
        union = " UNION ALL ".join(WALK_SQL[p] for p in wanted)
        sql = WALK_WITH + (
            f", steps(kind, id, seed, hops, relation) AS ({union}) {_STEPS_WITH_ROWS}" if rows else union
        )
        found = await self._fetch(
            sql, {"seeds": json.dumps(list(seeds)), "depth": depth, "fanout": fanout, "namespace": namespace}
        )
        steps = self._steps(found, seeds)
        if not rows:
            return steps, {}
        reached = {s.memory_id for s in steps}  # not a seed a link led back to
        return steps, {
            row[1]: (memory_row(row[5:-1], ()), int(row[-1]))
            for row in found
            if row[1] in reached and row[5] is not None
        }

    @staticmethod
    def _steps(found: Sequence[Sequence[Any]], seeds: Sequence[str]) -> list[GraphStep]:
        steps, links = [], []
        for kind, memory_id, seed, hops, relation, *_ in found:
            if kind == "LINK":
                links.append((memory_id, seed, int(hops), relation))
            else:
                steps.append(GraphStep(memory_id, seed, int(hops), "RELATED_TO" if kind == "ATTACHED" else kind))
        order = {seed: n for n, seed in enumerate(seeds)}
        reached: dict[str, GraphStep] = {}
        for memory_id, seed, hops, relation in sorted(links, key=lambda r: (r[2], order.get(r[1], len(order)))):
            if memory_id not in order and memory_id not in reached:
                reached[memory_id] = GraphStep(memory_id, seed, hops, relation)
        return steps + sorted(reached.values(), key=lambda s: (s.hops, s.memory_id))

    async def structural_neighbours(
        self, seeds: Sequence[str], namespace: str, *, depth: int, fanout: int
    ) -> list[GraphStep]:
        """The walk's NEXT, image and MENTIONS hops (`graph_neighbours`), without the link edges."""
        return await self.graph_neighbours(seeds, namespace, depth=depth, fanout=fanout, parts=STRUCTURAL_PARTS)

    async def linked_neighbours(self, seeds: Sequence[str], namespace: str, *, depth: int) -> list[GraphStep]:
        """The walk's link edges alone (`graph_neighbours`), nearest first."""
        return await self.graph_neighbours(seeds, namespace, depth=depth, fanout=0, parts=("LINK",))


def _boost(keywords_json: str, weights: dict[str, float]) -> float:
    """The best weight among the weighted query words that occur in a memory's keywords (1.0 when none do)."""
    if not weights:
        return 1.0
    words = {w for phrase in json.loads(keywords_json) for w in str(phrase).lower().split()}
    return max((weight for word, weight in weights.items() if word in words), default=1.0)
