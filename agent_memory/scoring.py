"""Pure scoring functions: no I/O, time passed in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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
