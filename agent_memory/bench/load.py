"""The load test: N concurrent HTTP clients against a real daemon for S seconds; then SIGTERM, `agent-memory doctor`
and a check, in process, that every acknowledged write is on disk (issue 19, docs/reliability.md).

`python scripts/load_test.py --clients 16 --seconds 60` runs it; its last line is
`clients=C seconds=S requests=R errors=E lost=L divergent=D`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.errors import AgentMemoryError
from agent_memory.interfaces.token import token_path
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnRow

WORDS: tuple[str, ...] = ("Lisbon", "Porto", "Biscuit", "Ines", "Tom", "Harbor", "invoice", "flight", "train")
WORDS += ("coffee", "dinner", "surgery", "garden", "race", "review", "budget", "launch", "book", "concert", "meeting")
START_TIMEOUT, STOP_TIMEOUT = 300.0, 300.0  # seconds: the daemon loads its model on start, and drains on stop
CLI = [sys.executable, "-m", "agent_memory.interfaces.cli"]
TURN, BULK, RETRIEVE = "POST /v1/turns", "POST /v1/turns/bulk", "POST /v1/retrieve"
CONTEXT, STATS, MEMORY = "POST /v1/context", "GET /v1/stats", "GET /v1/memories/{id}"
UPDATE, FACT, FACTS = "POST /v1/memories/{id}/update", "POST /v1/facts", "GET /v1/facts"
TurnKey = tuple[str, str, int]


def sentence(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return rng.choice(["ok", "thanks!", "cool"])
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + f" {rng.randint(1, 9999)}."


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def clean_env() -> dict[str, str]:
    """The environment without AGENT_MEMORY__ variables: the daemon and the checks use the same defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY__")}


@dataclass(frozen=True)
class Ack:
    """A write the daemon acknowledged; `turn_id` is None when a re-send was answered 409 duplicate_turn."""

    turn_id: str | None
    memory_id: str | None
    namespace: str
    session_id: str
    turn_number: int
    content_hash: str

    @property
    def key(self) -> TurnKey:
        return (self.namespace, self.session_id, self.turn_number)

    @classmethod
    def of(cls, body: dict[str, Any], answer: dict[str, Any] | None) -> Ack:
        turn_id, memory_id = (answer["turn_id"], answer["memory_id"]) if answer else (None, None)
        key = (body["namespace"], body["session_id"], body["turn_number"])
        return cls(turn_id, memory_id, *key, content_hash(body["content"]))


