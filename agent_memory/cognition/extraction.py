"""Entities and keywords from a turn: proper-noun phrases plus YAKE-style key phrases. Offline and deterministic."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from agent_memory.cognition.keyphrases import key_phrases
from agent_memory.models import Extraction

_WORD = re.compile(r"[A-Za-z][\w'’-]*")
_SENTENCE_END = re.compile(r"[.!?:;\n]")
_CONTRACTIONS = ("n't", "'ll", "'ve", "'re", "'d", "'m")  # "Don't", "You'll": never a name
# Capitalised words that begin sentences or are pronouns say nothing about who or what a turn is about.
_NOT_NAMES = frozenset(
    [
        "i",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "im",
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "it's",
        "he",
        "she",
        "they",
        "we",
        "you",
        "my",
        "your",
        "our",
        "their",
        "his",
        "her",
        "them",
        "me",
        "us",
        "yes",
        "no",
        "ok",
        "okay",
        "hi",
        "hello",
        "hey",
        "thanks",
        "thank",
        "sure",
        "well",
        "so",
        "but",
        "and",
        "or",
        "if",
        "when",
        "what",
        "where",
        "who",
        "why",
        "how",
        "oh",
        "wow",
        "yeah",
        "yep",
        "nope",
        "hmm",
        "also",
        "however",
        "moreover",
        "furthermore",
        "nevertheless",
        "nonetheless",
        "therefore",
        "meanwhile",
        "just",
        "really",
        "maybe",
        "please",
        "sorry",
        "great",
        "good",
        "nice",
        "cool",
        "awesome",
        "congrats",
        "congratulations",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "today",
        "tomorrow",
        "yesterday",
        "let",
        "lets",
        "let's",
        "there",
        "here",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "will",
        "not",
        "is",
        "are",
        "was",
        "were",
        "be",
        "have",
        "has",
        "had",
        "went",
        "got",
        "made",
        "took",
        "saw",
        "met",
        "said",
        "told",
        "think",
        "thought",
        "know",
        "knew",
        "want",
        "wanted",
        "need",
        "needed",
        "love",
        "loved",
        "like",
        "liked",
        "hope",
        "glad",
        "happy",
        "sad",
        "tonight",
        "last",
        "next",
        "first",
        "then",
        "now",
        "still",
        "even",
        "only",
        "maybe",
        "perhaps",
        "definitely",
        "absolutely",
        "totally",
        "anyway",
        "actually",
        "honestly",
        "btw",
        "by",
        "for",
        "from",
        "in",
        "on",
        "at",
        "to",
        "of",
        "with",
        "about",
        "after",
        "before",
        "since",
        "until",
        "during",
        "all",
        "any",
        "some",
        "every",
        "each",
        "both",
        "many",
        "much",
        "more",
        "most",
        "few",
        "lots",
        "no",
        "none",
        "nothing",
        "something",
        "anything",
        "everything",
        "everyone",
        "someone",
        "anyone",
        "nobody",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "because",
        "though",
        "although",
        "while",
        "as",
        "than",
        "that's",
        "what's",
        "there's",
        "here's",
        "how's",
        "who's",
        "it'll",
        "we're",
        "they're",
        "you're",
        "i'd",
        "we've",
        "that'll",
        "am",
        "been",
        "being",
        "get",
        "gets",
        "getting",
        "go",
        "goes",
        "going",
        "come",
        "came",
        "coming",
        "take",
        "make",
        "makes",
        "keep",
        "see",
        "look",
        "looks",
        "feel",
        "feels",
        "felt",
        "try",
        "tried",
        "tell",
        "ask",
        "asked",
        "sounds",
        "seems",
        "guess",
        "wish",
        "hear",
        "heard",
        "remember",
        "check",
    ]
)
_MONTHS = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
)


ENTITY_RULES = 2
"""The version of the rules `proper_nouns` follows: 2 from 2026-12-06, when a sentence opener people write in lower
case stopped being a name. A store whose entities followed other rules has them found again (entity_refresh.py)."""


class SimpleExtractor:
    """Proper-noun phrases ("Melanie", "New York") and key phrases; both lower-cased and deduplicated."""

    def __init__(self, *, max_keywords: int = 8, max_entities: int = 12) -> None:
        self.max_keywords = max_keywords
        self.max_entities = max_entities

    @property
    def rules(self) -> str:
        """What decides a text's entities: the rules' version and how many are kept (migration 0031)."""
        return f"proper-nouns-{ENTITY_RULES}/{self.max_entities}"

    def extract(self, text: str) -> Extraction:
        return Extraction(entities=self.entities(text), keywords=self.keywords(text))

    def entities(self, text: str) -> tuple[str, ...]:
        """Proper-noun phrases: a few regular expressions, cheap enough for the write path."""
        return tuple(proper_nouns(text)[: self.max_entities])

    def keywords(self, text: str) -> tuple[str, ...]:
        """Key phrases by YAKE's statistics (cognition/keyphrases.py): 0.5 ms a conversation turn, 2 ms a long one.
        The write path still leaves them to the projector (pending_keywords)."""
        return key_phrases(text, self.max_keywords)


def proper_nouns(text: str) -> list[str]:
    """Runs of capitalised words that are not sentence openers or function words."""
    found: list[str] = []
    run: list[str] = []
    sentence_start = True
    position = 0
    for match in _WORD.finditer(text):
        gap = text[position : match.start()]
        position = match.end()
        if _SENTENCE_END.search(gap):
            _flush(run, found)
            sentence_start = True
        word = match.group()
        lower = word.lower().replace("’", "'")
        is_name = word[0].isupper() and lower not in _NOT_NAMES and len(word) > 1 and not lower.endswith(_CONTRACTIONS)
        if is_name and (not sentence_start or _opens_with_name(word, lower)):
            run.append(word.strip("'’"))
        else:
            _flush(run, found)
        sentence_start = False
    _flush(run, found)
    return list(dict.fromkeys(found))


def _opens_with_name(word: str, lower: str) -> bool:
    """A capitalised sentence opener is a name unless it looks like an inflected word or is a word people write in
    lower case ("Consider", "Fix", "Warm-up": common_words.txt). A name that opens a sentence and is also a common
    word ("Mark", "Rose") is lost there, and found wherever else the text names it."""
    if lower in _MONTHS or word.isupper() or any(c.isupper() for c in word[1:]):
        return True
    if lower.endswith(("ing", "ed", "ly", "'s", "s'")):
        return False
    return not all(part in common_words() for part in lower.split("-"))


@cache
def common_words() -> frozenset[str]:
    """The lower-case words of scripts/common_words.py's list (23,556 of them), read once, on first use."""
    text = resources.files("agent_memory.cognition").joinpath("data/common_words.txt").read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


def _flush(run: list[str], found: list[str]) -> None:
    if run:
        found.append(" ".join(run).lower())
        run.clear()
