"""Valence and arousal for a turn, offline: VADER's lexicon for valence, its intensity plus typed cues for arousal.

VADER (vaderSentiment) ships its lexicon in the wheel, runs in ~0.1 ms a turn and already weighs negation,
"but", degree words and capitals into its compound score. Arousal is not something VADER reports, so it is
built here from how strongly the text leans either way and from the cues people use to shout: exclamation
marks, words in capitals, intensifiers and stretched letters ("sooo"). A caller's own emotional context always
wins over this scorer; the manager records which one was used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

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
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self._vader = SentimentIntensityAnalyzer()

    def score(self, text: str) -> EmotionalContext:
        polarity = self._vader.polarity_scores(text)
        valence = max(-1.0, min(1.0, float(polarity["compound"])))
        charged = float(polarity["pos"]) + float(polarity["neg"])  # share of the words that carry feeling
        arousal = self.baseline_arousal + 0.35 * abs(valence) + 0.15 * charged + ArousalCues.of(text).lift()
        return EmotionalContext(valence=round(valence, 4), arousal=round(min(1.0, arousal), 4))