class DaemonProcess:
    """`agent-memory --data-dir D [--config F] serve --port 0` in a subprocess; `url` and `token` once it said where
    it serves."""

    def __init__(self, data_dir: Path, config_file: Path | None = None) -> None:
        self.data_dir = data_dir
        self._stderr: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in close())
        given = ["--config", str(config_file)] if config_file is not None else []
        command = [*CLI, "--data-dir", str(data_dir), *given, "serve", "--port", "0"]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=clean_env())
        self.url = ""
        self.token = ""

    async def ready(self) -> None:
        """Wait for the daemon's `serving ... on URL` line; RuntimeError if it exits or says nothing in time."""
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), START_TIMEOUT)
        except TimeoutError:
            line = ""
        if not line.startswith("agent-memory: serving"):
            self.kill()
            raise RuntimeError(f"the daemon did not start ({line!r}): {self.stderr_tail()}")
        self.url = line.split(" on ")[1].split()[0]
        self.token = token_path(self.data_dir).read_text().strip()

    def client(self, timeout: float = 120.0) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)

    async def stop(self) -> tuple[int, float]:
        """SIGTERM, then wait; (exit code, seconds it took). SIGKILL if it has not exited within STOP_TIMEOUT."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(self.proc.wait, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stderr_tail(self, lines: int = 20) -> str:
        self._stderr.seek(0)
        return "".join(self._stderr.readlines()[-lines:])

    def close(self) -> None:
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


async def check_acks(manager: MemoryManager, acks: Sequence[Ack]) -> list[str]:
    """The acknowledged writes missing from the store: not in SQLite, not readable from the log by offset with the
    same content, or without the memory the daemon returned. One line each."""
    rows = await manager.records.turns()
    by_id: dict[str, TurnRow] = {row.turn_id: row for row in rows}
    by_key = {(row.namespace, row.session_id, row.turn_number): row for row in rows}
    lost = []
    for ack in acks:
        row = by_id.get(ack.turn_id) if ack.turn_id else by_key.get(ack.key)
        if problem := await _ack_problem(manager, ack, row):
            lost.append(f"{ack.key} turn {ack.turn_id}: {problem}")
    return lost


async def _ack_problem(manager: MemoryManager, ack: Ack, row: TurnRow | None) -> str | None:
    if row is None:
        return "not in SQLite"
    if (row.namespace, row.session_id, row.turn_number) != ack.key:
        return f"indexed under {(row.namespace, row.session_id, row.turn_number)}"
    try:
        logged = await manager.journal.read(row.position)
    except AgentMemoryError as exc:
        return f"unreadable from the log ({exc})"
    if logged.turn_id != row.turn_id or content_hash(logged.content) != ack.content_hash:
        return f"the log record at {row.position} is another turn or other content"
    if ack.memory_id and await manager.records.find_memory(ack.memory_id) is None:
        return f"memory {ack.memory_id} missing"
    return None


async def run_doctor(data_dir: Path) -> tuple[int, list[str]]:
    """`agent-memory --data-dir D doctor` in a subprocess: its exit code and its disagreements (a crash is one)."""
    command = [*CLI, "--data-dir", str(data_dir), "doctor"]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, env=clean_env())
    problems = [line for line in done.stdout.splitlines() if line.startswith("DISAGREES")]
    if done.returncode not in (0, 1) or (done.returncode == 1 and not problems):
        problems.append(f"doctor exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.returncode, problems


class Recorder:
    """Every request's latency by route, and the answers that were not 2xx (status, or the transport error)."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.failures: dict[str, Counter[str]] = defaultdict(Counter)

    def record(self, route: str, seconds: float, status: int | str) -> None:
        self.latencies[route].append(seconds)
        if not (isinstance(status, int) and 200 <= status < 300):
            self.failures[route][str(status)] += 1


class LoadClient:
    """One client: its own httpx client, namespace and sessions, so its turn keys never collide with another's."""

    def __init__(self, index: int, http: httpx.AsyncClient, recorder: Recorder, seed: int) -> None:
        self.http, self.recorder, self.rng = http, recorder, random.Random(seed)
        self.namespace = f"load-{index}"
        self.sessions = 0
        self.turn_number = 0
        self.acks: list[Ack] = []
        self.memory_ids: list[str] = []
        self.revised: dict[str, tuple[int, str]] = {}  # memory id -> (revision, content hash) its last update left
        self.stated: dict[str, str] = {}  # attribute -> the value this client last stated, all true from one time

    async def call(self, route: str, method: str, url: str, body: Any = None, params: Any = None) -> Any:
        """The answer's JSON when it is 2xx, else None (recorded either way)."""
        started = time.perf_counter()
        try:
            response = await self.http.request(method, url, json=body, params=params)
            answer = response.json() if response.is_success else None
        except (httpx.HTTPError, ValueError) as exc:
            self.recorder.record(route, time.perf_counter() - started, type(exc).__name__)
            await asyncio.sleep(0.1 if isinstance(exc, httpx.ConnectError) else 0)  # a dead daemon: do not spin
            return None
        self.recorder.record(route, time.perf_counter() - started, response.status_code)
        return answer

    def turn_body(self) -> dict[str, Any]:
        self.sessions += self.rng.random() < 0.05
        self.turn_number += 1
        session, content = f"{self.namespace}-s{self.sessions}", sentence(self.rng)
        return {"namespace": self.namespace, "session_id": session, "turn_number": self.turn_number, "content": content}

    def acknowledge(self, bodies: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
        for body, answer in zip(bodies, answers, strict=True):
            self.acks.append(Ack.of(body, answer))
            if answer["memory_id"]:
                self.memory_ids.append(answer["memory_id"])

    def query(self) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 4)))

    async def turn(self) -> None:
        body = self.turn_body()
        if (answer := await self.call(TURN, "POST", "/v1/turns", body)) is not None:
            self.acknowledge([body], [answer])

    async def bulk(self) -> None:
        bodies = [self.turn_body() for _ in range(self.rng.randint(2, 8))]
        if (answers := await self.call(BULK, "POST", "/v1/turns/bulk", {"turns": bodies})) is not None:
            self.acknowledge(bodies, answers)

    async def retrieve(self) -> None:
        await self.call(RETRIEVE, "POST", "/v1/retrieve", {"query": self.query(), "k": 5, "namespace": self.namespace})

    async def context(self) -> None:
        body = {"query": self.query(), "budget_tokens": 512, "namespace": self.namespace}
        await self.call(CONTEXT, "POST", "/v1/context", body)

    async def stats(self) -> None:
        await self.call(STATS, "GET", "/v1/stats")

    async def memory(self) -> None:
        if not self.memory_ids:
            return await self.turn()  # nothing to read yet: the request stays a valid one
        await self.call(MEMORY, "GET", f"/v1/memories/{self.rng.choice(self.memory_ids)}")

    async def update(self) -> None:
        """Correct one of this client's memories, naming the revision it last saw (no other client touches it)."""
        if not self.memory_ids:
            return await self.turn()
        memory_id = self.rng.choice(self.memory_ids)
        revision = self.revised.get(memory_id, (1, ""))[0]
        content = sentence(self.rng)
        body = {"content": content, "expected_revision": revision, "agent": self.namespace}
        if (answer := await self.call(UPDATE, "POST", f"/v1/memories/{memory_id}/update", body)) is not None:
            self.revised[memory_id] = (int(answer["revision"]), content_hash(content))

    async def fact(self) -> None:
        """State a fact of this client's own subject (a new value closes the old one), or read its facts."""
        if self.stated and self.rng.random() < 0.5:
            await self.call(FACTS, "GET", "/v1/facts", params={"namespace": self.namespace, "subject": "client"})
            return
        attribute, value = self.rng.choice(("city", "job", "team")), self.rng.choice(WORDS)
        body = {"subject": "client", "attribute": attribute, "value": value, "namespace": self.namespace}
        if await self.call(FACT, "POST", "/v1/facts", body) is not None:
            self.stated[attribute] = value

    async def run(self, deadline: float) -> None:
        names = list(MIX)
        weights = [MIX[name][0] for name in names]
        while time.monotonic() < deadline:
            await MIX[self.rng.choices(names, weights)[0]][1](self)


