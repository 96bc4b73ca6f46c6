"""Ingest benchmark: process_turn latency (p50/p95) and bulk process_turns throughput on a real conversation file.

`python scripts/bench_ingest.py --data ../shared/data/locomo/locomo_dev.json` prints the figures and writes them
into docs/benchmarks.md between the `bench-ingest` markers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from agent_memory.bench.ceiling import EmbeddingCeiling, measure_ceiling
from agent_memory.bench.datasets import READERS
from agent_memory.config import Config, LLMConfig, load_config
from agent_memory.engines import import_embedder, make_embedder
from agent_memory.interfaces.cli_ingest import prepared_ahead
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

BEGIN, END = "<!-- bench-ingest:begin -->", "<!-- bench-ingest:end -->"
LLM_BEGIN, LLM_END = "<!-- bench-ingest-llm:begin -->", "<!-- bench-ingest-llm:end -->"
BULK_GOALS = {"locomo": 300, "longmemeval": 60}  # turns/s end to end: LoCoMo's short turns, LongMemEval's long ones


@dataclass(frozen=True)
class IngestFigures:
    single_turns: int
    p50_ms: float
    p95_ms: float
    paced_p50_ms: float
    paced_p95_ms: float
    bulk_turns: int
    bulk_seconds: float
    saved_share: float
    fsync: str
    llm: str = ""
    ceiling: EmbeddingCeiling | None = None
    import_seconds: float = 0.0  # the same bulk run with embedding.import_precision, as `agent-memory ingest` does
    upgraded: int = 0  # then the vectors the upgrade made again in float32, on the store's next open
    upgrade_seconds: float = 0.0

    @property
    def bulk_rate(self) -> float:
        return self.bulk_turns / self.bulk_seconds


def percentile(values: list[float], share: float) -> float:
    """The value at `share` (0.95 for p95) of the sorted values, nearest rank. A share past 1 is refused: 95 once
    made a p95 the maximum (bench/mcp_bench.py, until 2026-12-04)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"percentile share must be between 0 and 1 (0.95 for p95), got {share}")
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    return ordered[round(share * (len(ordered) - 1))]


async def measure(
    turns: list[TurnInput], *, single: int, batch: int, fsync: str, llm: LLMConfig | None = None
) -> IngestFigures:
    """`llm` points the save decision at an LLM (the benchmark script starts a local test server for it)."""
    latencies: list[float] = []
    paced: list[float] = []
    llm = llm or LLMConfig()
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as bulk:
        config = load_config(environ={}, data_dir=one, journal__fsync=fsync).model_copy(update={"llm": llm})
        async with MemoryManager.open(config) as manager:
            for index, turn in enumerate(turns[: 2 * single]):
                started = time.perf_counter()
                await manager.process_turns([turn])
                elapsed = (time.perf_counter() - started) * 1000
                if index < single:
                    latencies.append(elapsed)  # back to back: the projector works beside the next turn
                else:
                    paced.append(elapsed)
                    await manager.flush()  # paced, as a conversation is: the projector is idle when a turn comes
        config = load_config(environ={}, data_dir=bulk, journal__fsync=fsync).model_copy(update={"llm": llm})
        seconds, saved = await _bulk(config, turns, batch)
    with tempfile.TemporaryDirectory() as imported:  # as `agent-memory ingest` imports, then the upgrade
        config = load_config(environ={}, data_dir=imported, journal__fsync=fsync).model_copy(update={"llm": llm})
        import_seconds, _ = await _bulk(config, turns, batch, bulk=True)
        async with MemoryManager.open(config) as manager:
            started = time.perf_counter()
            upgraded = await manager.vector_upgrade.catch_up()
            await manager.flush()
            upgrade_seconds = time.perf_counter() - started
    ceiling = None
    if not llm.model:  # what the model alone allows, beside what the whole pipeline did
        embedder = make_embedder(config)
        try:
            texts = [str(t.content) for t in turns]
            importer = import_embedder(embedder, config)
            ceiling = await measure_ceiling(
                texts, embedder, config.embedding.model_path, importer=importer, max_tokens=config.embedding.max_tokens
            )
        finally:
            await embedder.aclose()
    return IngestFigures(
        len(latencies),
        statistics.median(latencies),
        percentile(latencies, 0.95),
        statistics.median(paced),
        percentile(paced, 0.95),
        len(turns),
        seconds,
        saved / len(turns),
        fsync,
        llm.model,
        ceiling,
        import_seconds,
        upgraded,
        upgrade_seconds,
    )


async def _bulk(config: Config, turns: list[TurnInput], batch: int, *, bulk: bool = False) -> tuple[float, int]:
    """Every turn through process_turns in batches, projections included: (seconds, turns kept). `bulk`: as an
    import (`agent-memory ingest`): embedded by `embedding.import_precision`, each batch's texts prepared while the
    batch before commits (cli_ingest.prepared_ahead)."""
    async with MemoryManager.open(config) as manager:
        started = time.perf_counter()
        saved = 0
        iterator = iter(turns)
        batches = iter(lambda: list(islice(iterator, batch)), [])
        if bulk:
            async with contextlib.aclosing(prepared_ahead(manager, batches)) as ready:
                async for chunk in ready:
                    saved += sum(r.saved for r in await manager.process_turns(chunk, bulk=True))
        else:
            for chunk in batches:
                saved += sum(r.saved for r in await manager.process_turns(chunk))
        await manager.flush()
        return time.perf_counter() - started, saved


