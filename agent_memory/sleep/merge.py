"""What a merge writes: the merged text (extractive when no LLM is configured), the memory that holds it, and the
synthetic queries generative replay checks it with.

Pure: no I/O. The extractive merge keeps what was said, in time order, and drops only what another member already
says or what states nothing (a reaction, a short question): a merged memory never says anything its sources did
not. Each piece keeps its speaker, and its date when the sources span more than one day.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from agent_memory.cognition.retrieval import query_words
from agent_memory.cognition.salience import is_reaction, sentences_of
from agent_memory.models import Memory, MemoryType, fresh_memory

REDUNDANT = 0.2
"""A sentence adding fewer than this share of new content words to what the merge already says is left out."""
MIN_NEW_WORDS = 3
"""A reaction or a question stays only if it brings at least this many new content words."""


def extractive_merge(members: Sequence[Memory]) -> str:
    """The members' sentences in time order; each speaker named when the speaker changes, each day dated when the
    members span more than one ("[2 Mar] Caroline: ... [9 Mar] ..."; the year too when they span years);
    redundant and empty sentences left out."""
    ordered = sorted(members, key=lambda m: (m.event_at, m.turn_number or 0))
    days = {m.event_at.date() for m in ordered}
    stamp = "" if len(days) == 1 else "[%-d %b %Y] " if len({d.year for d in days}) > 1 else "[%-d %b] "
    covered: set[str] = set()
    parts: list[str] = []
    last_day, last_label = None, None
    for member in ordered:
        label, sentences = sentences_of(member.content)
        kept = [s for s in sentences if _keep(s, covered)]
        if not kept:
            continue
        day = member.event_at.date()
        if day != last_day and stamp:
            parts.append(member.event_at.strftime(stamp).rstrip())
        if label != last_label or not parts:
            parts.append(label.rstrip())
        parts.append(" ".join(kept))
        last_day, last_label = day, label
    return " ".join(p for p in parts if p) if parts else _fallback(ordered)


def _keep(sentence: str, covered: set[str]) -> bool:
    words = set(query_words(sentence))
    new = words - covered
    if not new:
        return False
    small = len(new) < MIN_NEW_WORDS
    if (is_reaction(sentence) or sentence.endswith("?")) and small:
        return False
    if len(new) / len(words) < REDUNDANT:
        return False
    covered |= words
    return True


def _fallback(ordered: Sequence[Memory]) -> str:
    """Every sentence was empty or redundant: the longest member, as it was said."""
    return max(ordered, key=lambda m: len(m.content)).content


def replay_queries(member: Memory) -> list[str]:
    """What generative replay asks on a member's behalf when no LLM writes questions: one question made of its two
    best key phrases and its most informative sentence's content words ("career, Boston: what about applied
    master's program?"). One query a source: replay costs two retrievals per query."""
    _, sentences = sentences_of(member.content)
    informative = [s for s in sentences if not is_reaction(s)] or sentences
    best = max(informative, key=lambda s: len(query_words(s))) if informative else ""
    phrases = ", ".join(member.keywords[:2])
    words = [w for w in query_words(best) if w not in phrases.lower()][:8]
    if not words:
        return [phrases] if phrases else []
    return [f"{phrases}: what about {' '.join(words)}?" if phrases else f"What about {' '.join(words)}?"]


def merged_memory(
    members: Sequence[Memory], content: str, *, keywords: Sequence[str], entities: Sequence[str], now: datetime
) -> Memory:
    """The generation+1 memory a merge makes: dated by its latest source (it says what was known then), placed
    where that source was, holding the strongest of the sources' emotion, surprise and importance."""
    latest = max(members, key=lambda m: (m.event_at, m.turn_number or 0))
    types = Counter(m.memory_type for m in members).most_common()
    kind = types[0][0] if len(types) == 1 or types[0][1] > types[1][1] else MemoryType.SEMANTIC
    accessed = [m.last_accessed_at for m in members if m.last_accessed_at is not None]
    return fresh_memory(
        namespace=latest.namespace,
        memory_type=kind,
        content=content,
        keywords=keywords,
        entities=entities,
        created_at=now,
        event_at=latest.event_at,
        last_accessed_at=max(accessed) if accessed else None,
        access_count=sum(m.access_count for m in members),
        generation=max(m.generation for m in members) + 1,
        valence=round(sum(m.valence for m in members) / len(members), 4),
        arousal=max(m.arousal for m in members),
        surprise=max(m.surprise for m in members),
        importance=max(m.importance for m in members),
        confidence=round(min(m.confidence for m in members), 4),
        source_turn_id=latest.source_turn_id,
        session_id=latest.session_id,
        turn_number=latest.turn_number,
        role=latest.role,
    )