# The request mix: one entry per kind of request, (weight, action).
MIX: dict[str, tuple[float, Callable[[LoadClient], Awaitable[None]]]] = {
    "turn": (0.25, LoadClient.turn),
    "update": (0.05, LoadClient.update),
    "fact": (0.05, LoadClient.fact),
    "bulk": (0.15, LoadClient.bulk),
    "retrieve": (0.20, LoadClient.retrieve),
    "context": (0.12, LoadClient.context),
    "stats": (0.03, LoadClient.stats),
    "memory": (0.15, LoadClient.memory),
}


@dataclass
class LoadReport:
    clients: int
    seconds: float
    data_dir: str
    elapsed: float = 0.0
    acknowledged: int = 0
    memories: int = 0
    routes: dict[str, dict[str, float]] = field(default_factory=dict)
    failures: dict[str, dict[str, int]] = field(default_factory=dict)
    daemon_exit: int | None = None
    shutdown_seconds: float = 0.0
    doctor_exit: int | None = None
    lost: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    daemon_stderr: str = ""

    @property
    def requests(self) -> int:
        return int(sum(route["requests"] for route in self.routes.values()))

    @property
    def errors(self) -> int:
        return sum(sum(statuses.values()) for statuses in self.failures.values())

    @property
    def ok(self) -> bool:
        return not (self.errors or self.lost or self.divergent) and self.daemon_exit == 0

    def line(self) -> str:
        return (
            f"clients={self.clients} seconds={self.seconds:g} requests={self.requests} errors={self.errors} "
            f"lost={len(self.lost)} divergent={len(self.divergent)}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"requests": self.requests, "errors": self.errors, "ok": self.ok}


def route_figures(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def rank(share: float) -> float:  # nearest rank, in ms
        return round(ordered[max(0, math.ceil(share * len(ordered)) - 1)] * 1000, 1)

    return {"requests": len(ordered), "p50_ms": rank(0.5), "p95_ms": rank(0.95), "max_ms": rank(1.0)}


async def drive(daemon: DaemonProcess, clients: int, seconds: float, recorder: Recorder, seed: int) -> list[LoadClient]:
    """`clients` clients, each with its own httpx client, sending the mix until `seconds` have passed."""
    async with AsyncExitStack() as stack:
        https = [await stack.enter_async_context(daemon.client()) for _ in range(clients)]
        load = [LoadClient(i, http, recorder, seed * 1000 + i) for i, http in enumerate(https)]
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(client.run(deadline) for client in load))
    return load


async def run_load(
    clients: int, seconds: float, data_dir: Path, *, embedder: Embedder | None = None, seed: int = 0
) -> LoadReport:
    """Start a daemon on `data_dir`, load it, stop it, run doctor and check every acknowledged write."""
    report = LoadReport(clients, seconds, str(data_dir))
    recorder = Recorder()
    daemon = DaemonProcess(data_dir)
    try:
        await daemon.ready()
        started = time.monotonic()
        load = await drive(daemon, clients, seconds, recorder, seed)
        report.elapsed = round(time.monotonic() - started, 2)
        report.daemon_exit, report.shutdown_seconds = await daemon.stop()
        report.daemon_stderr = daemon.stderr_tail()
    finally:
        daemon.close()
    report.routes = {route: route_figures(times) for route, times in sorted(recorder.latencies.items())}
    report.failures = {route: dict(statuses) for route, statuses in recorder.failures.items()}
    acks = [ack for client in load for ack in client.acks]
    report.acknowledged, report.memories = len(acks), sum(1 for ack in acks if ack.memory_id)
    report.doctor_exit, report.divergent = await run_doctor(data_dir)
    config = load_config(environ={}, data_dir=str(data_dir))
    async with MemoryManager.open(config, embedder=embedder or make_embedder(config)) as manager:
        report.lost = (
            await check_acks(manager, acks) + await check_updates(manager, load) + await check_facts(manager, load)
        )
    return report


async def check_updates(manager: MemoryManager, clients: Sequence[LoadClient]) -> list[str]:
    """Every acknowledged update stands: the memory is at the revision it answered, with the words it was sent."""
    lost = []
    for client in clients:
        for memory_id, (revision, digest) in client.revised.items():
            memory = await manager.records.find_memory(memory_id)
            if memory is None or (memory.revision, content_hash(memory.content)) != (revision, digest):
                lost.append(f"update of {memory_id} to revision {revision}: not what the store holds")
    return lost


async def check_facts(manager: MemoryManager, clients: Sequence[LoadClient]) -> list[str]:
    """Every client's last acknowledged value of each attribute is the one its subject holds now."""
    lost = []
    for client in clients:
        held = {f.attribute: f.value for f in await manager.facts("client", namespace=client.namespace)}
        lost += [
            f"{client.namespace} {a} = {v}: the store holds {held.get(a)!r}"
            for a, v in client.stated.items()
            if held.get(a) != v
        ]
    return lost


def render(report: LoadReport) -> list[str]:
    lines = [f"{'route':<24}{'requests':>9}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}"]
    for route, f in report.routes.items():
        lines.append(f"{route:<24}{f['requests']:>9}{f['p50_ms']:>10}{f['p95_ms']:>10}{f['max_ms']:>10}")
    for route, statuses in report.failures.items():
        lines.append(f"non-2xx {route}: " + ", ".join(f"{status} x{n}" for status, n in sorted(statuses.items())))
    lines.append(f"ran {report.elapsed} s; acknowledged {report.acknowledged} turns, {report.memories} memories")
    lines.append(f"daemon: SIGTERM -> exit {report.daemon_exit} after {report.shutdown_seconds:.2f} s")
    if report.daemon_exit != 0 or report.errors:
        lines.append("daemon stderr (tail):\n" + report.daemon_stderr.rstrip())
    lines.append(f"doctor: exit {report.doctor_exit}, {len(report.divergent)} disagreement(s)")
    lines.extend(f"  divergent: {problem}" for problem in report.divergent)
    lines.extend(f"  lost: {problem}" for problem in report.lost[:50])
    return [*lines, report.line()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the full report here")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="agent-memory-load-")) / "data"
    print(f"load test: {args.clients} clients x {args.seconds:g} s, data_dir={data_dir}", flush=True)
    report = asyncio.run(run_load(args.clients, args.seconds, data_dir, seed=args.seed))
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    print("\n".join(render(report)), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
