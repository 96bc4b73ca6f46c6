"""A full sleep cycle timed on synthetic stores of 10k-100k memories (issue #5: <= 120 s at 100k, near linear).

`python scripts/bench_sleep.py --sizes 10000,100000 --keep /tmp/bench-retrieve` builds (or reuses) the same stores
as the retrieval latency benchmark (bench/latency.py: conversation-like turns through the real `process_turns`,
vectors from a pool of real all-MiniLM-L6-v2 embeddings), copies each one so the kept store stays as built, runs
every sleep job once in SLEEP_CYCLE order a day after the last turn, and writes each job's time and counts into
docs/benchmarks.md. Consolidation's replay embeds its queries with the real model.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent_memory.bench import perf
from agent_memory.bench.latency import bench_size, store_arguments
from agent_memory.config import load_config
from agent_memory.manager import MemoryManager
from agent_memory.models import JobRun
from agent_memory.sleep.jobs import SLEEP_CYCLE, run_job

log = logging.getLogger(__name__)
BEGIN, END = "<!-- bench-sleep:begin -->", "<!-- bench-sleep:end -->"
TARGET_SECONDS = {100_000: 120.0}


@dataclass(frozen=True, slots=True)
class CycleFigures:
    memories: int
    seconds: dict[str, float]  # per job, in cycle order
    runs: dict[str, JobRun]

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


async def time_cycle(root: Path, now: datetime) -> CycleFigures:
    """Every job once on the store in `root`, each timed on its own."""
    config = load_config(environ={}, data_dir=str(root), journal__fsync="never")
    seconds: dict[str, float] = {}
    runs: dict[str, JobRun] = {}
    async with MemoryManager.open(config) as manager:
        memories = (await manager.stats())["records"]["memories"]
        for job in SLEEP_CYCLE:
            started = time.perf_counter()
            runs[job] = await run_job(manager, job, now=now)
            seconds[job] = time.perf_counter() - started
            log.info("%s: %.1f s %s", job, seconds[job], runs[job].error or dict(runs[job].counts))
    return CycleFigures(memories, seconds, runs)


async def bench_cycle(size: int, *, keep: Path | None, seed: int, pool: int) -> CycleFigures:
    with tempfile.TemporaryDirectory() as scratch:
        built = keep / f"turns-{size}-seed-{seed}-pool-{pool}" if keep else Path(scratch) / "built"
        await bench_size(built, size, queries=20, seed=seed, pool=pool)  # builds and indexes it once, or reuses it
        copy = Path(scratch) / "cycle"
        shutil.copytree(built, copy)
        (copy / "owner.lock").unlink(missing_ok=True)
        last = await _last_event(copy)
        return await time_cycle(copy, last + timedelta(days=1))


async def _last_event(root: Path) -> datetime:
    config = load_config(environ={}, data_dir=str(root), journal__fsync="never")
    async with MemoryManager.open(config) as manager:
        latest = await manager.records.latest_turn_at()
    if latest is None:
        raise SystemExit(f"{root} holds no turns")
    return latest


def _counts(run: JobRun) -> str:
    if run.error:
        return f"failed: {run.error}"
    keep = {"moved", "groups", "no_gain", "accepted", "rejected", "deferred", "committed", "raised", "built"}
    keep |= {"memories_read", "digests_new"}
    shown = {k: v for k, v in run.counts.items() if k in keep and not isinstance(v, dict)}
    return ", ".join(f"{k} {v}" for k, v in shown.items()) or "-"


def render(results: Sequence[CycleFigures]) -> str:
    header = ["memories", *SLEEP_CYCLE, "total", "target"]
    rows = []
    for f in results:
        target = TARGET_SECONDS.get(f.memories // 1000 * 1000)
        verdict = f"<= {target:.0f} s: {'met' if f.total <= target else 'missed'}" if target else ""
        cells = [f"{f.memories:,}", *(f"{f.seconds[job]:.1f}" for job in SLEEP_CYCLE), f"**{f.total:.1f}**", verdict]
        rows.append("| " + " | ".join(cells) + " |")
    notes = [f"{f.memories:,}: " + "; ".join(f"{job} {_counts(f.runs[job])}" for job in SLEEP_CYCLE) for f in results]
    ratio = ""
    if len(results) >= 2 and results[0].total > 0:
        scale = results[-1].memories / results[0].memories
        ratio = f" {scale:.0f}x the memories took {results[-1].total / results[0].total:.1f}x the time."
    return "\n".join(
        [
            BEGIN,
            f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}; no LLM; the synthetic stores of the retrieval latency benchmark (HNSW index "
            "already built), each copied, then every sleep job once in cycle order a day after the last turn. Cells: "
            f"seconds per job.{ratio}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *rows,
            "",
            "What each job did: " + " / ".join(notes) + ".",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = store_arguments(argparse.ArgumentParser(description="a full sleep cycle, timed per job")).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sizes = [int(size) for size in args.sizes.split(",")]

    async def run() -> list[CycleFigures]:
        return [await bench_cycle(size, keep=args.keep, seed=args.seed, pool=args.pool) for size in sizes]

    section = render(asyncio.run(run()))
    return perf.publish(section, None if args.no_docs else args.out, begin=BEGIN, end=END, heading="Sleep cycle")
