"""What a question costs while an import runs: one daemon shared by an agent and a user's `agent-memory ingest`.

`python scripts/bench_during_import.py --keep /tmp/latency-real` takes the 10k real-text store of latency_real.py
(`--size`; built there first if it is missing), copies it, and on the copy (the kept store is left as it was):

1. **The model alone.** A question's embedding (`embed_query`) and a live turn's (`embed`) while the import's model
   embeds batches of 64 LongMemEval turns (`importer().embed`), as `agent-memory ingest` sends them; each also on
   the idle model.
2. **The whole retrieval.** `retrieve(k=10)` on LoCoMo dev questions, first on the idle store, then every 50 ms
   while LongMemEval turns are imported into another namespace of the same store the way `agent-memory ingest`
   imports them (`prepared_ahead`, then `process_turns(..., bulk=True)`, in batches of 64), the projector running
   as it runs in the daemon.
3. **A live turn.** `process_turn` of an agent's turn in a session of its own, the same way: idle, then every
   50 ms while the next `--turns` LongMemEval turns are imported.

It runs under the daemon's thread switch interval (`serve.switch_interval`; `--switch-ms` sets another, 0 leaves
Python's 5 ms), with the store settled as the daemon settles it (keyword projection built, heap frozen: serve.py;
`--no-freeze` leaves the heap as Python keeps it). Reported as p50 / p95 / max ms and the import's own turns a
second. The benchmark data is read where the user keeps it; nothing is copied into the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import cycle, islice
from pathlib import Path

from agent_memory.bench import perf
from agent_memory.bench.datasets import longmemeval_turns
from agent_memory.bench.latency_real import prepare, real_store_arguments
from agent_memory.bench.perf import percentile
from agent_memory.interfaces.cli_ingest import prepared_ahead
from agent_memory.interfaces.routing import LocalStore
from agent_memory.interfaces.serve import settled, thread_switching
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

log = logging.getLogger(__name__)
BEGIN, END = "<!-- bench-during-import:begin -->", "<!-- bench-during-import:end -->"
BATCH, PACE, IMPORTED = 64, 0.05, "import"  # ingest's batch; seconds between two questions; the import's namespace
LIVE_TURN = "Caroline: I went to a support group yesterday and it was so powerful."


@dataclass(frozen=True)
class Timed:
    what: str
    idle: list[float]
    busy: list[float]


@dataclass(frozen=True)
class Figures:
    model: list[Timed]
    retrieve: Timed
    live: Timed
    imported: int
    import_seconds: float
    size: int
    memories: int
    switch_ms: float
    frozen: bool


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} / {percentile(values, 0.95):.1f} / {max(values):.1f}"


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def _while(busy: asyncio.Task[object], call: Callable[[], Awaitable[object]]) -> list[float]:
    """`call` timed every PACE seconds until `busy` ends."""
    times: list[float] = []
    await asyncio.sleep(PACE)
    while not busy.done():
        times.append(await _timed(call))
        await asyncio.sleep(PACE)
    await busy
    return times


async def model_alone(manager: MemoryManager, texts: Sequence[str], question: str) -> list[Timed]:
    """A question's and a live turn's embedding, idle and while the import's model embeds `texts` in batches."""
    embedder, importer = manager.embedder, manager.write_path.importer

    async def batches() -> None:
        for start in range(0, len(texts), BATCH):
            await importer.embed(texts[start : start + BATCH])

    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "a question's embedding (`embed_query`)": lambda: embedder.embed_query(question),
        "a live turn's embedding (`embed`)": lambda: embedder.embed([LIVE_TURN]),
    }
    timed = []
    for what, call in calls.items():
        for _ in range(5):
            await call()  # warm
        idle = [await _timed(call) for _ in range(40)]
        timed.append(Timed(what, idle, await _while(asyncio.ensure_future(batches()), call)))
    return timed


async def while_importing(
    manager: MemoryManager, turns: Sequence[TurnInput], call: Callable[[], Awaitable[object]]
) -> tuple[list[float], list[float], float]:
    """`call` timed idle (60 times, PACE apart), then every PACE seconds while `turns` are imported as `agent-memory
    ingest` imports them; with the import's seconds."""
    idle = []
    for _ in range(60):
        idle.append(await _timed(call))
        await asyncio.sleep(PACE)

    async def importing() -> None:
        store = LocalStore(manager)
        batches = iter([list(turns[start : start + BATCH]) for start in range(0, len(turns), BATCH)])
        async for batch in prepared_ahead(store, batches):
            await store.process_turns(batch, bulk=True)

    started = time.perf_counter()
    busy = await _while(asyncio.ensure_future(importing()), call)
    return idle, busy, time.perf_counter() - started


