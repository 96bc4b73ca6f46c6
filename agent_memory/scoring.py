"""Pure scoring functions: no I/O, time passed in."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

import numpy as np

from agent_memory.config import DecayConfig


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]], *, k: int = 60, weights: Mapping[str, float] | None = None
) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score(d) = sum over layers of weight / (k + rank), rank 1-based. Best first.

    Ties are broken by the id's best rank in any layer, then by the id, so the order is deterministic.
    """
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for layer, ids in rankings.items():
        weight = 1.0 if weights is None else weights.get(layer, 1.0)
        for rank, item in enumerate(ids, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))


def decay_strength(
    *,
    age: timedelta,
    since_access: timedelta | None,
    access_count: int,
    arousal: float,
    surprise: float,
    generation: int,
    half_life: timedelta,
    generation_floor: float = 0.3,
) -> float:
    """How strongly a memory is still held, in (0, 1]: exponential forgetting in the time since it was last
    used (recency), with a half-life that grows with how often it was used (frequency) and with how arousing and
    surprising it was. A consolidated memory (generation >= 1) never falls below `generation_floor`.

    The sleep jobs store this as `decay_score`; retrieval calls it with the query's `now`, so both agree.
    """
    if half_life <= timedelta(0):
        raise ValueError(f"half_life must be positive, got {half_life}")
    idle = min(age, since_access) if since_access is not None else age
    idle = max(idle, timedelta(0))
    stretch = (1.0 + max(0.0, arousal) + 0.5 * max(0.0, surprise)) * (1.0 + math.log1p(max(0, access_count)))
    strength: float = 0.5 ** (idle / (half_life * stretch))
    return max(strength, generation_floor) if generation >= 1 else strength


class Remembered(Protocol):
    """What decay reads of a memory (a `Memory`, or a sleep job's lighter row)."""

    @property
    def event_at(self) -> datetime: ...
    @property
    def last_accessed_at(self) -> datetime | None: ...
    @property
    def access_count(self) -> int: ...
    @property
    def arousal(self) -> float: ...
    @property
    def surprise(self) -> float: ...
    @property
    def generation(self) -> int: ...


def memory_strength(memory: Remembered, now: datetime, decay: DecayConfig) -> float:
    """`decay_strength` of one memory at `now`, with the configured half-life and floor: what retrieval weighs,
    the decay job stores and the policy's compaction priority reads."""
    return decay_strength(
        age=now - memory.event_at,
        since_access=now - memory.last_accessed_at if memory.last_accessed_at else None,
        access_count=memory.access_count,
        arousal=memory.arousal,
        surprise=memory.surprise,
        generation=memory.generation,
        half_life=decay.half_life,
        generation_floor=decay.generation_floor,
    )


def nearest_gap(vector: np.ndarray, gaps: Sequence[tuple[str, np.ndarray]], floor: float) -> str | None:
    """The open retrieval gap whose query vector is closest to `vector` (cosine, unit vectors), if it is at least
    `floor` close."""
    best_id, best = None, floor
    for gap_id, gap_vector in gaps:
        score = float(gap_vector @ vector)
        if score >= best:
            best_id, best = gap_id, score
    return best_id


def with_previous(own: np.ndarray, previous: np.ndarray, weight: float) -> np.ndarray:
    """A short turn's vector: its own and the turn before it's, that one weighted, summed and re-normalised, so "It
    is bright orange" is found by what "it" was (the write path, and re-embedding, which must agree with it)."""
    mixed = own + weight * previous
    return np.asarray(mixed / max(float(np.linalg.norm(mixed)), 1e-12), dtype=np.float32)
