"""How retrieval ranks: the pure part. Layer rankings, graph steps and the query's signals go in; ranked, explained
results come out. No I/O here, and time is an argument, so every weight can be tested and ablated.

score = weighted RRF over the search layers
      + graph: a neighbour's share of its seed's score, halved per further hop
      + session: the mean of the best fused scores in the memory's session
      then * mood congruence * decay * time window * role * speaker
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from agent_memory.cognition.evidence import weigh_keyword_evidence
from agent_memory.cognition.speakers import said_by
from agent_memory.cognition.timewords import TimeWindow
from agent_memory.config import DecayConfig, RetrievalConfig
from agent_memory.models import (
    EmotionalContext,
    LayerHit,
    Media,
    Memory,
    MemoryStatus,
    RetrievalResult,
    Role,
)
from agent_memory.projection_models import GraphStep
from agent_memory.scoring import memory_strength, reciprocal_rank_fusion

SESSION_TOP = 3  # a session's evidence is the mean of its best three fused scores
_ABOUT_ASSISTANT = re.compile(r"\b(you|your|yours|assistant)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Signals:
    """What the query says beyond its words."""

    now: datetime
    mood: EmotionalContext | None = None
    window: TimeWindow | None = None
    prefer_assistant: bool = False
    words: tuple[str, ...] = ()  # the query's content words, as the keyword layer searched them
    speaker: str = ""  # the one transcript speaker the query names (cognition/speakers.py), or ""


@dataclass(frozen=True, slots=True)
class Ranked:
    results: list[RetrievalResult]  # active memories, best first
    inactive: list[Memory]  # candidates that were found but are superseded, merged or erased


def prefers_assistant(query: str) -> bool:
    """A question about what the assistant said ("what did you recommend?") ranks assistant turns first."""
    return bool(_ABOUT_ASSISTANT.search(query))


def layer_weights(config: RetrievalConfig) -> dict[str, float]:
    return {
        "keyword": config.keyword_weight,
        "semantic": config.semantic_weight,
        "grep": config.grep_weight,
        "time": config.time_layer_weight,
        "image": config.image_weight,
    }


Fused = tuple[dict[str, float], dict[str, dict[str, LayerHit]]]  # fused score and each layer's hit, by memory


def fuse_layers(
    rankings: Mapping[str, Sequence[tuple[str, float]]],
    *,
    weights: Mapping[str, float],
    rrf_k: int,
    method: str = "rrf",
) -> Fused:
    """Weighted fusion, by reciprocal rank ('rrf') or by blending each layer's scores scaled to its best hit
    ('blend'); every memory keeps each layer's rank and raw score."""
    active = {name: hits for name, hits in rankings.items() if weights.get(name, 1.0) > 0}
    ranked = {n: [i for i, _ in h] for n, h in active.items()}
    if method == "blend":
        fused = blend_scores(active, weights=weights)
    elif method == "hybrid":  # RRF, plus each layer's scaled score in RRF's unit: ranks decide, margins break ties
        rrf = dict(reciprocal_rank_fusion(ranked, k=rrf_k, weights=weights))
        blend = blend_scores(active, weights=weights)
        fused = {i: rrf[i] + 0.5 * blend.get(i, 0.0) / (rrf_k + 1) for i in rrf}
    else:
        fused = dict(reciprocal_rank_fusion(ranked, k=rrf_k, weights=weights))
    layers: dict[str, dict[str, LayerHit]] = {}
    for name, hits in active.items():
        for rank, (memory_id, score) in enumerate(hits, 1):
            layers.setdefault(memory_id, {}).setdefault(name, LayerHit(name, rank, score))
    return fused, layers


