"""Filling a benchmark's store: every turn of a LoCoMo or LongMemEval file through the real `process_turns` path
with its session's time, as `agent-memory ingest` sends turns (batches of 64 across sessions, each embedded while the
one before it commits), then the vectors an ingest leaves for later made at once, so questions meet a store at rest.

A store that already holds some of the turns gets only the others (a second run reuses a store). Used by `agent-memory
bench` (harness.py), `bench_goals.py`, `bench_folds.py` and the knowledge-update and real-text latency benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from agent_memory.bench.datasets import READERS
from agent_memory.interfaces.cli_ingest import Progress, Tally, prepared_ahead
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

PROGRESS_EVERY = 30.0
"""Seconds between two progress lines of a benchmark's ingest (a held-out LongMemEval file takes minutes)."""


class _Lines:
    """A text stream that hands each line to a callback (the harness's `progress`): what Progress writes to."""

    def __init__(self, say: Callable[[str], None] | None) -> None:
        self.say = say

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if self.say is not None:
                self.say(line)
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False


async def ingest(
    manager: MemoryManager,
    turns: Iterable[TurnInput],
    *,
    batch: int = 64,
    long_turns: list[int] | None = None,
    progress: Callable[[str], None] | None = None,
    total: int = 0,
) -> tuple[int, float]:
    """Every turn through `process_turns` (the write path of live turns: float32 documents, no `bulk`), in batches of
    `batch` in the order given, as `agent-memory ingest` sends them (a batch may end one session and begin the
    next), each batch's texts embedded while the one before it commits (`prepared_ahead`). Returns (turns,
    seconds). A turn over max_content_bytes is remembered in chunks (long_turns.py); `long_turns`, when given, gets
    each such turn's chunk count. `progress`, when given, gets `agent-memory ingest`'s line (turns done of `total`,
    turns/s, ETA) every PROGRESS_EVERY seconds and at the end."""
    started, count = time.perf_counter(), 0
    remaining = iter(turns)
    batches = iter(lambda: list(islice(remaining, batch)), [])
    tally = Tally()
    tally.begin(time.perf_counter())
    with Progress(total, _Lines(progress), every=PROGRESS_EVERY) as shown:
        async with contextlib.aclosing(prepared_ahead(manager, batches, bulk=False)) as ready:
            async for chunk in ready:
                results = await manager.process_turns(chunk)
                if long_turns is not None:
                    long_turns += [r.chunks for r in results if r.chunks]
                count += len(chunk)
                tally.add(results)
                tally.batch_ended(time.perf_counter(), wrote=True)
                if progress is not None:
                    shown.update(len(chunk), tally)
    await manager.flush()
    return count, time.perf_counter() - started


async def do_idle_work(manager: MemoryManager) -> float:
    """What an ingest leaves for the store's idle moments, made now as the daemon makes it, and projected: the int8
    document model's vectors made again in float32 (vector_upgrade.py; none unless the store was filled with int8
    documents), the context vectors (when on), and the digests of the memories that wait for them once
    `sleep.digest_idle_min` do (sleep/digests.py). Questions are then asked of the store at rest, which no
    background batch changes while they run. Returns the seconds it took."""
    started = time.perf_counter()
    await manager.vector_upgrade.catch_up()
    await manager.context_vectors.catch_up()
    await manager.digests.catch_up()
    await manager.flush()
    return time.perf_counter() - started


def turns_for(dataset: str, path: Path, namespaces: set[str] | None = None) -> Iterator[TurnInput]:
    for turn in READERS[dataset](path):
        if namespaces is None or turn.namespace in namespaces:
            yield turn


@dataclass(frozen=True)
class Filled:
    """What `fill` did: turns written now and turns the store had, the ingest's seconds, each long turn's chunk
    count, and the seconds the idle work left for later took (do_idle_work)."""

    turns: int
    reused: int
    seconds: float
    long_turns: list[int] = field(default_factory=list)
    idle_seconds: float = 0.0


async def fill(
    manager: MemoryManager,
    dataset: str,
    data: Path,
    namespaces: set[str],
    *,
    progress: Callable[[str], None] = lambda _: None,
) -> Filled:
    """Every turn of `namespaces` in `data` the store does not hold yet, ingested (`ingest`, its progress lines
    included), then the idle work it left done (do_idle_work); each step said to `progress`."""
    present = {ns: await manager.records.turn_keys(ns) for ns in namespaces}
    reused = sum(map(len, present.values()))
    total = await asyncio.to_thread(_count_fresh, dataset, data, namespaces, present)
    fresh = (t for t in turns_for(dataset, data, namespaces) if not _present(t, present))
    long_turns: list[int] = []
    turns, seconds = await ingest(manager, fresh, long_turns=long_turns, progress=progress, total=total)
    if reused:
        progress(f"reusing {reused} turns already in {manager.config.data_dir}")
    progress(f"ingested {turns} turns in {seconds:.1f} s ({turns / max(seconds, 1e-9):.0f} turns/s)")
    if long_turns:
        progress(f"{len(long_turns)} long turns (over max_content_bytes) split into {sum(long_turns)} chunks")
    idle_seconds = await do_idle_work(manager)
    progress(f"idle work left for later (vector upgrade, context vectors, digests) done in {idle_seconds:.1f} s")
    return Filled(turns, reused, seconds, long_turns, idle_seconds)


def _present(turn: TurnInput, present: dict[str, set[tuple[str, int]]]) -> bool:
    return (turn.session_id, turn.turn_number) in present[turn.namespace]


def _count_fresh(dataset: str, data: Path, namespaces: set[str], present: dict[str, set[tuple[str, int]]]) -> int:
    """How many turns an ingest will write (the file read once more, a turn at a time): the progress lines' total."""
    return sum(1 for t in turns_for(dataset, data, namespaces) if not _present(t, present))
