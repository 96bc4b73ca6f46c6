"""How long `doctor` holds the event loop: a daemon answers while doctor runs, so its checking must leave the loop
free. `python scripts/bench_doctor.py --store DIR` copies a store (the real-text latency stores of
bench/latency_real.py are the ones measured in docs/architecture.md, "Doctor"), opens the copy as the daemon
opens it (its thread switch interval, its keyword projection built, its heap frozen: serve.py; `--no-freeze` leaves
the heap as Python keeps it), and runs doctor `--rounds` times while a task sleeps 2 ms at a time and records how
late each wake-up is; Python's garbage collections are timed beside it (a full collection holds every thread). The
copy is removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_memory.config import load_config
from agent_memory.interfaces.serve import settled, thread_switching
from agent_memory.manager import MemoryManager

TICK = 0.002
LONG_WAIT = 0.05


@dataclass(frozen=True)
class DoctorStalls:
    memories: int
    turns: int
    consistent: bool
    seconds: float
    longest_wait_ms: float
    waits_over_50_ms: int
    waited_over_50_ms_s: float
    full_collections: int
    longest_full_collection_ms: float

    def row(self) -> str:
        return (
            f"| {self.memories:,} memories, {self.turns:,} turns | {self.seconds:.2f} | {self.longest_wait_ms:.0f} "
            f"| {self.waits_over_50_ms} ({self.waited_over_50_ms_s:.2f} s) | {self.full_collections} "
            f"(longest {self.longest_full_collection_ms:.0f} ms) | {'yes' if self.consistent else 'NO'} |"
        )


async def _late(waits: list[float]) -> None:
    while True:
        started = time.perf_counter()
        await asyncio.sleep(TICK)
        waits.append(time.perf_counter() - started - TICK)


async def measure(data_dir: Path, *, frozen: bool = True) -> DoctorStalls:
    """One doctor run on the store at `data_dir`, opened here as the daemon opens it (its keyword projection built
    and, unless not `frozen`, its heap frozen: serve.py, `settled`), the refresh and upgrade work held back."""
    environ = {"AGENT_MEMORY__EXTRACTION__REFRESH_DELAY": "PT1H", "AGENT_MEMORY__EMBEDDING__UPGRADE_DELAY": "PT1H"}
    config = load_config(environ=environ, data_dir=str(data_dir), journal__fsync="never")
    async with (
        MemoryManager.open(config) as manager,
        settled(manager, freeze=frozen) as built,
    ):
        if built is not None:
            await built
        await manager.flush()
        full: list[float] = []
        started: dict[str, float] = {}

        def timed(phase: str, info: dict[str, Any]) -> None:
            if info["generation"] == 2:
                if phase == "start":
                    started["at"] = time.perf_counter()
                else:
                    full.append(time.perf_counter() - started["at"])

        waits: list[float] = []
        watcher = asyncio.create_task(_late(waits))
        gc.callbacks.append(timed)
        try:
            begun = time.perf_counter()
            report = await manager.doctor()
            seconds = time.perf_counter() - begun
        finally:
            gc.callbacks.remove(timed)
            watcher.cancel()
        long = [w for w in waits if w > LONG_WAIT]
        return DoctorStalls(
            report.memories,
            report.turns,
            report.consistent,
            seconds,
            max(waits, default=0.0) * 1000,
            len(long),
            sum(long),
            len(full),
            max(full, default=0.0) * 1000,
        )


async def run(store: Path, rounds: int, *, frozen: bool = True) -> list[DoctorStalls]:
    with tempfile.TemporaryDirectory(prefix="doctor-stalls-") as scratch:
        copy = Path(scratch) / "store"
        await asyncio.to_thread(shutil.copytree, store, copy, ignore=shutil.ignore_patterns("owner.lock"))
        config = load_config(environ={}, data_dir=str(copy))
        with thread_switching(config.serve.switch_interval):  # as the daemon serves
            return [await measure(copy, frozen=frozen) for _ in range(rounds)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, required=True, help="a data directory (copied; the copy is measured)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-freeze", action="store_true", help="leave the heap unfrozen (the daemon freezes it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not (args.store / "memory.db").is_file():
        parser.error(f"{args.store} holds no memory.db: not a data directory")
    found = asyncio.run(run(args.store, args.rounds, frozen=not args.no_freeze))
    print("| store | doctor s | longest loop wait ms | waits over 50 ms | full GCs | consistent |")
    print("|---|---|---|---|---|---|")
    for figures in found:
        print(figures.row())
    print(f"median longest wait: {statistics.median(f.longest_wait_ms for f in found):.0f} ms")
    return 0 if all(f.consistent for f in found) else 1
