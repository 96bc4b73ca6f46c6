"""What a query says before any store is searched: its time window or event anchor, the words the keyword layer
looks for, and the terms grep looks for. Pure, and linear in the query's length but not cheap: about 0.5 ms for a
question of 200 characters, 2 ms at 1,000, 20 ms at 4,000 and 0.5 s for a 64,000-character paste (the time
phrases' patterns run over the text up to five times). So recall.py reads a query longer than LONG_QUERY_CHARS on
a worker thread: the event loop serves the other callers meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agent_memory.cognition.grep_terms import grep_terms
from agent_memory.cognition.retrieval import query_words
from agent_memory.cognition.timewords import TimeQuery, parse_time_query, without_time_phrases
from agent_memory.config import RetrievalConfig

LONG_QUERY_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class QueryReading:
    parsed: TimeQuery  # the window or anchor, and the query without the phrase that gave it
    words: tuple[str, ...]  # what the keyword layer looks for, and what keyword evidence counts
    terms: tuple[str, ...]  # what grep looks for: identifiers, numbers, quotes, with no time phrase


def read_query(text: str, *, now: datetime, config: RetrievalConfig) -> QueryReading:
    """`text` read for the layers: a date ("in May 2023") names a window of event times for the time layer, so
    neither the keyword layer nor grep looks for it as a literal (nor for a second time phrase, for grep)."""
    parsed = parse_time_query(text, now=now, anchors=config.event_anchors)
    rest = parsed.remainder or text
    spoken = without_time_phrases(rest, now=now) if rest else rest
    terms = grep_terms(spoken, names=config.grep_names) if spoken else []
    return QueryReading(parsed, tuple(query_words(rest)), tuple(terms))
