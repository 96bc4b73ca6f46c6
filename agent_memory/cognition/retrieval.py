"""Retrieval, first version: the pure parts (query shaping, fusion, mood weighting, explanations).

The manager runs the layers (FTS5 BM25 and Qdrant) concurrently and hands their rankings here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from agent_memory.models import EmotionalContext, LayerHit, Memory, MemoryStatus, RetrievalResult
from agent_memory.scoring import reciprocal_rank_fusion

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


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression: each content word quoted (no operator injection), OR-ed for BM25."""
    words = [w.lower().replace("’", "'") for w in _TOKEN.findall(text)]
    kept = [w for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())] or words
    unique = list(dict.fromkeys(w.replace('"', "") for w in kept))
    return " OR ".join(f'"{w}"' for w in unique[:32])


def mood_congruence(memory: Memory, mood: EmotionalContext) -> float:
    """1 when the memory's valence and arousal equal the mood's, falling to 0 at the far corner."""
    distance = math.hypot(memory.valence - mood.valence, memory.arousal - mood.arousal)
    return 1.0 - distance / math.hypot(2.0, 1.0)


def fuse(
    rankings: Mapping[str, Sequence[tuple[str, float]]],
    memories: Mapping[str, Memory],
    *,
    k: int,
    rrf_k: int,
    mood: EmotionalContext | None = None,
    mood_weight: float = 0.0,
) -> list[RetrievalResult]:
    """Reciprocal rank fusion over the layers, then mood-congruent weighting; inactive memories dropped."""
    fused = reciprocal_rank_fusion({name: [i for i, _ in hits] for name, hits in rankings.items()}, k=rrf_k)
    hits = {
        name: {memory_id: LayerHit(name, rank, score) for rank, (memory_id, score) in enumerate(ranked, 1)}
        for name, ranked in rankings.items()
    }
    scored = []
    for memory_id, score in fused:
        memory = memories.get(memory_id)
        if memory is None or memory.status is not MemoryStatus.ACTIVE:
            continue
        layers = {name: found[memory_id] for name, found in hits.items() if memory_id in found}
        if mood is not None and mood_weight > 0:
            congruence = mood_congruence(memory, mood)
            layers["mood"] = LayerHit("mood", 0, congruence)
            score *= 1.0 + mood_weight * congruence
        scored.append((score, memory, layers))
    scored.sort(key=lambda s: -s[0])
    return [
        RetrievalResult(memory=memory, score=score, rank=rank, layers=layers)
        for rank, (score, memory, layers) in enumerate(scored[:k], 1)
    ]
