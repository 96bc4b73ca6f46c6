"""What the agent loop adds to a turn (issue #21): AgentRuntime and the memory proxy over the bare upstream call.

The store is the latency benchmark's synthetic one (bench/latency.py: 10,000 conversation-like turns, all kept as
memories, vectors from a pool of real all-MiniLM-L6-v2 embeddings), built once and kept with `--keep DIR` under
the name bench_retrieve.py gives it, so either script reuses the other's build. Each run works on a copy (the runs
write turns; the kept store stays as it was built). The upstream is bench/chat_server.py on loopback, which
answers at once with a short sentence; no LLM is configured, so the save decision and the facts' policy step are
the heuristics. Messages alternate between questions about stored turns and new statements.

- Runtime: `AgentRuntime.chat` over a MemoryManager in this process (the default configuration: fsync `always`,
  the save decision on). Overhead = the turn's wall time minus its `generate` step (the litellm call to the
  upstream, timed inside the turn). Each turn's step timings (ChatTurn.timings) are kept for the per-step medians,
  and after each turn the same request is sent once more straight through a ChatModel ("bare"), as a check that
  `generate` is what the bare call costs.
- Proxy: `agent-memory proxy` as a subprocess in front of `agent-memory serve` (another subprocess, on a copy of
  the store), both started as a user would; the official `openai` client calls the proxy and, alternately first,
  the upstream directly with the same messages. Overhead = each pair's proxy round trip minus its direct call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import blake2b
from pathlib import Path
from typing import Any

from agent_memory.bench.chat_server import ChatServer, last_user_text
from agent_memory.bench.latency import (
    MARKER,
    PooledEmbedder,
    Turn,
    _read_marker,
    build_store,
    make_bases,
    make_queries,
    make_turns,
)
from agent_memory.bench.perf import percentile
from agent_memory.config import load_config
from agent_memory.engines import make_embedder
from agent_memory.llm.chat import ChatModel
from agent_memory.manager import MemoryManager
from agent_memory.runtime.agent import AgentRuntime, ChatTurn

STEPS = ("retrieve", "window", "generate", "record", "extract")
GOAL_P50_MS, GOAL_P95_MS = 30.0, 60.0
MODEL = "openai/bench-upstream"
UPSTREAM_KEY_ENV = "AGENT_MEMORY_BENCH_UPSTREAM_KEY"
ANSWERS = ("Noted.", "Got it, thanks.", "Understood.", "Okay, I will keep that in mind.", "Sure.")


@dataclass(frozen=True)
class Spread:
    p50_ms: float
    p95_ms: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), percentile(list(values), 0.95))


@dataclass(frozen=True)
class RuntimeFigures:
    turns: int
    memories: int
    load: tuple[float, float]  # the 1-minute load average when the timed turns began, and when they ended
    overhead: Spread
    total: Spread
    bare: Spread
    steps: Mapping[str, float]  # median ms per step
    cpu_overhead_ms: float  # median of (this process's CPU over the turn) - (its CPU over the bare call)
    pace: float  # seconds between turns
    behind: bool = False  # AgentRuntime(record_behind=True): the CPU figure is then the run's mean per turn


@dataclass(frozen=True)
class ProxyFigures:
    requests: int
    load: tuple[float, float]
    overhead: Spread
    proxy: Spread
    direct: Spread
    cpu_ms: float  # the proxy's and the daemon's CPU time per request, the mean over the timed requests
    pace: float


def brief(request: dict[str, Any]) -> str:
    """The upstream's answer: short, and the same for the same message (no model, no wait)."""
    digest = blake2b(last_user_text(request).encode(), digest_size=2).digest()
    return ANSWERS[int.from_bytes(digest) % len(ANSWERS)]


def store_name(size: int, seed: int, pool: int) -> str:
    """The folder bench/latency.py keeps a store of this corpus in: the two scripts share a `--keep` folder."""
    return f"turns-{size}-seed-{seed}-pool-{pool}"


async def ensure_store(root: Path, size: int, *, seed: int, pool: int) -> list[Turn]:
    """The latency benchmark's store of `size` turns in `root`, built unless a finished build of it is there; its
    turns (to ask about)."""
    config = load_config(environ={}, data_dir=str(root), journal__fsync="never", save__keep_all=True)
    bases = make_bases(pool, random.Random(f"bases-{seed}"))
    turns = make_turns(size, bases, random.Random(f"turns-{seed}-{size}"))
    corpus = blake2b("\n".join(t.text for t in turns).encode(), digest_size=8).hexdigest()
    wanted = {"turns": size, "seed": seed, "pool": pool, "corpus": corpus}
    if _read_marker(root, wanted) is None:
        real = make_embedder(config)
        await real.load()
        vectors = await real.embed([base.text for base in bases])
        await real.aclose()
        pooled = PooledEmbedder(vectors, {turn.text: turn.base for turn in turns})
        built = await build_store(config, turns, pooled)
        (root / MARKER).write_text(json.dumps(wanted | {"build_seconds": built, "optimize_seconds": None}))
    return turns


