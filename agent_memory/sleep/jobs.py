"""Running a sleep job once: each run leaves a report row (started, finished, counts, error) whether it succeeds
or fails, and a failure never escapes as anything but that row and a logged traceback.

The scheduler (the daemon) and the CLI (`agent-memory decay`, `agent-memory tier`) both call `run_job`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from agent_memory.errors import InvalidInput
from agent_memory.manager import MemoryManager
from agent_memory.models import JobRun
from agent_memory.policy.export import export_policy
from agent_memory.sleep.assess import run_assess
from agent_memory.sleep.compress import run_compress
from agent_memory.sleep.consolidation import run_compaction
from agent_memory.sleep.decay import run_decay, run_tiering
from agent_memory.sleep.dream import run_dream
from agent_memory.sleep.forget import run_forgetting
from agent_memory.sleep.index import run_index
from agent_memory.sleep.keywords import run_reweight

log = logging.getLogger(__name__)
Job = Callable[..., Awaitable[dict[str, Any]]]
"""(manager, now, **options) -> the counts of its report."""

JOBS: dict[str, Job] = {
    "decay": lambda m, now: run_decay(m.records, now, m.config.decay, m.config.sleep),
    "tier": lambda m, now: run_tiering(m.records, now, m.config.sleep),
    "digest": lambda m, now: m.digests.run(now),
    "compact": run_compaction,
    "assess": run_assess,
    "reweight": lambda m, now: run_reweight(m.records, now, m.config),
    "dream": run_dream,
    "index": run_index,
    "neighbours": lambda m, now: m.context_vectors.catch_up(),
    "upgrade": lambda m, now: _upgrade(m),
    "entities": lambda m, now: _entities(m),
    "forget": run_forgetting,
    "compress": run_compress,
    "export": lambda m, now, out, labelled_only=True: export_policy(m.records, out, labelled_only=labelled_only),
}


async def _upgrade(manager: MemoryManager) -> dict[str, Any]:
    """The vector upgrade, all of it now (vector_upgrade.py): what the int8 document model stored, made again."""
    upgraded = await manager.vector_upgrade.catch_up()
    return {"upgraded": upgraded, "left": await manager.vector_upgrade.left()}


async def _entities(manager: MemoryManager) -> dict[str, Any]:
    """The entity refresh, all of it now (entity_refresh.py): each memory given the entities the current rules
    find in its words."""
    refreshed = await manager.entity_refresh.catch_up()
    return {"refreshed": refreshed, "left": await manager.entity_refresh.left()}


async def run_job(manager: MemoryManager, name: str, *, now: datetime | None = None, **options: Any) -> JobRun:
    """Run job `name` once at `now` (the manager's clock by default) and return its report row. `options` go to
    the job (export takes `out` and `labelled_only`)."""
    job = JOBS.get(name)
    if job is None:
        raise InvalidInput(f"No sleep job named {name!r}; the jobs are {', '.join(sorted(JOBS))}")
    now = now or manager.clock()
    await manager.settle()  # the jobs read access counts and gaps that the last retrieval may still be writing
    await manager.records.fail_interrupted_jobs(name, now=now)
    run_id = await manager.records.start_job(name, now=now)
    limit = manager.config.sleep.job_timeout
    try:
        async with asyncio.timeout(limit.total_seconds()):
            counts = await job(manager, now, **options)
    except TimeoutError:
        log.error("sleep job %s ran over sleep.job_timeout (%s) and was stopped", name, limit)
        await manager.records.finish_job(run_id, now=manager.clock(), counts={}, error=f"timed out after {limit}")
    except Exception as exc:  # CancelledError is a BaseException, so it propagates
        log.exception("sleep job %s failed; it runs again at its next time", name)
        await manager.records.finish_job(run_id, now=manager.clock(), counts={}, error=f"{type(exc).__name__}: {exc}")
    else:
        log.info("sleep job %s: %s", name, counts)
        await manager.records.finish_job(run_id, now=manager.clock(), counts=counts)
    manager.projector.notify()
    return (await manager.records.job_runs(name, limit=1))[0]


SLEEP_CYCLE = (
    "forget", "decay", "tier", "compress", "compact", "digest", "reweight", "dream", "assess", "neighbours", "index"
)  # fmt: skip
"""A full sleep cycle, in the order that lets each job use what the one before it wrote. Digests come after
consolidation: a statement that a merge already holds is not gathered again (LoCoMo dev, a full cycle on the
keep-all store, recall at 2,048 tokens: multi-hop 0.711 with digests first, 0.728 with them after). The forgetting
policies go first (off by default: then the job changes nothing), so nothing else works on what they take.
Compression follows tiering, which decides what is cold, and comes before consolidation and digests, so both work
on the cut words. Context vectors (`neighbours`; the daemon also computes them whenever writing pauses) come
after everything that changes a memory's words, and before the index is built over them."""


async def run_cycle(manager: MemoryManager, *, now: datetime | None = None) -> list[JobRun]:
    """Every sleep job once, in SLEEP_CYCLE order; a failed job is reported and the cycle goes on."""
    return [await run_job(manager, name, now=now) for name in SLEEP_CYCLE]
