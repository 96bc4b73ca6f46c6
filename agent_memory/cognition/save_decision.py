"""Phatic turns ("ok", "thanks!", "haha nice"): social noise that is never kept, whatever else is said about it.

The rest of the save decision is in policy/controller.py (the rules), save_decider.py (which asks them and the LLM)
and write_path.py (the signals it sees).
"""

from __future__ import annotations

import re

_PHATIC_WORDS = frozenset(
    [
        "ok",
        "okay",
        "k",
        "kk",
        "sure",
        "thanks",
        "thank",
        "thx",
        "ty",
        "you",
        "yes",
        "yeah",
        "yep",
        "yup",
        "no",
        "nope",
        "nah",
        "hi",
        "hello",
        "hey",
        "bye",
        "goodbye",
        "cool",
        "nice",
        "great",
        "good",
        "lol",
        "haha",
        "hahaha",
        "hmm",
        "hm",
        "mm",
        "oh",
        "ah",
        "alright",
        "right",
        "got",
        "it",
        "np",
        "welcome",
        "cheers",
        "awesome",
        "fine",
        "sounds",
        "gotcha",
        "morning",
        "evening",
        "night",
        "see",
        "ya",
        "later",
        "too",
        "much",
        "very",
        "so",
        "all",
        "lot",
        "a",
        "the",
        "will",
        "do",
        "ttyl",
        "brb",
        "wow",
        "uh",
        "huh",
        "indeed",
    ]
)
_TOKEN = re.compile(r"[a-z']+")


def is_phatic(content: str) -> bool:
    """True for short social noise: every word is a greeting, thanks, acknowledgement or filler."""
    words = _TOKEN.findall(content.lower())
    if not words:
        return not any(ch.isalnum() for ch in content)
    return len(words) <= 6 and all(w.strip("'") in _PHATIC_WORDS for w in words)