def copy_store(kept: Path, where: Path) -> Path:
    """A working copy of a kept store (without its owner lock)."""
    shutil.copytree(kept, where, ignore=shutil.ignore_patterns("owner.lock", "daemon.json", "spawn.lock"))
    return where


def chat_messages(turns: Sequence[Turn], count: int, *, seed: int) -> list[str]:
    """`count` user messages: questions about stored turns and new statements, alternately."""
    questions = make_queries(turns, count, random.Random(f"runtime-questions-{seed}"))
    bases = make_bases(200, random.Random(f"runtime-bases-{seed}"))
    statements = [t.text for t in make_turns(count, bases, random.Random(f"runtime-statements-{seed}"))]
    return [questions[i] if i % 2 == 0 else statements[i] for i in range(count)]


async def measure_runtime(
    store: Path, messages: Sequence[str], *, warmup: int, pace: float = 0.0, record_behind: bool = False
) -> RuntimeFigures:
    """AgentRuntime turns over the store in `store`, `pace` seconds apart; the first `warmup` are not timed.
    `record_behind`: the runtime records each exchange after returning its turn (AgentRuntime(record_behind=True));
    its record and extract steps are then read from the settled turns, and the CPU overhead is the whole timed
    run's CPU, less the bare calls', per turn (a recording's CPU falls after its turn ended)."""
    config = load_config(environ={}, data_dir=str(store))
    samples: dict[str, list[float]] = {name: [] for name in (*STEPS, "total", "overhead", "bare", "cpu")}
    with ChatServer(brief, name="upstream") as upstream:
        bare = ChatModel(MODEL, **upstream.model_options())
        async with (
            MemoryManager.open(config) as manager,
            AgentRuntime(manager, MODEL, record_behind=record_behind, **upstream.model_options()) as runtime,
        ):
            memories = (await manager.stats())["records"]["memories"]
            if manager.records.keyword_index is not None:
                await manager.records.keyword_index.wait()
            load = os.getloadavg()[0]
            returned: list[ChatTurn] = []
            run_cpu, bare_total = 0.0, 0.0
            for number, text in enumerate(messages):
                if number == warmup:
                    load, run_cpu = os.getloadavg()[0], _cpu()
                cpu, started = _cpu(), time.perf_counter()
                turn = await runtime.chat("bench", text)
                total, cpu = (time.perf_counter() - started) * 1000, _cpu() - cpu
                sent = upstream.requests[-1]["messages"]
                upstream.requests.clear()
                bare_cpu = _cpu()
                with _clock() as bare_ms:
                    await bare.complete(sent)
                bare_cpu = _cpu() - bare_cpu
                await asyncio.sleep(pace)
                if number < warmup:
                    continue
                bare_total += bare_cpu
                samples["cpu"].append(cpu - bare_cpu)
                samples["total"].append(total)
                samples["overhead"].append(total - turn.timings["generate"].total_seconds() * 1000)
                samples["bare"].append(bare_ms[0])
                returned.append(turn)
            await runtime.drain()
            if record_behind and returned:
                samples["cpu"] = [(_cpu() - run_cpu - bare_total) / len(returned)]
            for turn in [await t.settled() for t in returned]:
                steps = {name: spent.total_seconds() * 1000 for name, spent in turn.timings.items()}
                for name in STEPS:
                    samples[name].append(steps.get(name, 0.0))
            await manager.flush()
        await bare.aclose()
    spreads = {name: Spread.of(values) for name, values in samples.items()}
    medians = {name: spreads[name].p50_ms for name in STEPS}
    timed = len(samples["total"])
    ended = os.getloadavg()[0]
    return RuntimeFigures(
        timed, memories, (load, ended), spreads["overhead"], spreads["total"], spreads["bare"], medians,
        statistics.median(samples["cpu"]), pace, record_behind,
    )  # fmt: skip


def _cpu() -> float:
    """Milliseconds of CPU this process (all its threads) and its finished children (ripgrep) have used."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.process_time() + children.ru_utime + children.ru_stime) * 1000


def _cpu_of(pids: Sequence[int]) -> float:
    """Milliseconds of CPU the processes `pids` (and their reaped children) have used, from /proc."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total * 1000 / os.sysconf("SC_CLK_TCK")


