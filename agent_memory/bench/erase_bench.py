"""`erase` of one memory at 10k and 100k memories: wall time p50 / max, and what its proof scan read (issue #20).

`python scripts/bench_erase.py --sizes 10000,100000 --erases 5 [--keep DIR]` builds (or reuses) the retrieval
latency benchmark's synthetic store (bench/latency.py) of each size, opens it with the real embedder, then erases
`--erases` memories one at a time, each a fresh turn written just before (so every erase also takes its log record,
its vectors and its node). Each erase runs to the end: tombstone, purge, projections drained, FTS5 merged, WAL
checkpointed, the graph rebuilt into new files when an entity went, and the proof scan of the whole data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

from agent_memory.bench.revisions_bench import synthetic_store
from agent_memory.manager import MemoryManager
from agent_memory.models import new_id


async def run(size: int, erases: int, keep: Path | None, seed: int = 7, pool: int = 3000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        config, real = await synthetic_store(keep or Path(scratch), size, seed=seed, pool=pool, fresh=keep is None)
        seconds, proofs = [], []
        session = f"erase-{new_id()}"
        async with MemoryManager.open(config, embedder=real) as manager:
            for n in range(erases):
                code = f"{random.Random(n).getrandbits(64):016x}"
                turn = await manager.process_turn(session, n, f"My Zorblax token number {n} is {code}, keep it.")
                await manager.settle()
                result = await manager.erase(turn_ids=[turn.turn_id], reason="benchmark")
                seconds.append(result.seconds)
                proofs.append(result.proof)
        await real.aclose()
    return {
        "size": size,
        "erases": erases,
        "p50_s": statistics.median(seconds),
        "max_s": max(seconds),
        "files": proofs[-1].files,
        "scanned_mb": proofs[-1].bytes / 1e6,
        "hits": sum(p.hits for p in proofs),
    }


def render(rows: list[dict[str, Any]]) -> str:
    head = [
        "| store | erases | p50 s | max s | files scanned | MB scanned | hits |",
        "|---|---|---|---|---|---|---|",
    ]
    body = [
        f"| {r['size']:,} | {r['erases']} | {r['p50_s']:.2f} | {r['max_s']:.2f} | {r['files']} | "
        f"{r['scanned_mb']:.0f} | {r['hits']} |"
        for r in rows
    ]
    return "\n".join(head + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="erase of one memory at 10k and 100k memories")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--erases", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build the stores here, and reuse them when present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rows = [asyncio.run(run(int(size), args.erases, args.keep)) for size in args.sizes.split(",")]
    print(render(rows))
    return 0 if all(r["hits"] == 0 for r in rows) else 1
