"""Compression: a cold memory's stored text cut to its salient sentences within a token cap (the sleep job
`compress`, issue #20). The log keeps every word; this decides which of them the memory goes on holding.

A sentence is salient when it carries what the memory is about (its key phrases and named entities), a number or a
date, or what the speaker says of themselves (what they did, like, plan or are). Reactions ("That sounds great!")
and boilerplate ("Let me know if you need anything else") are filler, whatever they mention. Sentences are taken
best first while they fit, then put back in the order they were said; a gap where sentences were left out is
marked " … ", so a reader knows the text was cut. A memory whose salient sentences do not fit at all keeps the
start of its best one. Pure: no I/O, the same cut on every machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent_memory.cognition.salience import sentence_marks, sentences_of

GAP = " … "
"""Between two kept sentences that were not next to each other."""
ELLIPSIS = "…"
_WORDS = re.compile(r"\S+")
_MARKER = re.compile(r"^(?:\d{1,3}[.)]|[-*•]|#+)$")
"""A list item's number or bullet, which the sentence split leaves on its own: it belongs to what follows."""


@dataclass(frozen=True, slots=True)
class Weights:
    """What each mark of salience adds to a sentence's score (measured on LongMemEval dev: docs/corrections.md)."""

    keyword: float = 2.0  # per key phrase of the memory the sentence holds
    entity: float = 2.0  # per named entity
    number: float = 1.0  # a number (an amount, a time, a count)
    date: float = 1.0  # a date or time word
    self_statement: float = 2.0  # the speaker on themselves: an event, a preference, a plan, a fact
    first_person: float = 1.0  # any other first-person sentence
    first: float = 1.0  # the first sentence: it usually names the topic


@dataclass(frozen=True, slots=True)
class Cut:
    """A compressed text and how much of the original it kept."""

    text: str
    kept: int  # sentences kept whole
    dropped: int  # sentences left out (a sentence cut short counts as kept)


def sentence_score(
    sentence: str, index: int, *, keywords: Sequence[str], entities: Sequence[str], weights: Weights = Weights()
) -> float:
    """How much of what the memory is about this sentence carries; 0 for filler."""
    marks = sentence_marks(sentence)
    if marks.filler:
        return 0.0
    lower = sentence.lower()
    score = weights.keyword * sum(_holds(lower, k) for k in keywords)
    score += weights.entity * sum(_holds(lower, e) for e in entities)
    score += weights.number * marks.number + weights.date * marks.time_ref
    if marks.self_statement:
        score += weights.self_statement
    elif marks.first_person:
        score += weights.first_person
    return score + (weights.first if index == 0 else 0.0)


def salient_cut(
    text: str,
    *,
    cap: int,
    count: Callable[[str], int],
    keywords: Sequence[str] = (),
    entities: Sequence[str] = (),
    weights: Weights = Weights(),
) -> Cut | None:
    """`text` cut to its salient sentences, at most `cap` tokens by `count`; None when it fits already."""
    if count(text) <= cap:
        return None
    label, sentences = _sentences(text)
    keywords = [k for k in keywords if k.strip()]
    entities = [e for e in entities if e.strip()]
    scores = [
        sentence_score(s, i, keywords=keywords, entities=entities, weights=weights) for i, s in enumerate(sentences)
    ]
    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    chosen: list[int] = []
    for i in ranked:
        if scores[i] <= 0 and chosen:
            break
        if count(_render(label, sentences, sorted([*chosen, i]))) <= cap:
            chosen.append(i)
    if not chosen:
        return Cut(shortened(label + sentences[ranked[0]], cap, count), 1, len(sentences) - 1)
    return Cut(_render(label, sentences, sorted(chosen)), len(chosen), len(sentences) - len(chosen))


def _sentences(text: str) -> tuple[str, list[str]]:
    label, found = sentences_of(text)
    merged: list[str] = []
    for sentence in found:
        if merged and _MARKER.match(merged[-1]):
            merged[-1] += " " + sentence
        else:
            merged.append(sentence)
    return label, merged


def _holds(lower: str, phrase: str) -> bool:
    phrase = phrase.lower()
    start = lower.find(phrase)
    while start >= 0:
        end = start + len(phrase)
        if (start == 0 or not lower[start - 1].isalnum()) and (end == len(lower) or not lower[end].isalnum()):
            return True
        start = lower.find(phrase, start + 1)
    return False


def _render(label: str, sentences: Sequence[str], chosen: Sequence[int]) -> str:
    parts: list[str] = []
    for n, i in enumerate(chosen):
        if n:
            parts.append(" " if i == chosen[n - 1] + 1 else GAP)
        parts.append(sentences[i])
    lead = ELLIPSIS + " " if chosen and chosen[0] > 0 else ""
    tail = " " + ELLIPSIS if chosen and chosen[-1] < len(sentences) - 1 else ""
    return label + lead + "".join(parts) + tail


def shortened(text: str, cap: int, count: Callable[[str], int]) -> str:
    """The words of `text` from its start that fit in `cap` with an ellipsis after them."""
    words = _WORDS.findall(text)
    low, high = 0, len(words)
    while low < high:  # the most words that fit
        mid = (low + high + 1) // 2
        if count(" ".join(words[:mid]) + " " + ELLIPSIS) <= cap:
            low = mid
        else:
            high = mid - 1
    return " ".join(words[:low]) + " " + ELLIPSIS if low else ELLIPSIS
