"""The lifecycle figure: what a full sleep cycle does to a benchmark's store. After the questions are scored on
the store as ingested, every sleep job runs once (forgetting policies, decay, tiering, compression, consolidation with
generative replay, digests, keyword reweighting and dream links (both off by default), outcome assessment, index upkeep) at the time of the
last question, and compression and the digest job, if they stopped at their time budget (`deferred`), run again
until they have caught up, as the daemon's next runs would; then the stored tokens are counted again and the same questions asked again. A consolidated memory or
a digest counts through its lineage: finding it finds every turn it was made from (harness._turn_keys).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent_memory.bench.questions import Question
from agent_memory.manager import MemoryManager
from agent_memory.sleep.jobs import run_cycle, run_job

if TYPE_CHECKING:
    from agent_memory.bench.harness import Scores


CATCH_UP_JOBS = ("compress", "digest")
"""Jobs run again until they report nothing deferred: the digest job stops after `sleep.digest_budget` (10 s, as it
runs hourly) and compression after `sleep.compress_budget`, and a benchmark's store is a bulk import their next runs
would finish. Consolidation keeps its single run (at most `sleep.compaction_budget`), as issue #5 measured it."""
CATCH_UP_RUNS = 50
"""At most this many extra runs of each."""


async def stored_tokens(manager: MemoryManager, *, digests: bool = False) -> int:
    """Tokens in the content of every active memory but the digests (with `digests`, of the digests alone), by
    the manager's token counter."""
    texts = await manager.records.stored_texts(digests=digests)
    return sum(manager.token_counter.count(text) for text in texts)


async def run_lifecycle(
    manager: MemoryManager,
    questions: Sequence[Question],
    *,
    budgets: Sequence[int],
    before: dict[int, Scores],
    headline: Sequence[str] | None,
) -> dict[str, Any]:
    from agent_memory.bench.harness import ask  # the harness calls this module

    tokens_before = await stored_tokens(manager)
    digests_before = await stored_tokens(manager, digests=True)
    now = max(q.asked_at for q in questions)
    started = time.perf_counter()
    runs = await run_cycle(manager, now=now)
    catch_up = 0
    totals: dict[str, dict[str, int]] = {}  # a caught-up job's counts summed over its runs
    for index, run in enumerate(runs):  # compression and digests go on where they stopped, as the next runs would
        extra, totals[run.job] = 0, _numbers(run.counts)
        while run.job in CATCH_UP_JOBS and run.counts.get("deferred") and extra < CATCH_UP_RUNS:
            run = runs[index] = await run_job(manager, run.job, now=now)
            extra += 1
            totals[run.job] = {k: v + totals[run.job].get(k, 0) for k, v in _numbers(run.counts).items()}
        catch_up += extra
    seconds = time.perf_counter() - started
    tokens_after = await stored_tokens(manager)
    digests_after = await stored_tokens(manager, digests=True)
    with_digests = (tokens_before + digests_before, tokens_after + digests_after)
    after, _ = await ask(manager, questions, budgets=budgets)
    recall = {}
    for budget in budgets:
        was = before[budget].summary(headline)["pooled"]["recall"]
        now_recall = after[budget].summary(headline)["pooled"]["recall"]
        recall[str(budget)] = {"before": was, "after": now_recall, "change": round(now_recall - was, 4)}
    return {
        "sleep_at": now.isoformat(),
        "cycle_seconds": round(seconds, 2),
        "catch_up_runs": catch_up,
        "jobs": {
            run.job: {"status": run.status, "counts": dict(run.counts), "error": run.error, "total": totals[run.job]}
            for run in runs
        },
        "stored_tokens": {  # the digests apart: they add a way in to what their sources say, and repeat it
            "before": tokens_before,
            "after": tokens_after,
            "shrink": round(1 - tokens_after / tokens_before, 4) if tokens_before else 0.0,
            "digests": digests_after,
            "digests_before": digests_before,
            "shrink_with_digests": round(1 - with_digests[1] / with_digests[0], 4) if with_digests[0] else 0.0,
        },
        "recall": recall,
        "after": {str(b): s.summary(headline) for b, s in after.items()},
    }


def _numbers(counts: Mapping[str, Any]) -> dict[str, int]:
    """The counts that add up over runs (not compression's `cap`, the same in each)."""
    return {k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool) and k != "cap"}
