"""The keyword layer's index in memory: FTS5's own BM25 within a namespace, scored in numpy over the same tokens.

`memories_fts` (porter over unicode61) stays the truth of which words a memory holds; `KeywordIndex` holds the same
token instances, read from it through `fts5vocab` (keyword_projection.py keeps it in step), and answers the
keyword layer's query (any of the words, best BM25 first) without walking FTS5's doclists, which is where the layer
spent its time: about 2 µs for each memory that holds a query word, ~11 ms of CPU per question at 100k memories.

It is exact, not an approximation: the same tokens (the query's words go through an FTS5 table with the same
tokenizer, `Tokenizer`), the same phrases (a word the tokenizer splits, "melanie's", must match its tokens side by
side), and the same formula as fts5_aux.c's bm25(): idf = ln((N - n + 0.5) / (n + 0.5)), floored at 1e-6; per
phrase idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)), k1 = 1.2, b = 0.75, D the row's tokens over both
columns. One difference, on purpose: N, n and avgdl are the searched namespace's (its memories, any status), where
FTS5 counts the whole table. A namespace is ranked exactly as FTS5 ranks a store holding only its memories, so one
project's words never change how rare a word is in another (tests/test_keyword_index.py holds it to that).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Sequence

import numpy as np

TOKENIZE = "porter unicode61"  # memories_fts's tokenizer (migration 0001); a test holds the two equal
K1, B, IDF_FLOOR = 1.2, 0.75, 1e-6  # fts5_aux.c
COLUMNS = ("content", "keywords")
DOC_SHIFT, COLUMN_BIT = 32, 31  # an instance is one int64: doc << 32 | column << 31 | offset
WORD_CACHE = 50_000  # query words whose tokens are remembered
MAX_CHUNKS = 16  # arrays a word's instances may be split into before they are joined (each sync adds one)


class KeywordIndex:
    """The postings: for each token, the sorted int64 instances of it (doc, column, offset). Docs are internal
    numbers; a memory whose words change gets a new one, and the old one is dead until compaction drops it.
    Not thread-safe: KeywordProjection keeps it on one thread."""

    def __init__(
        self,
        rowids: np.ndarray | None = None,
        postings: dict[str, np.ndarray] | None = None,
        namespaces: Sequence[str] = (),
    ) -> None:
        """Empty, or loaded at once from the rows' sorted rowids, each row's namespace, and each token's instances,
        numbered by rowid."""
        rowids = np.empty(0, dtype=np.int64) if rowids is None else rowids
        if len(namespaces) != len(rowids):
            raise ValueError(f"{len(rowids)} rows but {len(namespaces)} namespaces")
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
        self._spaces: dict[str, int] = {}  # namespace -> its number
        codes = np.array([self._spaces.setdefault(name, len(self._spaces)) for name in namespaces], dtype=np.int32)
        self._space = np.full(size, -1, dtype=np.int32)  # doc -> its namespace's number
        self._space[rowids] = codes
        self._rows_in = np.bincount(codes, minlength=len(self._spaces)).astype(np.float64)  # FTS5's N, by namespace
        self._tokens_in = np.bincount(codes, weights=self._length[rowids], minlength=len(self._spaces))
        self._docs = size  # internal numbers handed out
        self._dead = 0  # dead docs still in the postings
        self.rows = len(rowids)  # live docs, over every namespace

    def add(self, docs: Iterable[tuple[int, str, Sequence[tuple[str, int, int]]]]) -> None:
        """Rows, each with its namespace and token instances (term, column, offset), replacing any earlier version
        of each row."""
        fresh: dict[str, list[int]] = {}
        for rowid, namespace, instances in docs:
            self.remove(rowid)
            doc = self._grow()
            self._rowid[doc], self._length[doc], self._live[doc] = rowid, len(instances), True
            space = self._space[doc] = self._number(namespace)
            self._rows_in[space] += 1
            self._tokens_in[space] += len(instances)
            if rowid >= len(self._doc_of):
                grown = np.full(max(2 * len(self._doc_of), rowid + 1), -1, dtype=np.int64)
                grown[: len(self._doc_of)] = self._doc_of
                self._doc_of = grown
            self._doc_of[rowid] = doc
            self.rows += 1
            for term, column, offset in instances:
                fresh.setdefault(term, []).append((doc << DOC_SHIFT) | (column << COLUMN_BIT) | offset)
        for term, keys in fresh.items():
            chunks = self._chunks.setdefault(term, [])
            chunks.append(np.sort(np.array(keys, dtype=np.int64)))
            if len(chunks) > MAX_CHUNKS:  # a word no search asks for would otherwise gather one array per sync
                chunks[:] = [np.concatenate(chunks)]

    @property
    def wasteful(self) -> bool:
        """Whether most of the doc numbers handed out belong to versions replaced since: a rebuild renumbers."""
        return self._docs > 3 * self.rows + 4096

    def remove(self, rowid: int) -> None:
        doc = int(self._doc_of[rowid]) if rowid < len(self._doc_of) else -1
        if doc >= 0:
            self._doc_of[rowid] = -1
            self.rows -= 1
            self._rows_in[self._space[doc]] -= 1
            self._tokens_in[self._space[doc]] -= self._length[doc]
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

    def rows_in(self, namespace: str) -> int:
        """The namespace's rows: FTS5's N for a store holding only them."""
        space = self._spaces.get(namespace)
        return 0 if space is None else int(self._rows_in[space])

    def search(
        self, namespace: str, phrases: Sequence[Sequence[str]], required: Sequence[bool], limit: int | None
    ) -> tuple[list[tuple[int, float]], int]:
        """(rowid, BM25 score) of the best `limit` (all when None) docs of `namespace` holding a `required` phrase,
        scored over every phrase, as FTS5 scores `required OR ...` when the rest are ORed in beside them, in a
        store of the namespace's rows alone; ties by rowid. Also how many docs matched."""
        space = self._spaces.get(namespace)
        if space is None or self._rows_in[space] == 0:
            return [], 0
        rows = self._rows_in[space]
        average = self._tokens_in[space] / rows
        scores = np.zeros(self._docs, dtype=np.float64)
        matched = np.zeros(self._docs, dtype=bool)
        for phrase, needed in zip(phrases, required, strict=True):
            docs, freq = self._hits_in(space, phrase)
            if not len(docs):
                continue
            idf = max(math.log((rows - len(docs) + 0.5) / (len(docs) + 0.5)), IDF_FLOOR)
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

    def document_count(self, phrase: Sequence[str], namespace: str | None = None) -> int:
        """How many live docs hold `phrase`: of `namespace`, or of every namespace when None."""
        if namespace is None:
            return len(self.hits(phrase)[0])
        space = self._spaces.get(namespace)
        return 0 if space is None else len(self._hits_in(space, phrase)[0])

    def _hits_in(self, space: int, phrase: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        docs, freq = self.hits(phrase)
        if self._rows_in[space] == self.rows:  # every live doc is the namespace's: nothing to filter
            return docs, freq
        own = self._space[docs] == space
        return docs[own], freq[own]

    def _number(self, namespace: str) -> int:
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = len(self._spaces)
            self._rows_in = np.append(self._rows_in, 0.0)
            self._tokens_in = np.append(self._tokens_in, 0.0)
        return space

    def nbytes(self) -> int:
        postings = sum(chunk.nbytes for chunks in self._chunks.values() for chunk in chunks)
        return postings + sum(a.nbytes for a in (self._rowid, self._length, self._live, self._doc_of, self._space))

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
            self._space = np.concatenate([self._space, np.full(size - len(self._space), -1, dtype=np.int32)])
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
