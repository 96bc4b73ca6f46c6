"""The erase proof under crashes (issue #20, section 4): `python scripts/erase_proof.py --cycles 20`.

A store of background turns is built once. Each cycle a child process writes a canary turn (random words no other
turn holds), lets retrieval touch it, and on some cycles runs the sleep jobs that copy words elsewhere
(consolidation, digests, dreams); then it starts the erase and is SIGKILLed at a random moment of it (or finishes
first). The next child opens the store, which finishes any erase the kill cut short; a canary still there (the kill
came before the intent row) is erased again, as a user would. Then every file of the data directory is searched
byte by byte for pieces of every canary so far, the background turns are counted and searched for, and doctor
checks the stores agree. Last line: cycles=N erased=E hits=H divergent=D (hits and divergent must be 0).
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
import time
from pathlib import Path
from typing import Any

from agent_memory.config import Config, load_config
from agent_memory.erase_scan import forms

ROOT = Path(__file__).resolve().parents[2]
BACKGROUND = 40
WORDS = [
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "heron",
    "indigo",
    "jasper",
    "kelp",
    "lumen",
    "magma",
    "nectar",
    "onyx",
    "quartz",
]


def canary(cycle: int, seed: int) -> str:
    rng = random.Random(seed * 1000 + cycle)
    code = "-".join(rng.choice(WORDS) + str(rng.randrange(1000, 9999)) for _ in range(4))
    return f"My secret recovery phrase is {code}, please keep it safe for cycle {cycle}."


def pieces(text: str) -> list[bytes]:
    """Pieces of a canary's distinctive part (its phrase), each form, case folded: what must not be found."""
    phrase = text.split(" is ", 1)[1].split(",", 1)[0]
    return sorted({form for form in forms(phrase) if len(form) >= 16})


def _config(data_dir: Path) -> Config:
    config = load_config(ROOT / "config" / "default.toml", environ={}, data_dir=str(data_dir))
    dreaming = config.sleep.model_copy(update={"dream_walk_count": 50})  # off by default; the proof covers its links
    return config.model_copy(update={"save": config.save.model_copy(update={"keep_all": True}), "sleep": dreaming})


async def _child(data_dir: Path, cycle: int, seed: int, sleep_jobs: bool) -> None:
    from agent_memory.manager import MemoryManager
    from agent_memory.sleep.jobs import run_job

    async with MemoryManager.open(_config(data_dir)) as manager:
        if cycle == 0:
            for i in range(BACKGROUND):
                text = f"On day {i} I walked the dog along the river and then I cooked {WORDS[i % len(WORDS)]} soup."
                await manager.process_turn("background", i, text)
        text = canary(cycle, seed)
        turn = await manager.process_turn(f"canary-{cycle}", 0, text)
        await manager.process_turn(f"canary-{cycle}", 1, f"I also said the phrase twice on cycle {cycle}: {text}")
        await manager.retrieve("what is my secret recovery phrase", k=5)
        if sleep_jobs:
            for job in ("compact", "digest", "dream"):
                await run_job(manager, job)
        await manager.settle()
        print("ERASING", flush=True)
        await manager.erase(session_id=f"canary-{cycle}", reason=f"cycle {cycle}")
        print("ERASED", turn.turn_id, flush=True)


async def _check(data_dir: Path, cycles: int, seed: int) -> dict[str, Any]:
    """Open (finishing any cut-short erase), erase what a kill left, then scan and compare."""
    from agent_memory.manager import MemoryManager

    async with MemoryManager.open(_config(data_dir)) as manager:
        again = 0
        for cycle in range(cycles):
            left = [t for t in await manager.records.turns() if t.session_id == f"canary-{cycle}"]
            if left:
                await manager.erase(session_id=f"canary-{cycle}", reason=f"cycle {cycle}, again")
                again += 1
        background = [t for t in await manager.records.turns() if t.session_id == "background"]
        found = await manager.retrieve("walked the dog along the river and cooked soup", k=5)
        report = await manager.doctor()
        rows = await manager.records._fetch("SELECT state, proof FROM erasures")
    needles = [(cycle, piece) for cycle in range(cycles) for piece in pieces(canary(cycle, seed))]
    hits = await asyncio.to_thread(_search, data_dir, needles)
    proofs = [json.loads(r[1]) for r in rows if r[1]]
    return {
        "erased_again": again,
        "background": len(background),
        "found_background": bool(found),
        "consistent": report.consistent,
        "unfinished": sum(1 for r in rows if r[0] != "done"),
        "proof_hits": sum(p["hits"] for p in proofs),
        "hits": hits,
    }


def _search(data_dir: Path, needles: list[tuple[int, bytes]]) -> list[str]:
    """Plain byte search of every file, independent of the proof's own scan."""
    hits = []
    for path in data_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes().lower()
            hits += [f"{path.name} (cycle {c})" for c, piece in needles if piece in data]
    return hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--check", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sleep-jobs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="erase-proof-")) / "data"
    if args.child is not None:
        asyncio.run(_child(data_dir, args.child, args.seed, args.sleep_jobs))
        return 0
    if args.check is not None:
        print(json.dumps(asyncio.run(_check(data_dir, args.check, args.seed))))
        return 0
    return _run(data_dir, args.cycles, args.seed)


def _run(data_dir: Path, cycles: int, seed: int) -> int:
    rng = random.Random(seed)
    me = [sys.executable, "-m", "agent_memory.bench.erase_proof", "--data-dir", str(data_dir), "--seed", str(seed)]
    erase_seconds = 3.0  # until the first uncut erase is timed
    divergent = erased = hits = 0
    for cycle in range(cycles):
        jobs = ["--sleep-jobs"] if cycle % 3 == 2 else []
        child = subprocess.Popen([*me, "--child", str(cycle), *jobs], stdout=subprocess.PIPE, text=True, env=_env())
        assert child.stdout is not None
        killed = False
        for line in child.stdout:
            if line.startswith("ERASING"):
                started = time.monotonic()
                delay = rng.uniform(0, erase_seconds * 1.2)
                try:
                    child.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    os.kill(child.pid, signal.SIGKILL)
                    killed = True
                else:
                    erase_seconds = max(0.5, time.monotonic() - started)
                break
        child.wait()
        check = subprocess.run([*me, "--check", str(cycle + 1)], capture_output=True, text=True, env=_env())
        if check.returncode:
            print(check.stderr[-2000:], file=sys.stderr)
            divergent += 1
            continue
        found = json.loads(check.stdout.strip().splitlines()[-1])
        bad = found["background"] != BACKGROUND or not found["found_background"] or not found["consistent"]
        bad = bad or found["unfinished"] > 0
        divergent += int(bad)
        hits += len(found["hits"]) + found["proof_hits"]
        erased += 1
        print(f"cycle {cycle}: killed={killed} {json.dumps(found)}", flush=True)
    print(f"cycles={cycles} erased={erased} hits={hits} divergent={divergent}")
    return 0 if hits == 0 and divergent == 0 else 1


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


if __name__ == "__main__":
    sys.exit(main())
