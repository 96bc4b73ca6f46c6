"""Index upkeep: Qdrant Edge builds its HNSW index only when asked (`optimize()`), and until then a search is an
exact scan over the unindexed points. When `sleep.index_min_unindexed` points have piled up in a collection, the
`index` job builds the index in a child process on a copy of the shard and swaps it in (see
`EdgeVectors.optimize_offline`: `optimize()` holds the GIL for the whole build, so it cannot run on a thread of a
process that serves queries). What was written meanwhile is requeued just before the swap, with no vector part
applied in between (`_requeued`), so the projector replays it onto the new shard, even after a crash.

Qdrant moves a point whose payload changes out of its indexed segment and still counts it as indexed: a change of
every point's payload (migration 0030 gave each its event time; the tier job, over time, moves every memory) leaves
an exact scan behind a count of none unindexed, and so does an upsert of a point that exists. So the projector
counts the points whose payload it changed or whose vector it wrote again (`records.index_moves`), and this job
counts them as unindexed too: an upper bound, since a point already outside the index is counted again.
The daemon runs the job when it starts with moves counted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any

from agent_memory.manager import MemoryManager
from agent_memory.storage.outbox import CONTEXT, IMAGE, TEXT


async def points_moved(manager: MemoryManager) -> bool:
    """Whether payload changes or rewritten vectors moved points out of a collection's index since its last build.
    A process that serves queries runs the index job when it opens such a store (the job decides whether to build):
    the daemon when it starts, and the latency benchmarks before they time a store they kept."""
    return any((await manager.records.index_moves()).values())


async def run_index(manager: MemoryManager, now: datetime, *, force: bool = False) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for collection in (TEXT, IMAGE, CONTEXT):
        points, indexed = await manager.vectors.index_status(collection)
        moved = (await manager.records.index_moves()).get(collection, 0)
        entry: dict[str, Any] = {"points": points, "indexed": indexed, "moved": moved, "built": False}
        unindexed = min(points, points - indexed + moved)
        if points and (force or unindexed >= manager.config.sleep.index_min_unindexed):
            await manager.flush()  # the copy must hold everything committed so far
            mark = await manager.records.outbox_mark()
            moved = (await manager.records.index_moves()).get(collection, 0)  # the copy holds these moves
            requeued = partial(_requeued, manager, mark, now, entry)
            built = await manager.vectors.optimize_offline(collection, at_swap=requeued)
            manager.projector.notify()
            await manager.flush()
            entry["points"], entry["indexed"] = await manager.vectors.index_status(collection)
            await manager.records.index_built(collection, moved)
            entry.update(built=True, seconds=built.get("seconds"))
        report[collection] = entry
    report["keyword_changes_dropped"] = await manager.records.drop_keyword_changes()  # only with no projection
    return report


@asynccontextmanager
async def _requeued(manager: MemoryManager, mark: int, now: datetime, entry: dict[str, Any]) -> AsyncIterator[None]:
    """Around the swap of a shard copy taken at outbox row `mark`: the rows written since are requeued first, with no
    vector part applied until the copy is in place, so none can reach only the shard going out. A process that dies
    after the swap finds them pending when it opens, and one that dies between the swap's renames gets the old shard
    back (`EdgeVectors`), onto which replaying them changes nothing."""
    async with manager.projector.vectors_held():
        entry["replayed"] = await manager.records.requeue_after(mark, now=now)
        yield
