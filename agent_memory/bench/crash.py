"""The crash test: a child ingests turns and prints each acknowledged turn; we SIGKILL it at random moments,
reopen the store and check that every acknowledged turn is in the log and in SQLite and that the stores agree.

With `--daemon` the child is the daemon (`agent-memory serve`) and `--clients` concurrent HTTP writers feed it
single and bulk turns; after each SIGKILL the store is opened here and checked as above, and also: every log
record is indexed in SQLite (the log is the truth: recovery must index all of it) and no (namespace, session,
turn number) has two log records. The turns sent but unanswered when the daemon died are re-sent, one by one, to
the next daemon: each must be accepted as new or answered 409 duplicate_turn, never logged twice.

`python scripts/crash_test.py [--daemon] --cycles N` runs it; its last line is
`cycles=N acknowledged=A lost=L divergent=D`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agent_memory.bench.load import Ack, DaemonProcess, TurnKey, check_acks, sentence
from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.errors import CorruptRecord
from agent_memory.manager import MemoryManager


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
                    {"session_id": f"c{cycle}", "turn_number": n * 10 + i, "content": sentence(rng)}
                    for i in range(rng.randint(2, 8))
                ]
                results = await manager.process_turns(turns)
            else:
                results = [await manager.process_turn(f"c{cycle}", n * 10, sentence(rng))]
            for result in results:
                print(json.dumps({"turn_id": result.turn_id, "memory_id": result.memory_id}), flush=True)


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


# ----- the daemon mode --------------------------------------------------------------------------------


@dataclass
class DaemonTally:
    """What the daemon crash test saw, each problem counted once however many cycles see it again."""

    cycles: int = 0
    acks: list[Ack] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)
    doctor: set[str] = field(default_factory=set)
    unindexed: set[str] = field(default_factory=set)
    duplicates: set[TurnKey] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    resent_new: int = 0
    resent_duplicate: int = 0
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # set at each acknowledgement

    @property
    def acknowledged(self) -> int:
        return sum(1 for ack in self.acks if ack.turn_id)

    @property
    def divergent(self) -> int:
        return len(self.doctor) + len(self.unindexed) + len(self.duplicates)

    def line(self) -> str:
        return f"cycles={self.cycles} acknowledged={self.acknowledged} lost={len(self.lost)} divergent={self.divergent}"

    def detail(self) -> str:
        return (
            f"doctor={len(self.doctor)} unindexed={len(self.unindexed)} duplicate_keys={len(self.duplicates)} "
            f"resent_new={self.resent_new} resent_409={self.resent_duplicate} errors={len(self.errors)}"
        )


class Writer:
    """One HTTP writer: its own sessions, its turn numbers running on across cycles, and the turns it sent that no
    answer acknowledged, re-sent one by one to the next daemon."""

    def __init__(self, index: int, tally: DaemonTally, seed: int) -> None:
        self.index, self.tally, self.rng = index, tally, random.Random(seed)
        self.turn_number = 0
        self.unanswered: list[dict[str, Any]] = []

    def batch(self) -> list[dict[str, Any]]:
        size = self.rng.randint(2, 8) if self.rng.random() < 0.4 else 1
        self.turn_number += size
        session = f"w{self.index}-{self.turn_number // 100}"
        numbers = range(self.turn_number - size + 1, self.turn_number + 1)
        return [
            {"namespace": "crash", "session_id": session, "turn_number": n, "content": sentence(self.rng)}
            for n in numbers
        ]

    async def run(self, http: httpx.AsyncClient) -> None:
        """Re-send what the last daemon left unanswered, then write new turns until the daemon dies."""
        if await self.resend(http):
            while await self.send(http, self.batch()):
                pass

    async def resend(self, http: httpx.AsyncClient) -> bool:
        queue, self.unanswered = self.unanswered, []
        while queue:
            if not await self.send(http, [queue.pop(0)], resend=True):
                self.unanswered.extend(queue)
                return False
        return True

    async def send(self, http: httpx.AsyncClient, bodies: list[dict[str, Any]], *, resend: bool = False) -> bool:
        """One request; False once the daemon is gone. Unanswered turns are kept to be re-sent."""
        single = len(bodies) == 1
        try:
            if single:
                response = await http.post("/v1/turns", json=bodies[0])
            else:
                response = await http.post("/v1/turns/bulk", json={"turns": bodies})
        except httpx.HTTPError:
            self.unanswered.extend(bodies)
            return False
        if response.status_code == 200:
            answers = [response.json()] if single else response.json()
            self.tally.acks.extend(Ack.of(body, answer) for body, answer in zip(bodies, answers, strict=True))
            self.tally.resent_new += resend
            self.tally.answered.set()
        elif resend and response.status_code == 409 and response.json()["error"]["code"] == "duplicate_turn":
            self.tally.acks.append(Ack.of(bodies[0], None))  # logged by the daemon that died: it must be there
            self.tally.resent_duplicate += 1
        else:
            self.tally.errors.append(f"{response.status_code} {response.text[:300]}")
            self.unanswered.extend(bodies)
        return True


async def daemon_cycle(
    data_dir: Path, writers: list[Writer], rng: random.Random, config_file: Path | None = None
) -> None:
    """Start the daemon, let the writers at it, SIGKILL it at a random moment (sometimes while it starts)."""
    daemon = DaemonProcess(data_dir, config_file)
    try:
        if rng.random() < 0.1:
            await asyncio.sleep(rng.uniform(0.3, 2.5))  # sometimes die while starting up or recovering
            return
        await daemon.ready()
        async with AsyncExitStack() as stack:
            https = [await stack.enter_async_context(daemon.client(timeout=60.0)) for _ in writers]
            before = len(writers[0].tally.acks)
            tasks = [asyncio.create_task(w.run(http)) for w, http in zip(writers, https, strict=True)]
            await _answered(writers[0].tally, before + 2 * len(writers), tasks)  # every writer under way
            await asyncio.sleep(rng.uniform(0.5, 3.0))
            daemon.kill()
            await asyncio.gather(*tasks)
    finally:
        daemon.close()


async def _answered(tally: DaemonTally, count: int, tasks: list[asyncio.Task[None]]) -> None:
    """Until `count` turns are acknowledged (the first requests are slow: the daemon warms up), at most 30 s."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(30.0):
            while len(tally.acks) < count and not all(t.done() for t in tasks):
                tally.answered.clear()
                await tally.answered.wait()