async def whole_retrieval(
    manager: MemoryManager, turns: Sequence[TurnInput], questions: Sequence[str], now: datetime
) -> tuple[Timed, float]:
    """retrieve(k=10) idle, then while `turns` are imported."""
    for question in questions[:10]:
        await manager.retrieve(question, k=10, now=now)
    asked = cycle(questions[10:] or questions)  # the first ten warmed the store

    async def ask() -> None:
        await manager.retrieve(next(asked), k=10, now=now)

    idle, busy, seconds = await while_importing(manager, turns, ask)
    return Timed("`retrieve(k=10)`, LoCoMo dev questions", idle, busy), seconds


async def live_turns(manager: MemoryManager, turns: Sequence[TurnInput]) -> Timed:
    """An agent's `process_turn` in a session of its own, idle, then while `turns` are imported."""
    told = iter(range(1_000_000))

    async def tell() -> None:
        number = next(told)
        await manager.process_turn("live-agent", number, f"{LIVE_TURN} (turn {number})")

    for _ in range(5):
        await tell()  # warm
    idle, busy, _ = await while_importing(manager, turns, tell)
    return Timed("a live turn (`process_turn`), a session of its own", idle, busy)


async def run(args: argparse.Namespace) -> Figures:
    config, build = await prepare(args.keep / f"real-{args.size}", args.size, "real", args)
    questions, now = build["questions"], datetime.fromisoformat(build["now"])
    source = islice(longmemeval_turns(args.data_longmemeval), args.skip, args.skip + 2 * args.turns)
    # one namespace for the import; a session shared by two questions' haystacks stays two sessions
    turns = [replace(t, namespace=IMPORTED, session_id=f"{t.namespace}/{t.session_id}") for t in source]
    with tempfile.TemporaryDirectory(prefix="during-import-", dir=args.keep) as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(config.data_dir, copy)
        copied = config.model_copy(update={"data_dir": copy})
        switching = config.serve.switch_interval if args.switch_ms is None else timedelta(milliseconds=args.switch_ms)
        with thread_switching(switching):  # as the daemon serves
            switch_ms = sys.getswitchinterval() * 1000
            async with MemoryManager.open(copied) as manager, settled(manager, freeze=not args.no_freeze) as built:
                if built is not None:
                    await built
                model = await model_alone(manager, [str(t.content) for t in turns[: 10 * BATCH]], questions[0])
                retrieve, seconds = await whole_retrieval(manager, turns[: args.turns], questions, now)
                live = await live_turns(manager, turns[args.turns :])
    return Figures(
        model, retrieve, live, args.turns, seconds, args.size, int(build["memories"]), switch_ms, not args.no_freeze
    )


def render(figures: Figures) -> str:
    rows = [
        f"| {t.what} | {_cell(t.idle)} | {_cell(t.busy)} | {len(t.busy)} |"
        for t in [*figures.model, figures.retrieve, figures.live]
    ]
    return "\n".join(
        [
            BEGIN,
            f"Measured {datetime.now():%Y-%m-%d} on the real-text store of {figures.size:,} turns "
            f"({figures.memories:,} memories); the "
            f"import: {figures.imported:,} LongMemEval dev turns in batches of {BATCH} for each of the last two rows "
            f"(the next {figures.imported:,} for the live turns), {figures.imported / figures.import_seconds:.0f} "
            "turns/s while questioned; Python's thread switch interval "
            f"{figures.switch_ms:g} ms (the daemon's is `serve.switch_interval`); the heap "
            f"{'frozen, as the daemon freezes it' if figures.frozen else 'not frozen (--no-freeze)'}.",
            "",
            "| ms, p50 / p95 / max | idle | while an import runs | calls during it |",
            "|---|---|---|---|",
            *rows,
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a question's latency while an import runs into the same store")
    parser.add_argument("--keep", type=Path, required=True, help="latency_real.py's stores (built there if missing)")
    real_store_arguments(parser)
    parser.add_argument("--size", type=int, default=10_000, help="turns in latency_real.py's store")
    parser.add_argument("--turns", type=int, default=1280, help="LongMemEval turns each import writes")
    parser.add_argument("--skip", type=int, default=20_000, help="start past the turns the 10k store holds")
    parser.add_argument(
        "--switch-ms", type=float, help="Python's thread switch interval, ms (default: the daemon's; 0: Python's)"
    )
    parser.add_argument("--no-freeze", action="store_true", help="leave the heap unfrozen (the daemon freezes it)")
    parser.add_argument("--out", type=Path, help="write the table between the bench-during-import markers there")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.keep.mkdir(parents=True, exist_ok=True, mode=0o700)
    section = render(asyncio.run(run(args)))
    return perf.publish(section, args.out, begin=BEGIN, end=END, heading="A question while an import runs")
