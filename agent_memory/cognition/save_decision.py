"""Whether a turn becomes a memory. For now: every turn but a phatic one ("ok", "thanks!").

The full decision (emotion, surprise, LLM verdict, retrieval gaps) replaces `PhaticFilter` behind the same
`SaveDecider` Protocol without touching the manager.
"""

from __future__ import annotations

import re
from typing import Protocol

from agent_memory.models import DecisionPath, MemoryType, SaveDecision

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


class SaveDecider(Protocol):
    def decide(self, content: str, *, role: str) -> SaveDecision: ...


def is_phatic(content: str) -> bool:
    """True for short social noise: every word is a greeting, thanks, acknowledgement or filler."""
    words = _TOKEN.findall(content.lower())
    if not words:
        return not any(ch.isalnum() for ch in content)
    return len(words) <= 6 and all(w.strip("'") in _PHATIC_WORDS for w in words)


class PhaticFilter:
    """Keep every turn as an episodic memory except phatic ones."""

    def decide(self, content: str, *, role: str) -> SaveDecision:
        if is_phatic(content):
            return SaveDecision(
                save=False,
                reason="phatic: only greetings, thanks or acknowledgement",
                path=DecisionPath.RULE,
                confidence=1.0,
                importance=0.0,
                features={"phatic": 1.0},
            )
        words = len(content.split())
        return SaveDecision(
            save=True,
            reason=f"kept: a {role} turn of {words} words with content beyond social noise",
            path=DecisionPath.RULE,
            memory_type=MemoryType.EPISODIC,
            confidence=1.0,
            importance=0.5,
            features={"phatic": 0.0, "words": float(words)},
        )