@contextmanager
def _clock() -> Iterator[list[float]]:
    """Milliseconds the block took, in the yielded list once it ends."""
    took: list[float] = []
    started = time.perf_counter()
    try:
        yield took
    finally:
        took.append((time.perf_counter() - started) * 1000)


def _start_proxy(store: Path, upstream: ChatServer, record_first: bool) -> tuple[subprocess.Popen[str], str]:
    """`agent-memory proxy` for the daemon of `store`, on a free port; its base URL."""
    command = [sys.executable, "-c", "from agent_memory.interfaces.cli import main; raise SystemExit(main())"]
    command += ["--data-dir", str(store), "proxy", "--upstream", MODEL, "--api-base", upstream.api_base]
    command += ["--api-key-env", UPSTREAM_KEY_ENV, "--no-start", *(["--record-first"] if record_first else [])]
    env = {**os.environ, UPSTREAM_KEY_ENV: "bench-upstream-key"}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("agent-memory proxy: http://"):
            drain = threading.Thread(target=process.stderr.read, daemon=True)  # a full pipe would block it
            drain.start()
            return process, line.split()[2]
    process.wait(timeout=10)
    raise RuntimeError(f"the proxy exited with {process.returncode} before it served")


async def measure_proxy(
    store: Path, messages: Sequence[str], *, warmup: int, pace: float = 0.0, record_first: bool = False
) -> ProxyFigures:
    """Proxy round trips against direct upstream calls, through the openai client, on a daemon over `store`
    (`record_first`: the proxy answers only once it has recorded, `agent-memory proxy --record-first`)."""
    import openai

    from agent_memory.interfaces.autostart import daemon_client, stop_daemon
    from agent_memory.interfaces.discovery import live_daemon
    from agent_memory.interfaces.token import read_token

    samples: dict[str, list[float]] = {"proxy": [], "direct": [], "overhead": []}
    with ChatServer(brief, name="upstream") as upstream:
        daemon = await daemon_client(store, start=True)
        await daemon.aclose()
        process, base_url = await asyncio.to_thread(_start_proxy, store, upstream, record_first)
        owner = live_daemon(store)
        pids = [process.pid] + ([owner.pid] if owner is not None else [])
        headers = {"x-agent-memory-session": "proxy-bench"}
        try:
            async with (
                openai.AsyncOpenAI(base_url=base_url, api_key=read_token(store), max_retries=0) as proxied,
                openai.AsyncOpenAI(base_url=upstream.api_base, api_key="bench", max_retries=0) as direct,
            ):
                load, cpu = 0.0, 0.0
                for number, text in enumerate(messages):
                    if number == warmup:
                        await asyncio.sleep(3)  # the daemon builds its keyword index in the background
                        load, cpu = os.getloadavg()[0], _cpu_of(pids)
                    asked: list[Any] = [
                        {"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": text},
                    ]
                    times = {}
                    for which in ("direct", "proxy") if number % 2 == 0 else ("proxy", "direct"):
                        client, sent = (direct, None) if which == "direct" else (proxied, headers)
                        with _clock() as took:
                            await client.chat.completions.create(model="any", messages=asked, extra_headers=sent)
                        times[which] = took[0]
                    upstream.requests.clear()
                    await asyncio.sleep(pace)
                    if number >= warmup:
                        samples["proxy"].append(times["proxy"])
                        samples["direct"].append(times["direct"])
                        samples["overhead"].append(times["proxy"] - times["direct"])
                ended, cpu = os.getloadavg()[0], _cpu_of(pids) - cpu
        finally:
            process.terminate()
            await asyncio.to_thread(process.wait, 30)
            await asyncio.to_thread(stop_daemon, store)
    spreads = {name: Spread.of(values) for name, values in samples.items()}
    timed = len(samples["proxy"])
    return ProxyFigures(
        timed, (load, ended), spreads["overhead"], spreads["proxy"], spreads["direct"], cpu / max(1, timed), pace
    )


async def run(
    *,
    size: int,
    seed: int,
    pool: int,
    turns: int,
    warmup: int,
    keep: Path | None,
    proxy: bool = True,
    pace: float = 0.0,
    record_first: bool = False,
    runtime_behind: bool = False,
) -> tuple[RuntimeFigures, ProxyFigures | None]:
    """Build (or reuse) the store, then time the runtime and the proxy, each on its own copy."""
    with tempfile.TemporaryDirectory() as scratch:
        kept = (keep or Path(scratch) / "kept") / store_name(size, seed, pool)
        stored = await ensure_store(kept, size, seed=seed, pool=pool)
        messages = chat_messages(stored, warmup + turns, seed=seed)
        runtime = await measure_runtime(
            copy_store(kept, Path(scratch) / "runtime"),
            messages,
            warmup=warmup,
            pace=pace,
            record_behind=runtime_behind,
        )
        proxied = None
        if proxy:
            proxied = await measure_proxy(
                copy_store(kept, Path(scratch) / "proxy"), messages, warmup=warmup, pace=pace, record_first=record_first
            )
    return runtime, proxied


