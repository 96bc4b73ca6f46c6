"""The grep layer alone over a log of real text: one rg reading the segments in turn against one rg a segment,
side by side.

Usage: python scripts/bench_grep.py [--sizes 10000,100000] [--repeat 5] [--keep DIR]

The log is written as the store writes it (JsonlJournal, 64 MB segments) from the same turns the real-text
latency benchmark uses (agent_memory/bench/latency_real.py: LoCoMo dev, then LongMemEval dev's haystacks, repeated
with shifted dates until the size is reached); no model and no other engine is involved, so building the 100k log
takes seconds. The searches are the grep terms of every dev question that has any, as retrieval derives them
(its time phrase left out, full names not grepped), at retrieval's candidate limit. Each search runs once with
`processes=1` and once with every core, alternated, `--repeat` times. Nothing is written to docs/: the table is
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from agent_memory.bench.latency_real import LOCOMO, LONGMEMEVAL, NAMESPACE, real_turns
from agent_memory.bench.perf import percentile
from agent_memory.bench.questions import locomo_questions, longmemeval_questions
from agent_memory.cognition.grep_terms import grep_terms
from agent_memory.cognition.timewords import without_time_phrases
from agent_memory.config import load_config
from agent_memory.models import LogRecord, Role, TurnId, new_id
from agent_memory.storage.grep import GrepHit, RipgrepJournalSearch
from agent_memory.storage.journal import JsonlJournal


async def write_log(log_dir: Path, size: int, locomo: Path, longmemeval: Path, segment_bytes: int) -> int:
    """The real-text log of `size` turns in `log_dir` (reused when it is there); its size in bytes."""
    if not await asyncio.to_thread(log_dir.is_dir):
        journal = await JsonlJournal.open(log_dir, fsync=False, segment_max_bytes=segment_bytes)
        records = [
            LogRecord(
                TurnId(new_id()),
                NAMESPACE,
                turn.session_id,
                turn.turn_number,
                Role(turn.role),
                turn.content if isinstance(turn.content, str) else turn.content.decode(),
                turn.at or datetime.now(UTC),
                None,
            )
            for turn in real_turns(locomo, longmemeval, size)
        ]
        for start in range(0, len(records), 5000):
            await journal.append_many(records[start : start + 5000])
        await journal.aclose()
    return await asyncio.to_thread(_bytes, log_dir)


def _bytes(log_dir: Path) -> int:
    return sum(path.stat().st_size for path in log_dir.iterdir())


def searches(locomo: Path, longmemeval: Path) -> list[list[str]]:
    """The grep terms of every dev question that has some, as retrieval finds them."""
    questions = [*locomo_questions(locomo), *longmemeval_questions(longmemeval)]
    found = []
    for question in questions:
        spoken = without_time_phrases(question.text, now=question.asked_at)
        terms = grep_terms(spoken, names=False)
        if terms:
            found.append(terms)
    return found


async def timed(search: RipgrepJournalSearch, terms: list[str], limit: int) -> tuple[float, list[GrepHit]]:
    started = time.perf_counter()
    hits = await search.search(terms, namespace=NAMESPACE, limit=limit)
    return (time.perf_counter() - started) * 1000, hits


async def bench(args: argparse.Namespace, root: Path) -> None:
    limit = load_config(environ={}).retrieval.candidate_limit
    asked = searches(args.locomo, args.longmemeval)
    print(f"{len(asked)} questions with grep terms; limit {limit}; {args.repeat} rounds\n")
    print(
        "| turns | log | segments | searches | one rg, in turn: p50 / p95 / max ms | a rg a segment, side by side | same hits |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        log_dir = root / f"logs-{size}"
        size_bytes = await write_log(log_dir, size, args.locomo, args.longmemeval, args.segment_bytes)
        segments = len(await asyncio.to_thread(list, log_dir.glob("segment-*.jsonl")))
        alone, side = RipgrepJournalSearch(log_dir, processes=1), RipgrepJournalSearch(log_dir)
        times: dict[str, list[float]] = {"alone": [], "side": []}
        same = True
        for _ in range(args.repeat):
            for terms in asked:
                one, found_one = await timed(alone, terms, limit)
                many, found_many = await timed(side, terms, limit)
                times["alone"].append(one)
                times["side"].append(many)
                same = same and found_one == found_many
        cells = [
            f"{statistics.median(v):.1f} / {percentile(v, 0.95):.1f} / {max(v):.1f}"
            for v in (times["alone"], times["side"])
        ]
        print(
            f"| {size:,} | {size_bytes / 1e6:.0f} MB | {segments} | {len(asked)} | {cells[0]} | {cells[1]} | {same} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", type=lambda s: [int(n) for n in s.split(",")])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--longmemeval", type=Path, default=LONGMEMEVAL)
    parser.add_argument("--keep", type=Path, help="keep the logs here (reused by the next run)")
    parser.add_argument(
        "--segment-bytes", type=int, default=load_config(environ={}).journal.segment_max_bytes, help="as the store's"
    )
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(args, args.keep))
    else:
        with tempfile.TemporaryDirectory() as root:
            asyncio.run(bench(args, Path(root)))
    return 0
