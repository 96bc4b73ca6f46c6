"""Who a question is about, in a namespace whose memories are a transcript ("Melanie: I signed up for pottery").

In a transcript every memory opens with its speaker's name and the other speakers address them by it ("Thanks,
Melanie!"), so a speaker's name is in most of the namespace's memories. In a question it then says who, not what:
embedded with the question, the name draws every memory that holds it, whatever it is about ("What activities does
Melanie partake in?" ranked "Caroline: Yep, Melanie! Being ourselves is such a great feeling" first). So the vector
layers embed the question without the speakers' names (`without_names`), and the ranking lifts what the one speaker
it names said (`said_by`, `retrieval.speaker_weight`). The keyword layer keeps every word: BM25 already gives a name
held by most memories almost no weight.

A label counts as a speaker only in a transcript: at least two labels each open `MIN_SHARE` of the namespace's
memories (and `MIN_MEMORIES`), so a store of notes that often open with "Note:" has none, and a store of a user's
own turns (no labels) is ranked as it always was. Pure: the counts come from storage (speakers.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from agent_memory.cognition.digest import OPENING
from agent_memory.cognition.extraction import common_words
from agent_memory.cognition.salience import speaker_label

MIN_SHARE = 0.05
"""A label opens at least this share of a namespace's memories to be one of its transcript's speakers."""
MIN_MEMORIES = 3
MIN_SPEAKERS = 2
"""A transcript is a conversation: with one frequent label only, the label names no one in particular."""
_WORDS = re.compile(r"\w")
_BEFORE_A_WORD = frozenset(" \t\n\"'“‘(")


def transcript_speakers(labels: Mapping[str, int], memories: int) -> tuple[str, ...]:
    """The labels (label -> memories it opens) that are a transcript's speakers, most frequent first; none unless
    MIN_SPEAKERS labels each open MIN_SHARE of the `memories` (and MIN_MEMORIES). A one-letter label ("Q:", "A:")
    marks a question and its answer, not a person."""
    least = max(MIN_MEMORIES, MIN_SHARE * memories)
    frequent = sorted((s for s, count in labels.items() if len(s) > 1 and count >= least), key=lambda s: -labels[s])
    return tuple(frequent) if len(frequent) >= MIN_SPEAKERS else ()


def _name_pattern(name: str) -> re.Pattern[str]:
    """A name as a question writes it: as labelled, or, for a label in capitals ("MELANIE:", as scripts and some
    exports write them), in any case."""
    return re.compile(rf"\s*\b{re.escape(name)}(?:['’]s)?\b", re.IGNORECASE if name.isupper() else 0)


def named(question: str, speakers: Sequence[str]) -> tuple[str, ...]:
    """The speakers `question` names (the whole name, case as labelled; "Melanie's" names Melanie). A name that is
    also a word people write in lower case does not count where it opens a sentence ("Will I see her?" names no
    Will), as the entity extractor reads it (extraction.common_words)."""
    return tuple(
        name
        for name in speakers
        if any(_names(question, found, name) for found in _name_pattern(name).finditer(question))
    )


def _names(question: str, found: re.Match[str], name: str) -> bool:
    at = found.start() + len(found.group(0)) - len(found.group(0).lstrip())
    if not question[at].isupper():  # "when will she come" names no WILL
        return False
    while at > 0 and question[at - 1] in _BEFORE_A_WORD:
        at -= 1
    opens = at == 0 or question[at - 1] in ".!?:"
    return not opens or name.casefold() not in common_words()


def without_names(question: str, names: Sequence[str]) -> str:
    """`question` without `names` (and their possessive), spaces tidied: "What activities does Melanie partake in?"
    -> "What activities does partake in?". A question that would keep no word is returned as it is."""
    text = question
    for name in names:
        text = _name_pattern(name).sub("", text)
    text = " ".join(text.split())
    return text if _WORDS.search(text) and text != " ".join(question.split()) else question


def said_by(content: str) -> str:
    """Who said a memory: its transcript label ("Melanie" for "Melanie: ..." or a merge's "[6 Jul] Melanie: ..."),
    a digest's speaker ("Melanie, in their own words: ..."), or ""."""
    if label := speaker_label(content):
        return label
    cut = content.find(OPENING)
    return content[:cut] if cut > 0 and "\n" not in content[:cut] else ""
