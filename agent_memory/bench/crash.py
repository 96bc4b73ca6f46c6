"""The crash test: a child ingests turns and prints each acknowledged turn; we SIGKILL it at random moments,
reopen the store and check that every acknowledged turn is in the log and in SQLite and that the stores agree.

`python scripts/crash_test.py --cycles N` runs it; its last line is
`cycles=N acknowledged=A lost=L divergent=D`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager

WORDS = (
    "Lisbon",
    "Porto",
    "Biscuit",
    "Ines",
    "Tom",
    "Harbor",
    "invoice",
    "flight",
    "train",
    "coffee",
    "dinner",
    "surgery",
    "garden",
    "race",
    "review",
    "budget",
    "launch",
    "book",
    "concert",
    "meeting",
)


@dataclass
class Tally:
    cycles: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    divergent: int = 0

    def line(self) -> str:
        return f"cycles={self.cycles} acknowledged={self.acknowledged} lost={len(self.lost)} divergent={self.divergent}"


async def child(data_dir: Path, cycle: int, seed: int) -> None:
    """Ingest turns forever, one acknowledged turn per line on stdout, until killed."""
    rng = random.Random(seed)
    config = load_config(environ={}, data_dir=str(data_dir))
    async with MemoryManager.open(config) as manager:
        print("READY", flush=True)
        for n in range(100_000):
            if rng.random() < 0.2:
                turns = [
                    {"session_id": f"c{cycle}", "turn_number": n * 10 + i, "content": _sentence(rng)}
                    for i in range(rng.randint(2, 8))
                ]
                results = await manager.process_turns(turns)
            else:
                results = [await manager.process_turn(f"c{cycle}", n * 10, _sentence(rng))]
            for result in results:
                print(json.dumps({"turn_id": result.turn_id, "memory_id": result.memory_id}), flush=True)


def _sentence(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return rng.choice(["ok", "thanks!", "cool"])
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + f" {rng.randint(1, 9999)}."


def run_cycle(data_dir: Path, cycle: int, rng: random.Random) -> list[dict[str, str]]:
    """Start a child, let it work for a random while, SIGKILL it; return what it acknowledged."""
    command = [
        sys.executable,
        "-m",
        "agent_memory.bench.crash",
        "--child",
        str(data_dir),
        "--cycle",
        str(cycle),
        "--seed",
        str(rng.randrange(1 << 30)),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    acked: list[dict[str, str]] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("READY"):
                ready.set()
            elif line.startswith("{"):
                acked.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if rng.random() < 0.15:
        time.sleep(rng.uniform(0.5, 4.0))  # sometimes die while starting up or recovering
    else:
        ready.wait(timeout=300)
        time.sleep(rng.uniform(0.05, 3.0))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=10)
    return acked


async def verify(data_dir: Path, acked: list[dict[str, str]], embedder: Embedder, tally: Tally) -> None:
    config = load_config(environ={}, data_dir=str(data_dir))
    async with MemoryManager.open(config, embedder=embedder) as manager:
        for ack in acked:
            row = await manager.records.get_turn(ack["turn_id"])
            logged = await manager.journal.read(row.position) if row else None
            memory_ok = ack["memory_id"] is None or await manager.records.find_memory(ack["memory_id"])
            if row is None or logged is None or logged.turn_id != ack["turn_id"] or not memory_ok:
                tally.lost.append(ack["turn_id"])
        report = await manager.doctor()
        tally.divergent += len(report.disagreements)
        for problem in report.disagreements:
            print(f"  divergent: {problem}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cycle", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        asyncio.run(child(args.child, args.cycle, args.seed or 0))
        return 0
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="agent-memory-crash-"))
    print(f"crash test: seed={seed} data_dir={data_dir}", flush=True)
    embedder = make_embedder(load_config(environ={}))
    tally = Tally()
    for cycle in range(args.cycles):
        acked = run_cycle(data_dir, cycle, rng)
        tally.cycles += 1
        tally.acknowledged += len(acked)
        asyncio.run(verify(data_dir, acked, embedder, tally))
        print(f"cycle {cycle}: acknowledged {len(acked)}; so far {tally.line()}", flush=True)
    print(tally.line(), flush=True)
    return 0 if not tally.lost and not tally.divergent else 1


if __name__ == "__main__":
    sys.exit(main())
