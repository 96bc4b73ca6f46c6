"""Outcome labels for the decision log: whether a decision proved right, judged from what happened after it.
Pure functions; the `assess` sleep job gathers the evidence and writes the labels.

- A kept memory is **useful** if some retrieval returned it within the outcome window, else **unused**.
- A dropped turn was **missed** if, within the window, a retrieval in its namespace found nothing relevant (a gap)
  on a topic the turn spoke of (at least half the gap's keywords in the turn), else **not_needed**.
- A retrieval that returned nothing is a **miss**; one followed within the requery window by a similar query in
  the same namespace (the agent asked again: the first answer did not serve) is **unhelpful**; else **helpful**.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "do",
        "did",
        "does",
        "i",
        "you",
        "he",
        "she",
        "it",
        "we",
        "they",
        "me",
        "my",
        "your",
        "our",
        "their",
        "what",
        "when",
        "where",
        "who",
        "which",
        "how",
        "why",
        "that",
        "this",
        "these",
        "those",
        "there",
        "any",
        "some",
        "about",
    ]
)


def label_kept(accessed: bool) -> str:
    return "useful" if accessed else "unused"


def label_dropped(text: str, gaps: Iterable[Sequence[str]]) -> str:
    """Missed when a later gap's topic is in the turn: at least half of the gap's keywords occur in it."""
    words = set(_WORD.findall(text.lower()))
    for keywords in gaps:
        wanted = [k for k in (w.lower() for w in keywords) if k]
        if wanted and sum(_covered(k, words) for k in wanted) * 2 >= len(wanted):
            return "missed"
    return "not_needed"


def _covered(keyword: str, words: set[str]) -> bool:
    return all(part in words for part in _WORD.findall(keyword))


def label_retrieval(results: int, query: str, later: Iterable[str]) -> str:
    if results == 0:
        return "miss"
    return "unhelpful" if any(similar(query, other) for other in later) else "helpful"


def similar(a: str, b: str, *, floor: float = 0.5) -> bool:
    """Two queries ask the same thing when their content words overlap by at least `floor` (Jaccard)."""
    left, right = _content(a), _content(b)
    if not left or not right:
        return False
    return len(left & right) / len(left | right) >= floor


def _content(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP}


def _stem(word: str) -> str:
    """Enough stemming for queries asked twice ("live" and "living", "appointments" and "appointment")."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word.rstrip("e") if len(word) > 3 else word