async def settle(data_dir: Path, writers: list[Writer], tally: DaemonTally, config_file: Path | None = None) -> None:
    """After the last kill: one more daemon takes the re-sends, then stops cleanly (SIGTERM)."""
    daemon = DaemonProcess(data_dir, config_file)
    try:
        await daemon.ready()
        async with AsyncExitStack() as stack:
            https = [await stack.enter_async_context(daemon.client(timeout=60.0)) for _ in writers]
            await asyncio.gather(*(w.resend(http) for w, http in zip(writers, https, strict=True)))
        code, _ = await daemon.stop()
        if code != 0:
            tally.errors.append(f"the daemon exited {code} on SIGTERM: {daemon.stderr_tail()}")
    finally:
        daemon.close()


async def verify_daemon(data_dir: Path, embedder: Embedder, tally: DaemonTally) -> None:
    """Open the store here (which recovers what the log holds) and check it, problems added to the tally."""
    config = load_config(environ={}, data_dir=str(data_dir))
    async with MemoryManager.open(config, embedder=embedder) as manager:
        tally.lost.update(await check_acks(manager, tally.acks))
        report = await manager.doctor()
        tally.doctor.update(f"{d.store}: {d.kind}" for d in report.disagreements)
        indexed = {row.turn_id for row in await manager.records.turns()}
        logged: dict[TurnKey, list[str]] = defaultdict(list)
        try:
            async for _, record in manager.journal.scan():
                logged[(record.namespace, record.session_id, record.turn_number)].append(record.turn_id)
        except CorruptRecord as exc:
            tally.doctor.add(f"log: unreadable ({exc})")
        tally.unindexed.update(turn_id for ids in logged.values() for turn_id in ids if turn_id not in indexed)
        tally.duplicates.update(key for key, ids in logged.items() if len(ids) > 1)


async def run_daemon_crash(
    cycles: int,
    clients: int,
    data_dir: Path,
    *,
    seed: int = 0,
    embedder: Embedder | None = None,
    config_file: Path | None = None,
) -> DaemonTally:
    """`cycles` daemons killed under `clients` writers; `config_file` is each daemon's `--config` (a sleep schedule
    that runs the index job every few seconds puts kills inside its builds and swaps)."""
    rng = random.Random(seed)
    embedder = embedder or make_embedder(load_config(environ={}))
    tally = DaemonTally()
    writers = [Writer(i, tally, rng.randrange(1 << 30)) for i in range(clients)]
    for cycle in range(cycles):
        await daemon_cycle(data_dir, writers, rng, config_file)
        if cycle == cycles - 1:  # the last kill's re-sends go to one more daemon, which recovers on start as we do
            await settle(data_dir, writers, tally, config_file)
        await verify_daemon(data_dir, embedder, tally)
        tally.cycles += 1
        print(f"cycle {cycle}: {tally.line()} {tally.detail()}", flush=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--daemon", action="store_true", help="crash the daemon under concurrent HTTP writers")
    parser.add_argument("--clients", type=int, default=8, help="--daemon: concurrent writers (default 8)")
    parser.add_argument("--daemon-config", type=Path, help="--daemon: the daemons' --config (a TOML file)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cycle", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        asyncio.run(child(args.child, args.cycle, args.seed or 0))
        return 0
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="agent-memory-crash-"))
    print(f"crash test: seed={seed} data_dir={data_dir}{' daemon' if args.daemon else ''}", flush=True)
    if args.daemon:
        if args.daemon_config is not None and not args.daemon_config.is_file():
            parser.error(f"--daemon-config: no file at {args.daemon_config}")
        run = run_daemon_crash(args.cycles, args.clients, data_dir, seed=seed, config_file=args.daemon_config)
        return _report(asyncio.run(run))
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


def _report(tally: DaemonTally) -> int:
    for problem in sorted(tally.lost)[:50]:
        print(f"  lost: {problem}")
    for problem in sorted(tally.doctor):
        print(f"  divergent: {problem}")
    print(f"  unindexed log records: {sorted(tally.unindexed)[:20]}; duplicate keys: {sorted(tally.duplicates)[:20]}")
    for error in tally.errors[:20]:
        print(f"  error: {error}")
    print(tally.detail())
    print(tally.line(), flush=True)
    return 0 if not (tally.lost or tally.divergent or tally.errors) else 1


if __name__ == "__main__":
    sys.exit(main())
