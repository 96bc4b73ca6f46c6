"""Retrieval in an agent's loop: the user's message is stored, then the memory is asked about that same message.

The write path keeps the vectors of the last texts it embedded (TurnVectors.recent), so the question needs no
second pass through the model. This measures `retrieve(k=10)` right after `process_turn` of the same text, against
`retrieve(k=10)` of questions never stored, on a copy of a store `scripts/bench_retrieve.py --keep` built (the
copy takes the new turns; the kept store is left as it was).

Usage: python scripts/bench_agent_loop.py --keep /tmp/bench-retrieve [--size 10000] [--queries 100]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from agent_memory.bench.latency import make_bases, make_queries, make_turns
from agent_memory.bench.perf import percentile
from agent_memory.config import load_config
from agent_memory.manager import MemoryManager


async def measure(store: Path, *, size: int, seed: int, pool: int, queries: int) -> dict[str, tuple[float, float]]:
    """p50 and p95 ms of retrieve() for questions never stored and for questions stored just before."""
    bases = make_bases(pool, random.Random(f"bases-{seed}"))
    turns = make_turns(size, bases, random.Random(f"turns-{seed}-{size}"))
    asked = make_queries(turns, 2 * queries, random.Random(f"agent-loop-{seed}-{size}"))
    now = turns[-1].at + timedelta(days=1)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(store, copy, ignore=shutil.ignore_patterns("owner.lock"))
        config = load_config(environ={}, data_dir=str(copy), journal__fsync="never", save__keep_all=True)
        times: dict[str, list[float]] = {"not stored": [], "stored just before": []}
        async with MemoryManager.open(config) as manager:
            if manager.records.keyword_index is not None:  # built in the background from the first search
                await manager.records.keyword_index.wait()
            for question in asked[:10]:  # warm-up
                await manager.retrieve(question, k=10, now=now)
            for number, question in enumerate(asked):
                stored = number % 2 == 1  # alternate, so both see the same machine
                if stored:
                    await manager.process_turn("agent-loop", number, question, at=now)
                started = time.perf_counter()
                await manager.retrieve(question, k=10, now=now)
                times["stored just before" if stored else "not stored"].append((time.perf_counter() - started) * 1000)
            await manager.flush()
    return {name: (statistics.median(v), percentile(v, 0.95)) for name, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="retrieve() right after storing the same text")
    parser.add_argument("--keep", type=Path, required=True, help="where scripts/bench_retrieve.py kept its stores")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=100, help="questions of each kind")
    args = parser.parse_args(argv)
    store = args.keep / f"turns-{args.size}-seed-{args.seed}-pool-{args.pool}"
    if not store.is_dir():
        raise SystemExit(f"no kept store at {store}: run scripts/bench_retrieve.py --keep {args.keep} first")
    figures = asyncio.run(measure(store, size=args.size, seed=args.seed, pool=args.pool, queries=args.queries))
    print(f"| question ({args.size:,} memories) | retrieve p50 / p95 |\n|---|---|")
    for name, (p50, p95) in figures.items():
        print(f"| {name} | {p50:.1f} / {p95:.1f} ms |")
    return 0
