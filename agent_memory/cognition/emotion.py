"""Valence and arousal for a turn, offline: VADER's lexicon for valence, its intensity plus typed cues for arousal.

VADER (vaderSentiment) ships its lexicon in the wheel, runs in ~0.1 ms a turn and already weighs negation,
"but", degree words and capitals into its compound score. Arousal is not something VADER reports, so it is
built here from how strongly the text leans either way and from the cues people use to shout: exclamation
marks, words in capitals, intensifiers and stretched letters ("sooo"). A caller's own emotional context always
wins over this scorer; the manager records which one was used.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from typing import Any, Protocol, cast

from agent_memory.models import EmotionalContext

_INTENSIFIERS = frozenset(
    [
        "very",
        "so",
        "really",
        "extremely",
        "incredibly",
        "totally",
        "absolutely",
        "utterly",
        "super",
        "insanely",
        "ridiculously",
        "seriously",
        "literally",
        "completely",
        "deeply",
        "terribly",
        "awfully",
        "hugely",
        "massively",
    ]
)
_WORD = re.compile(r"[A-Za-z']+")
_STRETCHED = re.compile(r"([a-zA-Z])\1{2,}")
_EXCLAIM = re.compile(r"!+")


class EmotionScorer(Protocol):
    def score(self, text: str) -> EmotionalContext: ...


@dataclass(frozen=True, slots=True)
class ArousalCues:
    """The typed signs of intensity in a text, each counted (capped where more stops meaning more)."""

    exclamations: int
    capitals: int
    intensifiers: int
    stretched: int

    @classmethod
    def of(cls, text: str) -> ArousalCues:
        words = _WORD.findall(text)
        return cls(
            exclamations=min(3, len(_EXCLAIM.findall(text))),
            capitals=min(3, sum(1 for w in words if len(w) >= 2 and w.isupper() and w not in {"I", "OK"})),
            intensifiers=min(3, sum(1 for w in words if w.lower() in _INTENSIFIERS)),
            stretched=min(2, len(_STRETCHED.findall(text))),
        )

    def lift(self) -> float:
        return 0.1 * self.exclamations + 0.1 * self.capitals + 0.05 * self.intensifiers + 0.06 * self.stretched


class LexiconEmotion:
    """The default scorer: deterministic, offline, cheap enough to run on every turn."""

    baseline_arousal = 0.1
    """A calm, neutral statement ("I went to the store") still carries a little arousal."""

    def __init__(self) -> None:
        self._vader = _windowed_vader()

    def score(self, text: str) -> EmotionalContext:
        polarity = self._vader.polarity_scores(text)
        valence = max(-1.0, min(1.0, float(polarity["compound"])))
        charged = float(polarity["pos"]) + float(polarity["neg"])  # share of the words that carry feeling
        arousal = self.baseline_arousal + 0.35 * abs(valence) + 0.15 * charged + ArousalCues.of(text).lift()
        return EmotionalContext(valence=round(valence, 4), arousal=round(min(1.0, arousal), 4))


def _windowed_vader() -> Any:
    """VADER's analyzer with the same scores, in time near linear in a turn's length, where VADER's is quadratic.

    Two of its per-word checks lowercase the whole word list they are given, and each runs up to three times for
    every word in VADER's lexicon: they get a slice of six words instead. They read at most three words before the
    word and two after it, and are called only where the words they look back at exist, so the slice gives the
    same scores. LongMemEval's turns of about 1,000 characters: 1.05 -> 0.51 ms; a pasted document of 59,000
    characters, scored whole, 4.6 s -> 46 ms. And its check for "but" looks each word's value up with
    `list.index` and moves it with `pop` and `insert`: `_contrasted` does what that does with a heap (a 64,000
    character text with "but" in it: 417 -> 55 ms, as without "but"). The same scores on 4,617 LoCoMo and
    LongMemEval turns (755 of them with "but"), and in tests/test_save_decision.py."""
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    class Windowed(SentimentIntensityAnalyzer):  # type: ignore[misc]
        @staticmethod
        def _negation_check(valence: float, words: list[str], start_i: int, i: int) -> Any:
            first = max(0, i - 3)
            return SentimentIntensityAnalyzer._negation_check(valence, words[first : i + 3], start_i, i - first)

        @staticmethod
        def _special_idioms_check(valence: float, words: list[str], i: int) -> Any:
            first = max(0, i - 3)
            return SentimentIntensityAnalyzer._special_idioms_check(valence, words[first : i + 3], i - first)

        @staticmethod
        def _but_check(words: list[str], sentiments: list[float]) -> list[float]:
            lower = [str(w).lower() for w in words]
            if "but" not in lower or any(v != v for v in sentiments):  # a NaN is found by identity: VADER's own
                return cast(list[float], SentimentIntensityAnalyzer._but_check(words, sentiments))
            return _contrasted(sentiments, lower.index("but"))

    return Windowed()


def _contrasted(sentiments: list[float], but: int) -> list[float]:
    """VADER's `_but_check` as it behaves, in n log n: for each position in turn, the first position holding an
    equal value (`list.index`, so an earlier equal one, not always the position itself) is halved before the
    "but" and made half as large again after it. A step only changes a position at or before its own, so each
    step reads the value the text gave; each value's positions are kept in a heap, stale ones dropped on the way."""
    values = list(sentiments)
    where: dict[float, list[int]] = {}
    for position, value in enumerate(values):
        where.setdefault(value, []).append(position)  # in order: already a heap
    for value in sentiments:
        positions = where[value]
        while values[positions[0]] != value:  # moved to another value since
            heapq.heappop(positions)
        first = positions[0]
        if first == but:
            continue
        changed = values[first] = value * 0.5 if first < but else value * 1.5
        if changed != value:  # a zero stays where it is (as 0.0)
            heapq.heappush(where.setdefault(changed, []), first)
    return values
