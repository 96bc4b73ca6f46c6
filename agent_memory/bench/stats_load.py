"""`stats()` while writes run: p50 / p95 of the call on a large store with concurrent writers (issue #19).

`python scripts/bench_stats.py --size 100000 --writers 8 --seconds 30 --keep /tmp/stores` builds (or reuses) the
retrieval latency benchmark's synthetic store of that size (bench/latency.py: real process_turns, pooled real
MiniLM vectors), then opens it and runs `--writers` tasks that each write 8-turn batches to sessions of their own
for `--seconds`, while stats() is called every 50 ms. Beside it, the same calls the way stats() worked before
(drain the projector, count every table, ask Kuzu and Qdrant), so the table shows what changed on the same store.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_memory.bench.latency import PooledEmbedder, build_store, make_bases, make_turns
from agent_memory.bench.perf import percentile
from agent_memory.config import load_config
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput, new_id
from agent_memory.storage.outbox import IMAGE, TEXT

CALL_LIMIT = 30.0
"""A call still running after this many seconds is stopped and counted at this: the old stats() drained the outbox
until it was empty, which concurrent writers can keep from happening."""


@dataclass(frozen=True)
class Figures:
    way: str
    calls: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    turns_written: int
    cut_off: int  # calls still running after CALL_LIMIT, counted at CALL_LIMIT

    def row(self) -> str:
        cut = f" ({self.cut_off} cut off at {CALL_LIMIT:.0f} s)" if self.cut_off else ""
        return (
            f"| {self.way} | {self.calls}{cut} | {self.p50_ms:.1f} | {self.p95_ms:.1f} | {self.max_ms:.1f} "
            f"| {self.turns_written} |"
        )


async def scanned_stats(manager: MemoryManager) -> dict[str, Any]:
    """stats() as it was: every pending projection applied first, then every count asked of its engine."""
    await manager.settle()
    return {
        "records": await manager.records.counted_by_scan(),
        "graph": await manager.graph.counts(),
        "vectors": {c: await manager.vectors.count(c) for c in (TEXT, IMAGE)},
    }


async def _writer(manager: MemoryManager, index: int, stop: asyncio.Event, written: list[int]) -> None:
    rng, number, run = random.Random(index), 0, new_id()  # sessions of their own, in a store used before too
    while not stop.is_set():
        words = " ".join(rng.choice(("Lisbon", "invoice", "train", "garden", "review", "budget")) for _ in range(12))
        turns = [TurnInput(f"load-{run}-{index}", number + i, f"{words} {rng.randint(1, 9999)}") for i in range(8)]
        await manager.process_turns(turns)
        number += 8
        written[0] += 8


async def measure(
    manager: MemoryManager, way: str, call: Callable[[], Awaitable[object]], *, writers: int, seconds: float
) -> Figures:
    stop, written, samples = asyncio.Event(), [0], list[float]()
    tasks = [asyncio.create_task(_writer(manager, 1000 * len(way) + i, stop, written)) for i in range(writers)]
    await asyncio.sleep(1.0)  # the writers under way
    ends = time.monotonic() + seconds
    cut_off = 0
    while time.monotonic() < ends:
        started = time.perf_counter()
        try:
            await asyncio.wait_for(call(), CALL_LIMIT)
        except TimeoutError:
            cut_off += 1
        samples.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    figures = Figures(
        way, len(samples), statistics.median(samples), percentile(samples, 0.95), max(samples), written[0], cut_off
    )
    logging.info("%s", figures)
    return figures


async def run(size: int, *, writers: int, seconds: float, keep: Path | None, seed: int, pool: int) -> list[Figures]:
    with tempfile.TemporaryDirectory() as scratch:
        root = keep / f"stats-{size}-seed-{seed}-pool-{pool}" if keep else Path(scratch)
        config = load_config(environ={}, data_dir=str(root), journal__fsync="never", save__keep_all=True)
        bases = make_bases(pool, random.Random(f"bases-{seed}"))
        turns = make_turns(size, bases, random.Random(f"turns-{seed}-{size}"))
        real = make_embedder(config)
        await real.load()
        pooled = PooledEmbedder(await real.embed([b.text for b in bases]), {t.text: t.base for t in turns})
        await real.aclose()
        if not (root / "memory.db").exists():
            logging.info("building a store of %d turns in %s (about 16 minutes at 100k)", size, root)
            await build_store(config, turns, pooled)
        async with MemoryManager.open(config, embedder=pooled) as manager:
            now = await manager.stats()
            logging.info("store: %d memories", now["records"]["memories"])
            optimize = getattr(manager.vectors, "optimize", None)
            if optimize is not None:  # the index job's work on a daemon: the writers' novelty search uses HNSW
                await optimize(TEXT)
            return [
                await measure(manager, "stats() now", manager.stats, writers=writers, seconds=seconds),
                await measure(
                    manager, "stats() before", lambda: scanned_stats(manager), writers=writers, seconds=seconds
                ),
            ]


def render(figures: list[Figures], *, size: int, writers: int, seconds: float) -> str:
    lines = [
        f"`stats()` on a store of {size:,} turns while {writers} writers add 8-turn batches, {seconds:.0f} s each way:",
        "",
        "| way | calls | p50 ms | p95 ms | max ms | turns written meanwhile |",
        "|---|---|---|---|---|---|",
        *(f.row() for f in figures),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="stats() latency under concurrent writes")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--keep", type=Path, help="build the store here, and reuse it when present")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool", type=int, default=3000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    figures = asyncio.run(
        run(args.size, writers=args.writers, seconds=args.seconds, keep=args.keep, seed=args.seed, pool=args.pool)
    )
    print(render(figures, size=args.size, writers=args.writers, seconds=args.seconds))
    return 0
