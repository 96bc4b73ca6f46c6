"""The MCP server's cost (issue #23): round trips over stdio through the daemon, a cold start, and boot size.

`python scripts/bench_mcp.py --size 10000 --calls 200 [--keep DIR] [--out FILE]`:
1. builds (or reuses) the latency benchmark's synthetic store of `--size` memories (bench/latency.py) and adds 60
   notes (decisions, findings, procedures) and a handoff;
2. cold start, `--cold` times: no daemon runs; an `agent-memory mcp` process is spawned over stdio and the time
   to the first `memory_boot` answer is taken (the MCP server starts, finds no daemon, starts one, waits for it);
3. warm: `--calls` `memory_recall` and `memory_boot` calls, interleaved, over that stdio session: p50 / p95 of the
   round trip as the client sees it;
4. boot growth: 1,000 more notes and 100 handoffs written through MCP; the boot context's tokens and time at
   checkpoints, which must stay inside the budget and not grow with the store;
5. in process, the daemon stopped: the same questions through `notes.recall` in this process (no MCP, no HTTP),
   and the question's pass alone (`embed_query`), 20 ms apart: what the round trip adds, and what the model costs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from agent_memory.bench.perf import percentile
from agent_memory.bench.revisions_bench import synthetic_store
from agent_memory.config import Config
from agent_memory.interfaces.autostart import stop_daemon
from agent_memory.manager import MemoryManager

KINDS = ("decision", "finding", "procedure")
TOPICS = (
    "the export job", "the retry policy", "the cache index", "the auth tokens", "the build", "the migrations",
    "the search ranking", "the upload limits", "the scheduler", "the logging format", "the feature flags",
    "the test fixtures", "the release script", "the config loader", "the rate limiter",
)  # fmt: skip
QUERIES = (
    "how are retries handled?", "what did we decide about the cache?", "how do I run the migrations?",
    "which limits apply to uploads?", "what is wrong with the scheduler?", "how is search ranked?",
    "where do feature flags live?", "how do we release?",
)  # fmt: skip


def _note(i: int) -> tuple[str, str]:
    topic = TOPICS[i % len(TOPICS)]
    kind = KINDS[i % len(KINDS)]
    text = {
        "decision": f"Decision {i}: {topic} keeps its state in SQLite, batches of {50 + i % 7 * 50}, no global lock.",
        "finding": f"Finding {i}: {topic} fails when the clock jumps; the test waits {10 + i % 5} ms too little.",
        "procedure": f"Procedure {i}: to change {topic}, edit the module, run make check, then bump the version.",
    }[kind]
    return kind, text


async def _seed_notes(config: Any, embedder: Any) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        if (await manager.notes.counts()).get("decision"):
            return
        for i in range(60):
            kind, text = _note(i)
            await manager.notes.write(text, kind=kind, agent="bench")
        await manager.notes.handoff("Seeded the store.", ["measure the MCP server"], agent="bench")


def _server(data_dir: Path, config_path: Path | None = None) -> StdioServerParameters:
    """`agent-memory mcp` for `data_dir`; with `config_path`, it and the daemon it starts read that file."""
    command = "from agent_memory.interfaces.cli import main; raise SystemExit(main())"
    config = ["--config", str(config_path)] if config_path is not None else []
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", command, "--data-dir", str(data_dir), *config, "mcp", "--namespace", "default", "--agent", "bench"],
        cwd=str(data_dir.parent),
    )


async def _timed(session: Client, name: str, arguments: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    result = await session.call_tool(name, arguments)
    took = (time.perf_counter() - started) * 1000
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{name} failed: {result.content}")
    return took, result.structured_content


async def cold_start(data_dir: Path, config_path: Path | None = None) -> float:
    """Seconds from spawning `agent-memory mcp` (no daemon running) to the first memory_boot answer."""
    await asyncio.to_thread(stop_daemon, data_dir)  # it waits: off the loop
    started = time.perf_counter()
    async with Client(_server(data_dir, config_path)) as session:
        await _timed(session, "memory_boot", {"task": "start"})
        return time.perf_counter() - started


async def run(
    size: int, calls: int, cold: int, keep: Path | None, growth: bool = True, config_path: Path | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        store = keep or Path(scratch)
        config, embedder = await synthetic_store(store, size, fresh=keep is None, config_path=config_path)
        await _seed_notes(config, embedder)
        await embedder.aclose()
        data_dir = config.data_dir
        try:
            colds = [await cold_start(data_dir, config_path) for _ in range(cold)]
            rng = random.Random(7)
            times: dict[str, list[float]] = {"memory_recall": [], "memory_boot": []}
            timed_calls: list[dict[str, Any]] = []  # every timed call, in order: which are slow, and when
            async with Client(_server(data_dir, config_path)) as session:
                for _ in range(10):  # warm the daemon's caches and the connection
                    await _timed(session, "memory_recall", {"query": rng.choice(QUERIES)})
                for n in range(calls):
                    query = rng.choice(QUERIES)
                    for tool, arguments in (
                        ("memory_recall", {"query": query}),
                        ("memory_boot", {"task": query, "budget_tokens": 600}),
                    ):
                        took, _ = await _timed(session, tool, arguments)
                        times[tool].append(took)
                        timed_calls.append({"n": len(timed_calls), "tool": tool, "query": query, "ms": round(took, 2)})
                    if n % 50 == 0:
                        logging.info("round %d of %d", n, calls)
                boots = await _growth(session, rng) if growth else []
        finally:
            await asyncio.to_thread(stop_daemon, data_dir)  # it waits: off the loop
        inside = await in_process(config, calls, random.Random(7))
    report: dict[str, Any] = {"size": size, "calls": calls, "cold_start_s": colds, "boot_growth": boots}
    report["in_process"] = inside
    report["text_model"] = {"name": embedder.name, "dimension": config.embedding.dimension}
    for name, values in times.items():
        report[name] = {"p50_ms": statistics.median(values), "p95_ms": percentile(values, 0.95), "n": len(values)}
    report["timed_calls"] = timed_calls
    report["slowest"] = sorted(timed_calls, key=lambda c: -c["ms"])[: max(1, len(timed_calls) // 20)]
    return report


async def in_process(config: Config, calls: int, rng: random.Random) -> dict[str, dict[str, float]]:
    """`notes.recall` and `embed_query` in this process on the store (no daemon may own it), `calls` questions
    each after 10 to warm up, 20 ms apart: p50 / p95 ms."""
    times: dict[str, list[float]] = {"notes.recall": [], "embed_query": []}
    async with MemoryManager.open(config) as manager:
        for _ in range(10):
            await manager.notes.recall(rng.choice(QUERIES), k=8)
        for _ in range(calls):
            query = rng.choice(QUERIES)
            started = time.perf_counter()
            await manager.notes.recall(query, k=8)
            times["notes.recall"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await manager.embedder.embed_query(query)
            times["embed_query"].append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.02)
    return {name: {"p50_ms": statistics.median(v), "p95_ms": percentile(v, 0.95)} for name, v in times.items()}


async def _growth(session: Client, rng: random.Random) -> list[dict[str, Any]]:
    """The boot after 0, 275, 550 and 1,100 more writes (10 notes to a handoff)."""
    checkpoints, written, found = (0, 275, 550, 1100), 0, []
    for target in checkpoints:
        while written < target:
            if written % 11 == 10:
                steps = [f"step {written} on {rng.choice(TOPICS)}"]
                await _timed(session, "memory_handoff", {"done": f"Session {written} done.", "next_steps": steps})
            else:
                kind, text = _note(1000 + written)
                await _timed(session, "memory_write", {"text": text, "type": kind})
            written += 1
        took, boot = await _timed(session, "memory_boot", {"task": "change the retry policy", "budget_tokens": 600})
        found.append({"writes": written, "tokens": boot["tokens"], "items": len(boot["items"]), "ms": took})
        logging.info("after %d writes: boot %d tokens, %.1f ms", written, boot["tokens"], took)
    return found


def format_report(report: dict[str, Any]) -> str:
    model = report["text_model"]
    lines = [f"store: {report['size']} synthetic memories + notes; {report['calls']} calls of each tool over stdio"]
    lines.append(f"text model: {model['name']} ({model['dimension']} dimensions)")
    for name in ("memory_recall", "memory_boot"):
        r = report[name]
        lines.append(f"{name}: p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms")
    lines.extend(
        f"in process, {name}: p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms"
        for name, r in report["in_process"].items()
    )
    slow = ", ".join(f"#{c['n']} {c['tool']} {c['query']!r} {c['ms']:.0f} ms" for c in report["slowest"])
    lines.append(f"slowest 5%: {slow}")
    colds = report["cold_start_s"]
    if colds:
        lines.append(f"cold start to first answer: median {statistics.median(colds):.2f} s of {colds}")
    lines.extend(
        f"boot after {p['writes']} more writes: {p['tokens']} tokens, {p['items']} items, {p['ms']:.1f} ms"
        for p in report["boot_growth"]
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="MCP round trips, cold start and boot size (issue #23)")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cold", type=int, default=3, help="cold starts to time")
    parser.add_argument("--keep", type=Path, help="build the store here and reuse it next time")
    parser.add_argument("--no-growth", action="store_true", help="skip the 1,100 writes of the boot growth check")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--config", type=Path, help="a TOML config for the store, the server and its daemon")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    growth = not args.no_growth
    report = asyncio.run(run(args.size, args.calls, args.cold, args.keep, growth=growth, config_path=args.config))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_report(report))
    return 0