def blend_scores(
    rankings: Mapping[str, Sequence[tuple[str, float]]], *, weights: Mapping[str, float]
) -> dict[str, float]:
    """sum over layers of weight * score / best score in that layer (negative scores count as 0). Unlike RRF it
    keeps how far apart the hits are: a BM25 hit twice as strong as the next stays ahead of it."""
    fused: dict[str, float] = {}
    for name, hits in rankings.items():
        top = max((score for _, score in hits), default=0.0)
        if top <= 0:
            continue
        weight = weights.get(name, 1.0)
        for memory_id, score in hits:
            fused[memory_id] = fused.get(memory_id, 0.0) + weight * max(score, 0.0) / top
    return fused


def seeds_of(base: Mapping[str, float], count: int) -> list[str]:
    """Where the graph walk starts: the best fused hits."""
    return [i for i, _ in sorted(base.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]


def graph_scores(
    base: Mapping[str, float], steps: Sequence[GraphStep], *, weight: float, seeds: Collection[str] = ()
) -> dict[str, tuple[float, GraphStep]]:
    """Each reached memory takes the best share of a seed's score: weight * seed score / 2^(hops - 1). The seeds
    themselves gain nothing from each other: the walk brings in new memories, it does not re-rank the hits."""
    best: dict[str, tuple[float, GraphStep]] = {}
    for step in steps:
        if step.memory_id in seeds:
            continue
        value = weight * base.get(step.seed, 0.0) / 2 ** (step.hops - 1)
        if value > best.get(step.memory_id, (0.0, step))[0]:
            best[step.memory_id] = (value, step)
    return best


def session_scores(scores: Mapping[str, float], memories: Mapping[str, Memory]) -> dict[tuple[str, str], float]:
    """The mean of each session's best SESSION_TOP scores: sessions that match as a whole stand out."""
    grouped: dict[tuple[str, str], list[float]] = {}
    for memory_id, score in scores.items():
        memory = memories.get(memory_id)
        if memory is not None and memory.session_id is not None:
            grouped.setdefault((memory.namespace, memory.session_id), []).append(score)
    return {key: sum(sorted(v, reverse=True)[:SESSION_TOP]) / SESSION_TOP for key, v in grouped.items()}


def rank(
    rankings: Mapping[str, Sequence[tuple[str, float]]],
    steps: Sequence[GraphStep],
    memories: Mapping[str, Memory],
    signals: Signals,
    *,
    config: RetrievalConfig,
    decay: DecayConfig,
    fused: tuple[Mapping[str, float], Mapping[str, Mapping[str, LayerHit]]] | None = None,
) -> Ranked:
    """Fuse, walk, lift and weight every candidate; return them all, best first, each explained. `fused` is
    fuse_layers' answer for these rankings when the caller already has it (the walk's seeds came from it)."""
    if fused is None:
        fused = fuse_layers(rankings, weights=layer_weights(config), rrf_k=config.rrf_k, method=config.fusion)
    base, layers = fused
    if config.keyword_evidence > 0 and signals.words and rankings.get("keyword"):
        base = weigh_keyword_evidence(
            base,
            layers,
            memories,
            signals.words,
            full=config.keyword_evidence,
            weight=config.keyword_weight,
            top=max(score for _, score in rankings["keyword"]),
            rrf_k=config.rrf_k,
            method=config.fusion,
        )
    # Session lift and neighbour hops are for short turns of text: an image is ranked by what it looks like, or else
    # a picture from a matching session would outrank the very picture asked about; and a turn long when said (its
    # logged length, which compression does not shorten) carries its own meaning.
    local = {i for i, m in memories.items() if m.media is Media.TEXT and m.said_chars <= config.locality_max_chars}
    # A derived memory (a digest, a merge) gathers statements from many turns and sessions: as a seed of the walk it
    # lifted every turn it came from and every memory sharing an entity with any of them. Without, after a sleep
    # cycle, MRR rose in every fold of both benchmarks (docs/benchmarks.md, "Derived memories seed no walk").
    steps = [s for s in steps if (seed := memories.get(s.seed)) is None or seed.generation == 0]
    walked = {
        i: found
        for i, found in graph_scores(
            base, steps, weight=config.graph_weight, seeds=seeds_of(base, config.graph_seeds)
        ).items()
        if found[1].relation != "NEXT" or i in local
    }
    scores = {i: _with_graph(base, i, walked.get(i)) for i in base.keys() | walked.keys()}
    active = {i: m for i, m in memories.items() if m.status is MemoryStatus.ACTIVE}
    sessions = session_scores(base, active) if config.session_weight > 0 else {}
    scored, inactive = [], []
    for memory_id, score in scores.items():
        memory = memories.get(memory_id)
        if memory is None:
            continue
        if memory.status is not MemoryStatus.ACTIVE:
            inactive.append(memory)
            continue
        hits = dict(layers.get(memory_id, {}))
        if memory_id in walked:
            value, step = walked[memory_id]
            hits["graph"] = LayerHit(f"graph:{step.relation}", step.hops, value)
        key = (memory.namespace, memory.session_id or "")
        if memory_id in local and key in sessions:
            lift = config.session_weight * sessions[key]
            hits["session"] = LayerHit("session", 0, lift)
            score += lift
        score = _weigh(score, memory, signals, hits, config=config, decay=decay)
        scored.append((score, base.get(memory_id, 0.0), memory, hits))
    # A tie goes to the memory with more evidence of its own: the walk lifts a neighbour up to its seed's score,
    # never past it, and the id (time order) must not then put the neighbour first.
    scored.sort(key=lambda s: (-s[0], -s[1], s[2].memory_id))
    results = [RetrievalResult(memory=m, score=s, rank=r, layers=h) for r, (s, _, m, h) in enumerate(scored, 1)]
    return Ranked(results, inactive)


def _with_graph(base: Mapping[str, float], memory_id: str, walked: tuple[float, GraphStep] | None) -> float:
    """A neighbour's own score plus its share of the seed's, never above the seed: the walk brings memories in
    next to the hit that found them; it does not put them ahead of it."""
    own = base.get(memory_id, 0.0)
    if walked is None:
        return own
    value, step = walked
    return max(own, min(own + value, base.get(step.seed, 0.0)))


def _weigh(
    score: float,
    memory: Memory,
    signals: Signals,
    hits: dict[str, LayerHit],
    *,
    config: RetrievalConfig,
    decay: DecayConfig,
) -> float:
    """The multiplicative signals, each recorded in the explanation as a factor."""
    factors: dict[str, float] = {}
    if signals.mood is not None and config.mood_weight > 0:
        factors["mood"] = 1.0 + config.mood_weight * mood_congruence(memory, signals.mood)
    if config.decay_weight > 0:
        strength = memory_strength(memory, signals.now, decay)
        factors["decay"] = 1.0 - config.decay_weight * (1.0 - strength)
    if signals.window is not None:
        factors["time"] = _time_factor(memory.event_at, signals.window, config)
    if config.user_weight > 0 and memory.role is not None and memory.media is Media.TEXT:
        favoured = Role.ASSISTANT if signals.prefer_assistant else Role.USER
        factors["role"] = 1.0 + config.user_weight if memory.role is favoured else 1.0
    if signals.speaker and config.speaker_weight > 0 and said_by(memory.content) == signals.speaker:
        factors["speaker"] = 1.0 + config.speaker_weight
    for name, factor in factors.items():
        hits[name] = LayerHit(name, 0, factor)
        score *= factor
    return score


def _time_factor(at: datetime, window: TimeWindow, config: RetrievalConfig) -> float:
    if in_window(at, window):
        return 1.0 + config.time_boost
    if window.end is not None and at >= window.end:  # said after: it can tell of the window's time
        return config.time_penalty_after
    return config.time_penalty


def in_window(at: datetime, window: TimeWindow) -> bool:
    return (window.start is None or at >= window.start) and (window.end is None or at < window.end)


def mood_congruence(memory: Memory, mood: EmotionalContext) -> float:
    """1 when the memory's valence and arousal equal the mood's, falling to 0 at the far corner."""
    distance = math.hypot(memory.valence - mood.valence, memory.arousal - mood.arousal)
    return 1.0 - distance / math.hypot(2.0, 1.0)
