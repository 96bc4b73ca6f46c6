"""Query shaping for the keyword layer: an FTS5 expression that cannot inject operators."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "about",
        "after",
        "before",
        "did",
        "does",
    ]
)


def query_words(text: str) -> list[str]:
    """The content words of a query, lowercased, each once, at most 32."""
    words = _lowered(text)
    kept = [w for w in words if _content(w)] or words
    return list(dict.fromkeys(w.replace('"', "") for w in kept))[:32]


def content_words(text: str) -> set[str]:
    """Every content word of a text, lowercased, as query_words reads them, without its cap and order."""
    return {w for w in _lowered(text) if _content(w)}


def _lowered(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _TOKEN.findall(text)]


def _content(word: str) -> bool:
    return word not in STOPWORDS and (len(word) > 1 or word.isdigit())


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression: each content word quoted (no operator injection), OR-ed for BM25."""
    return " OR ".join(f'"{w}"' for w in query_words(text))