def markers(data_format: str, *, llm: bool) -> tuple[str, str]:
    """The docs block a run rewrites: LoCoMo's turns and another format's each keep a block of their own."""
    if llm:
        return LLM_BEGIN, LLM_END
    if data_format == "locomo":
        return BEGIN, END
    return f"<!-- bench-ingest-{data_format}:begin -->", f"<!-- bench-ingest-{data_format}:end -->"


def render(figures: IngestFigures, data: Path, batch: int, data_format: str = "locomo") -> str:
    begin, end = markers(data_format, llm=bool(figures.llm))
    llm = f"LLM `{figures.llm}` on a local test server answering at once" if figures.llm else "no LLM (the heuristic)"
    goal = BULK_GOALS.get(data_format)  # the goals, with no LLM
    p50, p95 = (" ", " ") if figures.llm else (" <= 25 ms ", " <= 60 ms ")
    bulk = f" >= {goal} turns/s " if goal and not figures.llm else " "
    return "\n".join(
        [
            begin,
            f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; data `{data.name}`; {llm}; journal fsync `{figures.fsync}`; "
            "real all-MiniLM-L6-v2, SQLite, Kuzu and Qdrant Edge in a temporary directory.",
            "",
            "| measure | value | target |",
            "|---|---|---|",
            f"| process_turn p50 ({figures.single_turns} turns one at a time, back to back) | {figures.p50_ms:.1f} ms |{p50}|",
            f"| process_turn p95 | {figures.p95_ms:.1f} ms |{p95}|",
            f"| process_turn p50 / p95 paced ({figures.single_turns} more turns, projector idle when each arrives) "
            f"| {figures.paced_p50_ms:.1f} / {figures.paced_p95_ms:.1f} ms | |",
            f"| bulk process_turns, batches of {batch} ({figures.bulk_turns} turns, projections included) "
            f"| {figures.bulk_rate:.0f} turns/s |{bulk}|",
            *_import_rows(figures, batch, bulk),
            f"| share of turns kept as memories | {figures.saved_share:.2f} | |",
            *_ceiling_rows(figures.ceiling),
            end,
        ]
    )


def _import_rows(figures: IngestFigures, batch: int, goal: str) -> list[str]:
    if not figures.import_seconds:
        return []
    rate = figures.bulk_turns / figures.import_seconds
    upgrade = figures.upgraded / figures.upgrade_seconds if figures.upgrade_seconds else 0.0
    return [
        f"| the same, as `agent-memory ingest` imports (int8 documents, `embedding.import_precision`) "
        f"| {rate:.0f} turns/s |{goal}|",
        f"| then the upgrade to float32 while idle, on the next open ({figures.upgraded} memories) "
        f"| {upgrade:.0f} memories/s | |",
    ]


def _ceiling_rows(ceiling: EmbeddingCeiling | None) -> list[str]:
    if ceiling is None:
        return []
    return [
        f"| the embedder alone, all {ceiling.turns} turns in one call | {ceiling.embedder_rate:.0f} turns/s | |",
        *(
            [f"| the import's int8 model alone, the same call | {ceiling.import_rate:.0f} turns/s | |"]
            if ceiling.import_rate
            else []
        ),
        f"| ceiling for embedding every turn: {ceiling.gflop_per_turn:.2f} GFLOP a turn "
        f"({ceiling.tokens_per_turn:.1f} tokens) at this machine's {ceiling.machine_gflops:.0f} GFLOP/s "
        f"(float32 matrix multiply, all cores; int8 passes are not bound by it) | {ceiling.ceiling_rate:.0f} turns/s | |",
        *(
            [
                f"| ceiling for the int8 model: the same operations at this machine's {ceiling.int8_gops:.0f} GOP/s "
                "(int8 matrix multiply, one-thread passes side by side on every core) "
                f"| {ceiling.int8_ceiling_rate:.0f} turns/s | |"
            ]
            if ceiling.int8_gops
            else []
        ),
    ]


def publish(section: str, out: Path | None, *, begin: str, end: str, heading: str) -> int:
    """A benchmark's last step: print its section, and write it between its markers in `out` when one is given
    (write_docs); returns the exit code, 0."""
    print(section)
    if out is not None:
        write_docs(section, out, begin=begin, end=end, heading=heading)
    return 0


def write_docs(section: str, path: Path, *, begin: str = BEGIN, end: str = END, heading: str = "Ingest") -> None:
    """Replace what lies between the markers (the section includes them), or append it under `heading`."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + f"\n\n## {heading}\n\n" + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None, *, llm: LLMConfig | None = None) -> int:
    parser = argparse.ArgumentParser(description="process_turn latency and bulk ingest throughput")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--format", choices=sorted(READERS), default="locomo")
    parser.add_argument("--single", type=int, default=400, help="turns timed one at a time")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--fsync", choices=["always", "never"], default="always")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args(argv)
    turns = list(READERS[args.format](args.data))
    figures = asyncio.run(measure(turns, single=args.single, batch=args.batch, fsync=args.fsync, llm=llm))
    section = render(figures, args.data, args.batch, args.format)
    print(section)
    begin, end = markers(args.format, llm=llm is not None)
    heading = "Ingest with an LLM" if llm else "Ingest" if args.format == "locomo" else f"Ingest ({args.format} turns)"
    write_docs(section, args.out, begin=begin, end=end, heading=heading)
    return 0
