"""`update`, `supersede`, `forget` and `remember_fact` beside `process_turn`: p50 / p95 at 10k memories (issue #20).

`python scripts/bench_revisions.py --size 10000 --changes 200 [--keep DIR]` builds (or reuses) the retrieval
latency benchmark's synthetic store (bench/latency.py), opens it with the real embedder, then interleaves
`--changes` rounds of one `process_turn`, one `update`, one `supersede`, one `forget` (each on a memory of its
own) and one `remember_fact` (a new value of one of ten attributes: half close an earlier value), so all five see
the same machine. Each change embeds its new words with the real model, as a turn does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path

from agent_memory.bench.latency import PooledEmbedder, build_store, make_bases, make_turns
from agent_memory.bench.perf import percentile
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import new_id


async def synthetic_store(
    where: Path, size: int, *, seed: int = 7, pool: int = 3000, fresh: bool = False, config_path: Path | None = None
) -> tuple[Config, Embedder]:
    """The latency benchmark's synthetic store of `size` memories in `where` (built there unless one is; with
    `fresh`, in `where` itself), and the real embedder, loaded. `config_path`: a TOML file over the defaults (another
    text model: `[embedding] model_path`, `dimension`), the process's environment still ignored."""
    root = where if fresh else where / f"revisions-{size}-seed-{seed}-pool-{pool}"
    config = load_config(config_path, environ={}, data_dir=str(root), save__keep_all=True)
    real = make_embedder(config)
    await real.load()
    if not (root / "memory.db").exists():
        bases = make_bases(pool, random.Random(f"bases-{seed}"))
        turns = make_turns(size, bases, random.Random(f"turns-{seed}-{size}"))
        pooled = PooledEmbedder(await real.embed([b.text for b in bases]), {t.text: t.base for t in turns})
        logging.info("building a store of %d turns in %s", size, root)
        await build_store(config, turns, pooled)
    return config, real


async def run(size: int, changes: int, keep: Path | None, seed: int = 7, pool: int = 3000) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as scratch:
        config, real = await synthetic_store(keep or Path(scratch), size, seed=seed, pool=pool, fresh=keep is None)
        times: dict[str, list[float]] = {
            "process_turn": [], "update": [], "supersede": [], "forget": [], "remember_fact": []
        }  # fmt: skip
        rng, session = random.Random(seed), f"bench-{new_id()}"
        async with MemoryManager.open(config, embedder=real) as manager:
            for n in range(changes):
                words = " ".join(rng.choice(("Lisbon", "invoice", "train", "garden", "review")) for _ in range(12))
                started = time.perf_counter()
                made = await manager.process_turn(session, n, f"{words} {n}")
                times["process_turn"].append((time.perf_counter() - started) * 1000)
                target = (await manager.process_turn(session, changes + n, f"to change: {words} {n}")).memory_id
                assert made.memory_id is not None and target is not None
                started = time.perf_counter()
                await manager.update(made.memory_id, f"{words} corrected {n}", expected_revision=1)
                times["update"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await manager.supersede(target, f"{words} replaced {n}", expected_revision=1)
                times["supersede"].append((time.perf_counter() - started) * 1000)
                gone = (await manager.process_turn(session, 2 * changes + n, f"to forget: {words} {n}")).memory_id
                assert gone is not None
                started = time.perf_counter()
                await manager.forget(gone, expected_revision=1)
                times["forget"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await manager.remember_fact("user", f"attribute {n % 10}", f"value {n}")
                times["remember_fact"].append((time.perf_counter() - started) * 1000)
        await real.aclose()
        return times


def render(times: dict[str, list[float]], size: int) -> str:
    rows = [
        f"| `{name}` | {len(v)} | {statistics.median(v):.1f} | {percentile(v, 0.95):.1f} |" for name, v in times.items()
    ]
    head = [
        f"On a store of {size:,} memories, interleaved:",
        "",
        "| call | runs | p50 ms | p95 ms |",
        "|---|---|---|---|",
    ]
    return "\n".join(head + rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="update, supersede, forget and remember_fact beside process_turn")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--keep", type=Path, help="build the store here, and reuse it when present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(render(asyncio.run(run(args.size, args.changes, args.keep)), args.size))
    return 0