def _verdict(spread: Spread) -> str:
    met = spread.p50_ms <= GOAL_P50_MS and spread.p95_ms <= GOAL_P95_MS
    return f"p50 <= {GOAL_P50_MS:.0f}, p95 <= {GOAL_P95_MS:.0f} ms: {'met' if met else 'missed'}"


def render(runtime: RuntimeFigures, proxy: ProxyFigures | None, *, warmup: int) -> str:
    """The tables for docs/benchmarks.md (one run: one pace)."""
    r, paced = runtime, f"{runtime.pace:g} s apart" if runtime.pace else "back to back"
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, `nice -n 10`; {r.memories:,} memories; {r.turns} timed turns ({paced}) after "
        f"{warmup} warm-up turns; heuristic save decision and fact extraction; load: 1-min average at start -> end.",
        "",
        "| path | overhead p50 / p95 | CPU overhead | turn p50 / p95 | upstream call p50 / p95 | goal | load |",
        "|---|---|---|---|---|---|---|",
        f"| AgentRuntime.chat (in process{', recording behind' if r.behind else ''}) | {_pair(r.overhead)} | "
        f"{r.cpu_overhead_ms:.1f} ms ({'mean' if r.behind else 'median'}) | "
        f"{_pair(r.total)} | {_pair(r.bare)} (bare ChatModel call) | {_verdict(r.overhead)} | {_loads(r.load)} |",
    ]
    if proxy is not None:
        p = proxy
        lines.append(
            f"| proxy (openai client -> proxy -> daemon) | {_pair(p.overhead)} | {p.cpu_ms:.1f} ms (mean, proxy + "
            f"daemon) | {_pair(p.proxy)} | {_pair(p.direct)} (openai client, direct) | {_verdict(p.overhead)} | "
            f"{_loads(p.load)} |"
        )
    lines += ["", "| step (runtime, median ms) | " + " | ".join(STEPS) + " |", "|---|" + "---|" * len(STEPS)]
    lines.append(f"| {paced} | " + " | ".join(f"{r.steps[name]:.1f}" for name in STEPS) + " |")
    return "\n".join(lines)


def _loads(load: tuple[float, float]) -> str:
    return f"{load[0]:.1f} -> {load[1]:.1f}"


def _pair(spread: Spread) -> str:
    return f"{spread.p50_ms:.1f} / {spread.p95_ms:.1f} ms"


def arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--size", type=int, default=10_000, help="memories in the synthetic store")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool", type=int, default=3000, help="base sentences embedded with the real model")
    parser.add_argument("--turns", type=int, default=200, help="timed turns (and proxy requests)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="keep the built store here (shared with bench_retrieve.py)")
    parser.add_argument("--no-proxy", action="store_true", help="time the runtime only")
    parser.add_argument("--record-first", action="store_true", help="the proxy records before it answers")
    parser.add_argument("--runtime-behind", action="store_true", help="the runtime records after it answers")
    parser.add_argument("--pace", type=float, default=0.0, help="seconds between turns (0: back to back)")
    parser.add_argument("--proof", action="store_true", help="run the long-conversation proof instead")
    parser.add_argument("--proof-turns", type=int, default=2000)
    parser.add_argument("--facts", type=int, default=10, help="facts stated early and asked at the end (<= 10)")
    return parser


def main(args: argparse.Namespace) -> int:
    if args.proof:
        from agent_memory.bench.runtime_proof import prove
        from agent_memory.bench.runtime_proof import render as render_proof

        report = asyncio.run(prove(args.proof_turns, args.facts, seed=args.seed))
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        print(render_proof(report))
        return 0 if report.ok else 1
    runtime, proxy = asyncio.run(
        run(
            size=args.size, seed=args.seed, pool=args.pool, turns=args.turns, warmup=args.warmup, keep=args.keep,
            proxy=not args.no_proxy, pace=args.pace, record_first=args.record_first,
            runtime_behind=args.runtime_behind,
        )
    )  # fmt: skip
    print(render(runtime, proxy, warmup=args.warmup))
    return 0
