"""The keyword index as a projection: built from SQLite, kept in step with it, searched on its own thread.

Like Kuzu and Qdrant, `KeywordIndex` (keyword_index.py) is a projection of SQLite: built from `memories_fts` in
the background from the first keyword search, then kept in step through `keyword_changes` (migration 0016), which
triggers fill on every change to a memory's words. All its state lives on one worker thread, with its own read
connection: a search is one hop, and never waits for a reader. Until it is built, or when it fails, FTS5 answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.errors import ClosedError, StorageError
from agent_memory.storage.keyword_index import KeywordIndex, Tokenizer

log = logging.getLogger(__name__)
REBUILD_AFTER = 2000  # pending changes (plus a tenth of the rows) past which the index is built again
PRUNE_EVERY = 4096  # applied changes between two deletes of keyword_changes' old rows
MMAP_BYTES = 256 << 20  # as the records' readers map the file (records.READER_MMAP_BYTES)
_FILTER_SQL = (
    "SELECT rowid, memory_id, keywords FROM memories WHERE rowid IN (SELECT value FROM json_each(?)) "
    "AND namespace = ? AND status = 'active'"
)
_INSTANCES_SQL = (  # each token with all its instances as doc << 32 | column << 31 | offset, numbered by rowid
    "SELECT term, group_concat((doc << 32) | ((col = 'keywords') << 31) | offset) FROM temp.keyword_instances "
    "GROUP BY term"
)
_CHANGES_SQL = (  # the memories changed past a seq, each once, in the order of their last change; at most LIMIT
    "SELECT c.last, m.rowid IS NOT NULL, m.content, m.keywords, c.row, m.namespace FROM (SELECT row, max(seq) AS last "
    "FROM keyword_changes WHERE seq > ? GROUP BY row) AS c LEFT JOIN memories m ON m.rowid = c.row ORDER BY c.last "
    "LIMIT ?"
)
CATCH_UP_SLICE = 16
"""Memories the background catch-up applies in one step on the projection's thread: a search waits at most for
one step (16 LongMemEval turns: about 6 ms on an idle core) where it waited for a whole import batch."""


_LAST_CHANGE_SQL = (  # the last change number handed out, which AUTOINCREMENT keeps after every row is pruned
    "SELECT max(coalesce((SELECT max(seq) FROM keyword_changes), 0), "
    "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'keyword_changes'), 0))"
)
"""The change a build reflects. max(seq) alone is 0 once the applied rows are pruned, and the next change's
number (past the pruned ones) then looked like a gap: the first write after a daemon's start rebuilt the whole
index (0.6-1.4 s at 10k memories, with FTS5 answering meanwhile; a question during an import waited 1-3 s)."""


@dataclass(frozen=True, slots=True)
class KeywordQuery:
    """What keyword_search asks: memories of `namespace` holding any of `terms`, the best `limit`. Words held by
    more than `share` of the memories (and by more than `least`) are common: a memory holding only those is not
    ranked (recall_records._keyword_plan); both counts are the namespace's. The best `overfetch` x `limit` of the
    namespace are ranked before the status cut; `weighted` asks for the sleep job's keyword weights."""

    namespace: str
    terms: tuple[str, ...]
    limit: int
    share: float
    least: int
    overfetch: int
    weighted: bool


@dataclass(frozen=True, slots=True)
class Matches:
    """Memories holding the query's words, best BM25 first: (memory_id, score, keywords JSON), the score positive
    (FTS5's bm25() negated); and the sleep job's weights above 1 of the query words, when they were asked for."""

    rows: list[tuple[str, float, str]]
    weights: dict[str, float]


