"""Habituation: what everything in a conversation looks like stops looking special.

The save decision holds a turn's keep score (the heuristic's salience, or the LLM's keep probability) against a
fixed bar. Where nearly every turn clears it (long chats full of names and numbers), the store fills with most of
what was said. So each namespace keeps its latest `save.keep_share_window` keep scores (a fast-path turn counts as
1.0: it is kept whatever the bar), and the bar becomes the score that only the best `save.max_keep_share` of them
reached, when that is above the fixed one. In a conversation where few turns clear the fixed bar, nothing changes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from agent_memory.config import SaveConfig

MIN_SCORES = 20
"""The bar starts once this many scores are known (LongMemEval: starting at 50 let the first turns of each
conversation through at the old rate, 71.2% kept overall against 69.8%)."""


class KeepShare:
    """The recent keep scores of each namespace, and the bar they set."""

    def __init__(self, save: SaveConfig) -> None:
        self.share = save.max_keep_share
        self.window = save.keep_share_window
        self._scores: dict[str, deque[float]] = {}

    def known(self, namespace: str) -> bool:
        return namespace in self._scores

    def warm(self, namespace: str, scores: Iterable[float]) -> None:
        """Start a namespace from the scores of its latest decisions (oldest first), as after a restart."""
        self._scores[namespace] = deque(scores, maxlen=self.window)

    def bar(self, namespace: str) -> float:
        """The score a turn must reach to stay within the share; 0.0 (no constraint) until MIN_SCORES are known,
        or when habituation is off."""
        scores = self._scores.get(namespace)
        if self.share >= 1.0 or scores is None or len(scores) < min(MIN_SCORES, self.window):
            return 0.0
        return quantile(scores, 1.0 - self.share)

    def record(self, namespace: str, score: float) -> None:
        self._scores.setdefault(namespace, deque(maxlen=self.window)).append(score)


def quantile(values: Iterable[float], q: float) -> float:
    """`numpy.quantile(values, q)` for 0 <= q < 1 (its default, linear method, its interpolation) in plain Python:
    the bar is asked once a turn, of a window of 200 scores, and numpy's own overhead was some 10% of an import's
    event loop."""
    ordered: Sequence[float] = sorted(values)
    virtual = (len(ordered) - 1) * q
    below = math.floor(virtual)
    low, high = ordered[below], ordered[min(below + 1, len(ordered) - 1)]
    t, difference = virtual - below, high - low
    return high - difference * (1 - t) if t >= 0.5 else low + difference * t  # numpy's _lerp
