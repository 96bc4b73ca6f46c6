"""An in-memory projection of the keyword index: FTS5's own BM25, scored in numpy.

`memories_fts` (porter over unicode61) stays the truth of which words a memory holds; this projection holds the same
token instances, read from it through `fts5vocab`, and answers the keyword layer's query (any of the words, best
BM25 first) without walking FTS5's doclists, which is where the layer spent its time: about 2 µs for each memory
that holds a query word, ~11 ms of CPU per question at 100k memories.

It is exact, not an approximation: the same tokens (the query's words go through an FTS5 table with the same
tokenizer), the same phrases (a word the tokenizer splits, "melanie's", must match its tokens side by side), and
the same formula as fts5_aux.c's bm25(): idf = ln((N - n + 0.5) / (n + 0.5)), floored at 1e-6; per phrase
idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)), k1 = 1.2, b = 0.75, D the row's tokens over both
columns. tests/test_keyword_index.py holds it to FTS5's own ranking.

Like Kuzu and Qdrant it is a projection: rebuilt from SQLite when the process opens the store, then kept in step
through `keyword_changes` (migration 0016), which triggers fill on every change to a memory's words. All its state
lives on one worker thread, with its own read connection: a search is one hop, and never waits for a reader.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.errors import ClosedError, StorageError

log = logging.getLogger(__name__)
TOKENIZE = "porter unicode61"  # memories_fts's tokenizer (migration 0001); a test holds the two equal
K1, B, IDF_FLOOR = 1.2, 0.75, 1e-6  # fts5_aux.c
COLUMNS = ("content", "keywords")
DOC_SHIFT, COLUMN_BIT = 32, 31  # an instance is one int64: doc << 32 | column << 31 | offset
REBUILD_AFTER = 2000  # pending changes (plus a tenth of the rows) past which the index is built again
PRUNE_EVERY = 4096  # applied changes between two deletes of keyword_changes' old rows
MMAP_BYTES = 256 << 20  # as the records' readers map the file (records.READER_MMAP_BYTES)
WORD_CACHE = 50_000  # query words whose tokens are remembered
_FILTER_SQL = (
    "SELECT rowid, memory_id, keywords FROM memories WHERE rowid IN (SELECT value FROM json_each(?)) "
    "AND namespace = ? AND status = 'active'"
)
_INSTANCES_SQL = (  # each token with all its instances as doc << 32 | column << 31 | offset, numbered by rowid
    "SELECT term, group_concat((doc << 32) | ((col = 'keywords') << 31) | offset) FROM temp.keyword_instances "
    "GROUP BY term"
)
_CHANGES_SQL = (
    "SELECT c.last, m.rowid IS NOT NULL, m.content, m.keywords, c.row FROM (SELECT row, max(seq) AS last "
    "FROM keyword_changes WHERE seq > ? GROUP BY row) AS c LEFT JOIN memories m ON m.rowid = c.row ORDER BY c.last"
)


@dataclass(frozen=True, slots=True)
class Matches:
    """Memories holding the query's words, best BM25 first: (memory_id, score, keywords JSON), the score positive
    (FTS5's bm25() negated); and the sleep job's weights above 1 of the query words, when they were asked for."""

    rows: list[tuple[str, float, str]]
    weights: dict[str, float]


class KeywordIndex:
    """The postings: for each token, the sorted int64 instances of it (doc, column, offset). Docs are internal
    numbers; a memory whose words change gets a new one, and the old one is dead until compaction drops it.
    Not thread-safe: KeywordProjection keeps it on one thread."""

    def __init__(self, rowids: np.ndarray | None = None, postings: dict[str, np.ndarray] | None = None) -> None:
        """Empty, or loaded at once from the rows' sorted rowids and each token's instances, numbered by rowid."""
        rowids = np.empty(0, dtype=np.int64) if rowids is None else rowids
        postings = postings or {}
        size = max(1024, int(rowids[-1]) + 1 if len(rowids) else 0)
        self._chunks: dict[str, list[np.ndarray]] = {term: [keys] for term, keys in postings.items()}
        self._rowid = np.arange(size, dtype=np.int64)  # doc -> rowid (docs loaded at once are numbered by rowid)
        self._live = np.zeros(size, dtype=bool)
        self._live[rowids] = True
        self._length = np.zeros(size, dtype=np.float64)  # tokens in the doc, both columns; 0 once dead
        if postings:
            lengths = np.bincount(np.concatenate(list(postings.values())) >> DOC_SHIFT, minlength=size)
            self._length[:] = lengths[:size] * self._live
        self._doc_of = np.full(size, -1, dtype=np.int64)  # rowid -> its live doc, -1 for none
        self._doc_of[rowids] = rowids
        self._docs = size  # internal numbers handed out
        self._dead = 0  # dead docs still in the postings
        self.rows, self.tokens = len(rowids), float(self._length.sum())  # FTS5's N, and their tokens

    def add(self, docs: Iterable[tuple[int, Sequence[tuple[str, int, int]]]]) -> None:
        """Rows and their token instances (term, column, offset), replacing any earlier version of each row."""
        fresh: dict[str, list[int]] = {}
        for rowid, instances in docs:
            self.remove(rowid)
            doc = self._grow()
            self._rowid[doc], self._length[doc], self._live[doc] = rowid, len(instances), True
            if rowid >= len(self._doc_of):
                grown = np.full(max(2 * len(self._doc_of), rowid + 1), -1, dtype=np.int64)
                grown[: len(self._doc_of)] = self._doc_of
                self._doc_of = grown
            self._doc_of[rowid] = doc
            self.rows, self.tokens = self.rows + 1, self.tokens + len(instances)
            for term, column, offset in instances:
                fresh.setdefault(term, []).append((doc << DOC_SHIFT) | (column << COLUMN_BIT) | offset)
        for term, keys in fresh.items():
            self._chunks.setdefault(term, []).append(np.sort(np.array(keys, dtype=np.int64)))

    def remove(self, rowid: int) -> None:
        doc = int(self._doc_of[rowid]) if rowid < len(self._doc_of) else -1
        if doc >= 0:
            self._doc_of[rowid] = -1
            self.rows, self.tokens = self.rows - 1, self.tokens - self._length[doc]
            self._live[doc], self._length[doc] = False, 0.0
            self._dead += 1
            if self._dead > 1024 and self._dead > self.rows // 4:
                self._compact()

    def hits(self, phrase: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The live docs holding `phrase` (its tokens side by side in one column) and how often each does."""
        keys = self._instances(phrase[0]) if phrase else np.empty(0, dtype=np.int64)
        for step, token in enumerate(phrase[1:], start=1):
            if not len(keys):
                break
            following = self._instances(token)
            keys = keys[_contains(following, keys + step)]
        docs = keys >> DOC_SHIFT
        docs = docs[self._live[docs]]
        if not len(docs):
            return docs, np.empty(0, dtype=np.float64)
        starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
        counts = np.diff(np.r_[starts, len(docs)]).astype(np.float64)
        return docs[starts], counts

    def search(
        self, phrases: Sequence[Sequence[str]], required: Sequence[bool], limit: int | None
    ) -> tuple[list[tuple[int, float]], int]:
        """(rowid, BM25 score) of the best `limit` (all when None) docs holding a `required` phrase, scored over
        every phrase, as FTS5 scores `required OR ...` when the rest are ORed in beside them; ties by rowid. Also
        how many docs matched."""
        if self.rows == 0:
            return [], 0
        average = self.tokens / self.rows
        scores = np.zeros(self._docs, dtype=np.float64)
        matched = np.zeros(self._docs, dtype=bool)
        for phrase, needed in zip(phrases, required, strict=True):
            docs, freq = self.hits(phrase)
            if not len(docs):
                continue
            idf = max(math.log((self.rows - len(docs) + 0.5) / (len(docs) + 0.5)), IDF_FLOOR)
            norm = K1 * (1.0 - B + B * self._length[docs] / average)
            scores[docs] += idf * freq * (K1 + 1.0) / (freq + norm)
            if needed:
                matched[docs] = True
        found = np.flatnonzero(matched)
        if limit is not None and len(found) > limit:
            found = found[np.argpartition(-scores[found], limit - 1)[:limit]]
            cut = scores[found].min()  # every doc scoring as the cut scores competes for its place, by rowid
            found = np.flatnonzero(matched & (scores >= cut))
        rowids = self._rowid[found]
        order = np.lexsort((rowids, -scores[found]))[:limit]
        return [(int(rowids[i]), float(scores[found[i]])) for i in order], int(matched.sum())

    def document_count(self, phrase: Sequence[str]) -> int:
        return len(self.hits(phrase)[0])

    def nbytes(self) -> int:
        postings = sum(chunk.nbytes for chunks in self._chunks.values() for chunk in chunks)
        return postings + sum(a.nbytes for a in (self._rowid, self._length, self._live, self._doc_of))

    def _instances(self, token: str) -> np.ndarray:
        chunks = self._chunks.get(token)
        if not chunks:
            return np.empty(0, dtype=np.int64)
        if len(chunks) > 1:  # rows added since the last search: one sorted array again (new docs sort last)
            chunks[:] = [np.concatenate(chunks)]
        return chunks[0]

    def _grow(self) -> int:
        if self._docs == len(self._rowid):
            size = 2 * len(self._rowid)
            self._rowid = np.resize(self._rowid, size)
            self._length = np.concatenate([self._length, np.zeros(size - len(self._length))])
            self._live = np.concatenate([self._live, np.zeros(size - len(self._live), dtype=bool)])
        self._docs += 1
        return self._docs - 1

    def _compact(self) -> None:
        """Drop the dead docs' instances (kept until a quarter of the rows are dead: updates are rare)."""
        for term in list(self._chunks):
            keys = self._instances(term)
            kept = keys[self._live[keys >> DOC_SHIFT]]
            if len(kept):
                self._chunks[term] = [kept]
            else:
                del self._chunks[term]
        self._dead = 0


def _pruned(pruning: asyncio.Future[Any]) -> None:
    if not pruning.cancelled() and pruning.exception() is not None:  # the next prune deletes these rows too
        log.warning("could not delete applied keyword changes: %s", pruning.exception())


def _contains(sorted_keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of `wanted`, whether `sorted_keys` holds it."""
    if not len(sorted_keys):
        return np.zeros(len(wanted), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
    held: np.ndarray = sorted_keys[at] == wanted
    return held


class Tokenizer:
    """FTS5's tokenizer, run through an in-memory FTS5 table with the same `tokenize` option: the only way to get
    exactly its tokens (porter's stems, unicode61's folding and separators) without re-implementing both."""

    def __init__(self, tokenize: str = TOKENIZE) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(f"CREATE VIRTUAL TABLE t USING fts5 ({', '.join(COLUMNS)}, tokenize = '{tokenize}')")
        self._db.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, 'instance')")
        self._words: dict[str, tuple[str, ...]] = {}

    def rows(self, rows: Sequence[tuple[int, str, str]]) -> list[tuple[int, list[tuple[str, int, int]]]]:
        """Each (rowid, content, keywords) with its token instances (term, column, offset)."""
        self._db.executemany(f"INSERT INTO t (rowid, {', '.join(COLUMNS)}) VALUES (?, ?, ?)", rows)
        found: dict[int, list[tuple[str, int, int]]] = {rowid: [] for rowid, _, _ in rows}
        for term, doc, column, offset in self._db.execute("SELECT term, doc, col, offset FROM v"):
            found[doc].append((term, COLUMNS.index(column), offset))
        self._db.execute("DELETE FROM t")
        return list(found.items())

    def words(self, words: Sequence[str]) -> list[tuple[str, ...]]:
        """Each word's tokens in order: one for most words, a phrase for "melanie's", none for a bare mark."""
        missing = [w for w in dict.fromkeys(words) if w not in self._words]
        if missing:
            if len(self._words) + len(missing) > WORD_CACHE:
                self._words.clear()
            tokens = dict(self.rows([(n, word, "") for n, word in enumerate(missing)]))
            for n, word in enumerate(missing):
                self._words[word] = tuple(term for term, _, _ in sorted(tokens[n], key=lambda t: t[2]))
        return [self._words[w] for w in words]

    def close(self) -> None:
        self._db.close()


class KeywordProjection:
    """The keyword index, built and searched on its own thread, kept in step with `keyword_changes`.

    `changed()` counts the writes that may have changed memories (SqliteRecords.commits): the change table is read
    only when it moved. `prune(seq)` deletes change rows up to seq through the writer."""

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

    async def search(
        self,
        namespace: str,
        terms: Sequence[str],
        *,
        limit: int,
        share: float,
        least: int,
        overfetch: int,
        weighted: bool,
    ) -> Matches | None:
        """The best `limit` active memories of `namespace` holding any of `terms`, as keyword_search's FTS5 query
        ranks them; None while the index is not built. Words held by more than `share` of the memories (and more
        than `least`) are common: a memory holding only those is not ranked (recall_records._keyword_plan)."""
        if self._closed:
            raise ClosedError("KeywordProjection")
        if not self.ready:
            self.start()  # the first search starts the build: a process that never searches never pays for it
            return None
        changed = self._changed()
        seen, self._seen = self._seen, changed
        try:
            found = await asyncio.wrap_future(
                self._pool.submit(
                    self._search, namespace, terms, limit, share, least, overfetch, weighted, changed != seen
                )
            )
            self._prune_later()
            return found
        except Exception as exc:  # the projection's own connection failed: FTS5 answers while it is rebuilt
            log.warning("keyword index failed, rebuilding it (FTS5 answers meanwhile): %s", exc)
            self._restart()
            return None
        except BaseException:
            self._seen = -1  # read the changes again next time
            raise

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
        await asyncio.wrap_future(self._pool.submit(self._close))
        self._pool.shutdown(wait=True)

    def _after_build(self, built: asyncio.Future[None]) -> None:
        if not built.cancelled() and built.exception() is not None and not self._closed:
            log.warning("keyword index not built, the keyword layer asks FTS5: %s", built.exception())

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
            seq = db.execute("SELECT coalesce(max(seq), 0) FROM keyword_changes").fetchone()[0]
            rowids = np.array([r[0] for r in db.execute("SELECT rowid FROM memories ORDER BY rowid")], dtype=np.int64)
            for term, keys in db.execute(_INSTANCES_SQL):
                if self._closed:  # the store is closing: a command that asked once need not wait for the build
                    raise ClosedError("KeywordProjection")
                postings[term] = np.sort(np.fromstring(keys, dtype=np.int64, sep=","))
        finally:
            db.execute("COMMIT")
        self._index, self._seq, self._pruned = KeywordIndex(rowids, postings), seq, 0
        self.build_seconds = time.perf_counter() - started
        log.info(
            "keyword index: %d memories, %.1f MB, built in %.2f s",
            self._index.rows,
            self._index.nbytes() / 2**20,
            self.build_seconds,
        )

    def _sync(self) -> None:
        db = self._connect()
        assert self._tokenizer is not None
        first, last = db.execute("SELECT min(seq), max(seq) FROM keyword_changes").fetchone()
        if first is not None and first > self._seq + 1:
            self._build()  # another process pruned what this one had not read: start again
            return
        if last is not None and last - self._seq > REBUILD_AFTER + self._index.rows // 10:
            self._build()  # a bulk ingest: reading FTS5's index again beats tokenizing every row here
            return
        rows = db.execute(_CHANGES_SQL, (self._seq,)).fetchall()
        if not rows:
            return
        present = [(row, content or "", keywords or "") for _, exists, content, keywords, row in rows if exists]
        for _, exists, _, _, row in rows:
            if not exists:
                self._index.remove(row)
        self._index.add(self._tokenizer.rows(present))
        self._seq = max(r[0] for r in rows)

    def _search(
        self,
        namespace: str,
        terms: Sequence[str],
        limit: int,
        share: float,
        least: int,
        overfetch: int,
        weighted: bool,
        changed: bool,
    ) -> Matches:
        if changed:
            self._sync()
        assert self._tokenizer is not None
        weights = self._weights(namespace, terms) if weighted else {}
        limit = 2 * limit if weights else limit  # a weighted hit may climb into the cut
        phrases = [p for p in self._tokenizer.words(terms) if p]
        if not phrases:
            return Matches([], weights)
        required = [True] * len(phrases)
        if share < 1.0 and len(phrases) > 1:
            cut = max(least, int(share * self._index.rows))
            rare = [self._index.document_count(p) <= cut for p in phrases]
            if any(rare) and not all(rare):
                required = rare
        ranked, total = self._index.search(phrases, required, overfetch * limit)
        rows = self._filter(ranked, namespace)
        if len(rows) < limit and total > len(ranked):  # other namespaces or inactive memories crowded the cut
            rows = self._filter(self._index.search(phrases, required, None)[0], namespace)
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
