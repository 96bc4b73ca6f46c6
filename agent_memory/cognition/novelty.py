"""How new a turn is: its vector against the memories already stored, including the latest ones the projector
may not have put in Qdrant yet. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

RECENT_VECTORS = 1024
"""Vectors of the latest memories, compared directly: the projector may not have put them in Qdrant yet."""


class RecentVectors:
    """The vectors of the latest memories in a ring, each with its namespace, compared in one product.

    Stacking 1,024 vectors from a deque on every turn took 1.6 ms; the ring's product and mask take 0.05 ms."""

    def __init__(self, capacity: int = RECENT_VECTORS) -> None:
        self.capacity = capacity
        self._matrix: np.ndarray | None = None  # allocated at the first vector, when the dimension is known
        self._owners = np.full(capacity, -1, dtype=np.int32)  # namespace number per row; -1: empty
        self._numbers: dict[str, int] = {}
        self._next = 0

    def extend(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        for namespace, vector in items:
            if self._matrix is None:
                self._matrix = np.zeros((self.capacity, vector.shape[0]), dtype=np.float32)
            row = self._next % self.capacity
            self._matrix[row] = vector
            self._owners[row] = self._numbers.setdefault(namespace, len(self._numbers))
            self._next += 1

    def clear(self) -> None:
        """Forget every vector (an erase: no cache keeps what it took)."""
        self._owners[:] = -1
        if self._matrix is not None:
            self._matrix[:] = 0

    def best(self, namespace: str, vector: np.ndarray) -> float | None:
        """The best cosine between `vector` and the recent vectors of `namespace`; None when there are none."""
        number = self._numbers.get(namespace)
        if self._matrix is None or number is None:
            return None
        mine = self._owners == number
        return float(np.max((self._matrix @ vector)[mine])) if mine.any() else None


UNKNOWN_NOVELTY = 0.5
"""Novelty in an empty namespace: with nothing remembered there is nothing to be surprised against, so the first
turns of a new user are neither novel nor familiar (they would otherwise all take the fast path)."""


class TurnVectors:
    """The vectors of each session's last few turns, each embedded alone, by their text.

    A short turn is embedded with the turn logged just before it in its session (write_path.py, `_before`), looked
    up here by its words; a phatic one was not embedded, and goes through the model. At most `per_session` turns a
    session and `limit` vectors in all (15 MiB at 384 dimensions); when full, the cache is cleared, and a miss costs
    one more pass through the model."""

    def __init__(self, per_session: int = 4, limit: int = 10_000, recent: int = 64) -> None:
        self.per_session, self.sessions, self.recent_limit = per_session, max(1, limit // per_session), recent
        self._latest: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self._recent: dict[str, np.ndarray] = {}  # the last `recent` texts embedded, in any session

    def get(self, session: tuple[str, str], text: str) -> np.ndarray | None:
        return self._latest.get(session, {}).get(text)

    def recent(self, text: str) -> np.ndarray | None:
        """The vector of `text` when it was one of the last turns embedded, whatever its session: an agent asks
        its memory about the message it has just stored, and the query then needs no pass through the model."""
        return self._recent.get(text)

    def clear(self) -> None:
        """Forget every text and vector (an erase: no cache keeps the words it took)."""
        self._latest.clear()
        self._recent.clear()

    def remember(self, items: list[tuple[tuple[str, str], str, np.ndarray]]) -> None:
        """(session, text, vector) in the order the turns were said: each session keeps its latest."""
        if len(self._latest) + len(items) > self.sessions:
            self._latest.clear()
        for session, text, row in items:
            vector = row.copy()  # not a view: a kept row would keep its whole batch's array alive
            latest = self._latest.setdefault(session, {})
            latest.pop(text, None)
            latest[text] = vector
            if len(latest) > self.per_session:
                del latest[next(iter(latest))]
            self._recent.pop(text, None)
            self._recent[text] = vector
            if len(self._recent) > self.recent_limit:
                del self._recent[next(iter(self._recent))]


def session_surprise(vector: np.ndarray, before: list[np.ndarray]) -> float:
    """1 - the mean cosine between a turn and the turns just before it in its session; 0.5 when it opens it."""
    if not before:
        return 0.5
    return float(np.clip(1.0 - np.mean(np.stack(before) @ vector), 0.0, 1.0))


def earlier_in_batch(vectors: Sequence[np.ndarray | None], namespaces: Sequence[str]) -> dict[int, float]:
    """By position: the best cosine between a turn's vector and those of the turns before it in the batch, in its
    namespace (none for a namespace's first turn of the batch, or a turn with no vector). Each namespace's vectors
    are stacked once and each row is one matrix-vector product over the rows before it: the products the novelty
    check always made, without stacking the batch again for every turn (which held the event loop for 0.7-1.1 s
    at 1,024 turns)."""
    groups: dict[str, list[int]] = {}
    for position, (vector, namespace) in enumerate(zip(vectors, namespaces, strict=True)):
        if vector is not None:
            groups.setdefault(namespace, []).append(position)
    best: dict[int, float] = {}
    for positions in groups.values():
        stacked = np.stack([vectors[i] for i in positions])  # type: ignore[misc]
        for row in range(1, len(positions)):
            best[positions[row]] = float(np.max(stacked[:row] @ stacked[row]))
    return best