class KeywordProjection:
    """The keyword index, built and searched on its own thread, kept in step with `keyword_changes`.

    `changed()` counts the writes a search must see (SqliteRecords.live_commits): a search reads the change table
    only when it moved. An import's batches do not move it: the projector applies their changes (`catch_up`), in
    its eager task and before the import's call returns, so a search never waits for an import's words.
    `prune(seq)` deletes change rows up to seq through the writer."""

    def __init__(self, path: Path, changed: Callable[[], int], prune: Callable[[int], Any]) -> None:
        self._path, self._changed, self._prune = path, changed, prune
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="keyword-index")
        self._index = KeywordIndex()
        self._db: sqlite3.Connection | None = None
        self._tokenizer: Tokenizer | None = None
        self._seq = self._pruned = 0
        self._seen = -1  # changed() when the change table was last read
        self._built: asyncio.Future[None] | None = None
        self._pruning: asyncio.Future[Any] | None = None
        self._catching: asyncio.Future[None] | None = None  # the catch-up a finished build starts
        self._closed = False
        self.build_seconds: float | None = None

    def start(self) -> None:
        """Build in the background; until it is built, `search` answers None and the caller asks FTS5."""
        if self._built is None and not self._closed:
            self._seen = self._changed()
            self._built = asyncio.wrap_future(self._pool.submit(self._build))
            self._built.add_done_callback(self._after_build)

    @property
    def ready(self) -> bool:
        return (
            self._built is not None
            and self._built.done()
            and not self._built.cancelled()
            and self._built.exception() is None
        )

    async def wait(self) -> None:
        """Until the first build is done (raises what it raised)."""
        if self._closed:
            raise ClosedError("KeywordProjection")
        self.start()
        assert self._built is not None
        await asyncio.shield(self._built)

    async def caught_up(self) -> None:
        """Until a search is answered here, not by FTS5: built (or built again, after a bulk ingest) and holding
        every committed change. A benchmark asks this before its questions: FTS5's statistics are the whole
        store's, the projection's the namespace's, so the two rank a store of many namespaces differently."""
        while True:
            await self.wait()
            await self.catch_up()
            if self.ready:
                return

    async def search(self, query: KeywordQuery) -> Matches | None:
        """The best `query.limit` active memories of its namespace holding any of its terms, as keyword_search's
        FTS5 query ranks them; None while the index is not built (the first search starts the build)."""
        if self._closed:
            raise ClosedError("KeywordProjection")
        if not self.ready:
            self.start()  # the first search starts the build: a process that never searches never pays for it
            return None
        changed = self._changed()
        seen, self._seen = self._seen, changed
        try:
            found = await asyncio.wrap_future(self._pool.submit(self._search, query, changed != seen))
            self._prune_later()
            if found is None or self._index.wasteful:  # a bulk ingest, a gap, many rewritten memories
                self._restart()  # built afresh in the background; FTS5 answers meanwhile
                return None
            return found
        except Exception as exc:  # the projection's own connection failed: FTS5 answers while it is rebuilt
            log.warning("keyword index failed, rebuilding it (FTS5 answers meanwhile): %s", exc)
            self._restart()
            return None
        except BaseException:
            self._seen = -1  # read the changes again next time
            raise

    async def catch_up(self) -> None:
        """Apply the changes past the last one applied, in the background (the projector calls it after a write), a
        slice at a time: the next search finds it applied instead of applying it on its own path, and a search
        that comes meanwhile waits at most for one slice. Nothing to do until the index is built."""
        while not self._closed and self.ready:
            try:
                left = await asyncio.wrap_future(self._pool.submit(self._sync_some, CATCH_UP_SLICE))
            except Exception as exc:  # as a search's failure: FTS5 answers while it is rebuilt
                log.warning("keyword index failed, rebuilding it (FTS5 answers meanwhile): %s", exc)
                self._restart()
                return
            if left is None or self._index.wasteful:
                self._restart()
                return
            self._prune_later()
            if not left:
                return

    async def status(self) -> dict[str, Any]:
        """For `stats()`: "idle" (no search yet), "building", "ready" or "failed", with the memories it holds, its
        arrays' bytes and the last build's seconds. Read on the projection's thread, where the index changes."""
        if self._built is None:
            state = "idle"
        elif not self._built.done():
            state = "building"
        else:
            state = "ready" if self.ready else "failed"
        rows, size = await asyncio.wrap_future(self._pool.submit(lambda: (self._index.rows, self._index.nbytes())))
        return {"state": state, "memories": rows, "bytes": size, "build_seconds": self.build_seconds}

    def _restart(self) -> None:
        self._seen = self._changed()
        self._built = asyncio.wrap_future(self._pool.submit(self._rebuild))
        self._built.add_done_callback(self._after_build)

    def _rebuild(self) -> None:
        """A fresh connection and tokenizer, then a fresh build (on the projection's thread)."""
        self._close()
        self._db, self._tokenizer = None, None
        self._build()

    def _prune_later(self) -> None:
        """Delete the change rows this projection has applied, once enough have piled up: in the background, so
        the write never waits on a search's path (after a bulk ingest, 100k rows take ~0.1 s)."""
        if self._seq - self._pruned >= PRUNE_EVERY and (self._pruning is None or self._pruning.done()):
            seq, self._pruned = self._seq, self._seq
            self._pruning = asyncio.ensure_future(self._prune(seq))
            self._pruning.add_done_callback(_pruned)

    async def pruned(self) -> None:
        """Until the last delete of applied change rows is done."""
        if self._pruning is not None:
            await asyncio.gather(self._pruning, return_exceptions=True)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.pruned()
        if self._built is not None and not self._built.done():
            await asyncio.gather(self._built, return_exceptions=True)
        if self._catching is not None:  # it stops at its next step, on seeing the projection closed
            await asyncio.gather(self._catching, return_exceptions=True)
        await asyncio.wrap_future(self._pool.submit(self._close))
        self._pool.shutdown(wait=True)

    def _after_build(self, built: asyncio.Future[None]) -> None:
        if not built.cancelled() and built.exception() is not None and not self._closed:
            log.warning("keyword index not built, the keyword layer asks FTS5: %s", built.exception())
        elif not built.cancelled() and not self._closed:  # an import's words committed while it was built
            self._catching = asyncio.ensure_future(self.catch_up())

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, check_same_thread=False)
                self._db.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            except sqlite3.Error as exc:
                raise StorageError(f"keyword index cannot read {self._path}: {exc}") from exc
        return self._db

    def _build(self) -> None:
        """Every token instance of memories_fts, in one read transaction with the last change it reflects. Each
        token's instances come as one string from SQLite (group_concat), parsed by numpy: 1.9-2.1 s at 100k
        memories where a row per instance took nine."""
        started = time.perf_counter()
        db = self._connect()
        self._tokenizer = self._tokenizer or Tokenizer()
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.keyword_instances USING fts5vocab(main, memories_fts, instance)"
        )
        postings: dict[str, np.ndarray] = {}
        db.execute("BEGIN")
        try:
            seq = db.execute(_LAST_CHANGE_SQL).fetchone()[0]
            rows = db.execute("SELECT rowid, namespace FROM memories ORDER BY rowid").fetchall()
            rowids = np.array([rowid for rowid, _ in rows], dtype=np.int64)
            for term, keys in db.execute(_INSTANCES_SQL):
                if self._closed:  # the store is closing: a command that asked once need not wait for the build
                    raise ClosedError("KeywordProjection")
                postings[term] = np.sort(np.fromstring(keys, dtype=np.int64, sep=","))
        finally:
            db.execute("COMMIT")
        self._index = KeywordIndex(rowids, postings, [namespace for _, namespace in rows])
        self._seq, self._pruned = seq, 0
        self.build_seconds = time.perf_counter() - started
        log.info(
            "keyword index: %d memories, %.1f MB, built in %.2f s",
            self._index.rows,
            self._index.nbytes() / 2**20,
            self.build_seconds,
        )

    def _sync(self) -> bool:
        """Apply the changes past the last one applied; False when the index must be built again instead."""
        return self._sync_some(-1) is not None

    def _sync_some(self, most: int) -> bool | None:
        """Apply the next `most` changed memories (all when -1): None when the index must be built again instead,
        else whether changes are left."""
        db = self._connect()
        assert self._tokenizer is not None
        first, last = db.execute("SELECT min(seq), max(seq) FROM keyword_changes").fetchone()
        if first is not None and first > self._seq + 1:
            return None  # another process pruned what this one had not read: start again
        if last is not None and last - self._seq > REBUILD_AFTER + self._index.rows // 10:
            return None  # a bulk ingest: reading FTS5's index again beats tokenizing every row here
        rows = db.execute(_CHANGES_SQL, (self._seq, most)).fetchall()
        if not rows:
            return False
        present = [(row, content or "", keywords or "") for _, exists, content, keywords, row, _ in rows if exists]
        namespaces = {row: namespace for _, exists, _, _, row, namespace in rows if exists}
        for _, exists, _, _, row, _ in rows:
            if not exists:
                self._index.remove(row)
        self._index.add((row, namespaces[row], instances) for row, instances in self._tokenizer.rows(present))
        self._seq = max(r[0] for r in rows)
        return len(rows) == most

    def _search(self, query: KeywordQuery, changed: bool) -> Matches | None:
        """The search on the projection's thread; None when the index must be built again first."""
        if changed and not self._sync():
            return None
        assert self._tokenizer is not None
        weights = self._weights(query.namespace, query.terms) if query.weighted else {}
        limit = 2 * query.limit if weights else query.limit  # a weighted hit may climb into the cut
        phrases = [p for p in self._tokenizer.words(query.terms) if p]
        if not phrases:
            return Matches([], weights)
        required = [True] * len(phrases)
        if query.share < 1.0 and len(phrases) > 1:
            cut = max(query.least, int(query.share * self._index.rows_in(query.namespace)))
            rare = [self._index.document_count(p, query.namespace) <= cut for p in phrases]
            if any(rare) and not all(rare):
                required = rare
        ranked, total = self._index.search(query.namespace, phrases, required, query.overfetch * limit)
        rows = self._filter(ranked, query.namespace)
        if len(rows) < limit and total > len(ranked):  # inactive memories crowded the cut
            rows = self._filter(self._index.search(query.namespace, phrases, required, None)[0], query.namespace)
        return Matches(rows[:limit], weights)

    def _weights(self, namespace: str, terms: Sequence[str]) -> dict[str, float]:
        """The sleep job's weights above 1 of the query words that have one."""
        lowered = sorted({t.lower() for t in terms})
        marks = ", ".join("?" * len(lowered))
        rows = self._connect().execute(
            f"SELECT word, weight FROM keyword_weights WHERE namespace = ? AND word IN ({marks}) AND weight > 1",
            (namespace, *lowered),
        )
        return {str(word): float(weight) for word, weight in rows}

    def _filter(self, ranked: Sequence[tuple[int, float]], namespace: str) -> list[tuple[str, float, str]]:
        """The ranked rows that are active memories of `namespace`, in rank order."""
        if not ranked:
            return []
        found = {
            rowid: (memory_id, keywords)
            for rowid, memory_id, keywords in self._connect().execute(
                _FILTER_SQL, (json.dumps([rowid for rowid, _ in ranked]), namespace)
            )
        }
        return [(found[rowid][0], score, found[rowid][1]) for rowid, score in ranked if rowid in found]

    def _close(self) -> None:
        if self._tokenizer is not None:
            self._tokenizer.close()
        if self._db is not None:
            self._db.close()


def _pruned(pruning: asyncio.Future[Any]) -> None:
    if not pruning.cancelled() and pruning.exception() is not None:  # the next prune deletes these rows too
        log.warning("could not delete applied keyword changes: %s", pruning.exception())
