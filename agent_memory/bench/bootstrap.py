"""Bootstrap intervals over questions grouped by conversation (issue #22): what every figure of the benchmarks and
every difference between settings is reported with. A conversation's questions are not independent (they share
its turns), so a draw resamples the conversations, then the questions within each; where every question has its
own haystack (LongMemEval), each group holds one question and this is the plain bootstrap over questions."""

from __future__ import annotations

import random
import statistics

Rows = dict[str, list[float]]  # conversation -> per-question figure, in question order

DRAWS = 2000
SEED = 22


def resampled_means(rows: Rows, *, draws: int = DRAWS, seed: int = SEED) -> list[float]:
    """The pooled mean of `draws` resamplings (conversations, then questions within each), sorted."""
    rng, groups = random.Random(seed), sorted(rows)
    means = []
    for _ in range(draws):
        drawn = [x for g in rng.choices(groups, k=len(groups)) for x in rng.choices(rows[g], k=len(rows[g]))]
        means.append(statistics.fmean(drawn))
    means.sort()
    return means


def interval(rows: Rows, *, draws: int = DRAWS, seed: int = SEED) -> tuple[float, float, float]:
    """The pooled mean of `rows` and its 95% percentile interval."""
    means = resampled_means(rows, draws=draws, seed=seed)
    pooled = statistics.fmean(x for values in rows.values() for x in values)
    return pooled, means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def paired_interval(after: Rows, before: Rows, *, draws: int = DRAWS, seed: int = SEED) -> tuple[float, float, float]:
    """The pooled mean difference, question by question, of `after` against `before`, and its 95% interval."""
    return interval(
        {g: [a - b for a, b in zip(after[g], before[g], strict=True)] for g in before}, draws=draws, seed=seed
    )
