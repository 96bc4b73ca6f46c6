"""Issue #22's retrieval goals checked on any LoCoMo or LongMemEval file, in one command: the held-out check.

`python scripts/bench_goals.py --locomo FILE --longmemeval FILE [--data-dir DIR] [--out report.json]` fills two
stores of each file through `agent-memory bench`'s harness: one with the shipped defaults (every turn judged by the
save decision, as a user's store is) and one keeping every turn. Both are asked every question at 2,048 tokens,
and each goal is printed beside its figure on both stores, with a 95% bootstrap interval (conversations, then
their questions; LongMemEval: questions). A goal is met with the shipped defaults; the keep-all figure shows how
much of a miss the save decision's is. The floor, never below plain BM25 (the keyword layer alone) on the same
store, is met when the paired difference is not negative; the count of questions where BM25 finds more evidence
is beside it.

With `--sleep`, each store is filled, then a copy of it is asked as ingested and again after a full sleep cycle at
the time of the last question, as a daemon's store is while idle (bench/lifecycle.py: digests, consolidation,
compression, ...; a consolidated memory or a digest finds every turn it was made from), and
the recall goals are judged again on it, in rows of their own ("after a sleep cycle"). The store itself is never
slept: a second run asks it, or a fresh copy of it, as ingested.

The stores are made with the shipped defaults whatever the environment says (`load_config(environ={})`), in DIR
when given (a second run reuses their turns: only the questions are asked again), else in temporary folders that
are removed afterwards. Exit 0 when every goal is met as ingested, 1 when one is not (the rows after a sleep cycle
are reported, not judged by the exit status), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent_memory.bench.filling import fill
from agent_memory.bench.harness import QUESTIONS, run_bench
from agent_memory.config import Config, load_config
from agent_memory.manager import MemoryManager

BUDGET = 2048
STORES: dict[str, dict[str, Any]] = {"shipped defaults": {}, "every turn kept": {"save__keep_all": True}}
TARGETS: dict[str, list[tuple[str, str, float]]] = {  # dataset -> (goal, figure, at least)
    "locomo": [
        ("recall, all five categories", "all", 0.92),
        ("recall, multi-hop", "multi-hop", 0.72),
        ("recall, open-domain", "open-domain", 0.62),
    ],
    "longmemeval": [("turn recall", "pooled", 0.95)],
}


AS_INGESTED, AFTER_SLEEP = "as ingested", "after a sleep cycle"


@dataclass(frozen=True)
class Goal:
    dataset: str
    goal: str
    target: str  # "at least 0.92", "not below plain BM25"
    shipped: float  # the figure with the shipped defaults
    interval: tuple[float, float] | None  # its 95% bootstrap interval
    keep_all: float  # the same figure on the store that keeps every turn
    met: bool | None  # None: the data holds no question of this kind
    note: str = ""
    stage: str = AS_INGESTED  # or AFTER_SLEEP: the stores' copies after a full sleep cycle


def figure(report: dict[str, Any], key: str, stage: str = AS_INGESTED) -> tuple[float, tuple[float, float] | None]:
    """A recall of `report` at BUDGET: every category pooled ("all"), the headline pool ("pooled"), or a category's;
    NaN when the data has no such question. `stage` AFTER_SLEEP: of its store's copy after a sleep cycle."""
    summary = (report["lifecycle"]["after"] if stage == AFTER_SLEEP else report["budgets"])[str(BUDGET)]
    if key in ("all", "pooled"):
        pooled = summary.get("all_categories", summary["pooled"]) if key == "all" else summary["pooled"]
        low_high = pooled.get("recall_interval")
        return float(pooled["recall"]), (float(low_high[0]), float(low_high[1])) if low_high else None
    row = summary["by_category"].get(key)
    return (float(row["recall"]), None) if row else (math.nan, None)


def goals_of(dataset: str, shipped: dict[str, Any], keep_all: dict[str, Any]) -> list[Goal]:
    """Each of `dataset`'s goals judged on the two stores' reports; when they hold a sleep cycle's figures
    (`run_bench(..., sleep=True)`), the recall goals again on those."""
    goals = _recall_goals(dataset, shipped, keep_all, AS_INGESTED)
    floor, other_floor = shipped["against_bm25"][str(BUDGET)], keep_all["against_bm25"][str(BUDGET)]
    if floor.get("n"):
        low, high = floor["interval"]
        note = f"BM25 alone {floor['plain_bm25']:.3f}; finds more for {floor['bm25_finds_more']} of {floor['n']}"
        goals.append(
            Goal(
                dataset,
                "difference from plain BM25",
                "not below plain BM25",
                float(floor["delta"]),
                (float(low), float(high)),
                float(other_floor.get("delta", math.nan)),
                float(floor["delta"]) >= 0,
                note,
            )
        )
    if "lifecycle" in shipped and "lifecycle" in keep_all:
        goals += _recall_goals(dataset, shipped, keep_all, AFTER_SLEEP)
    return goals


def _recall_goals(dataset: str, shipped: dict[str, Any], keep_all: dict[str, Any], stage: str) -> list[Goal]:
    goals = []
    for name, key, least in TARGETS[dataset]:
        value, interval = figure(shipped, key, stage)
        other, _ = figure(keep_all, key, stage)
        met, note = (None, "no question of this kind") if math.isnan(value) else (value >= least, "")
        goals.append(Goal(dataset, name, f"at least {least:.2f}", value, interval, other, met, note, stage))
    return goals


def render(goals: list[Goal]) -> str:
    """The goals as a Markdown table."""
    lines = [
        f"| data | goal at {BUDGET:,} tokens | target | shipped defaults [95%] | every turn kept | met |",
        "|---|---|---|---|---|---|",
    ]
    for g in goals:
        sign = "+" if g.target.startswith("not below") else ""  # a difference: its sign is the verdict
        interval = f" [{g.interval[0]:{sign}.3f}, {g.interval[1]:{sign}.3f}]" if g.interval else ""
        note = f" ({g.note})" if g.note else ""
        verdict = {True: "yes", False: "**no**", None: "not measured"}[g.met]
        data = g.dataset if g.stage == AS_INGESTED else f"{g.dataset}, {g.stage}"
        lines.append(
            f"| {data} | {g.goal} | {g.target} | {g.shipped:{sign}.3f}{interval}{note} | {g.keep_all:{sign}.3f} "
            f"| {verdict} |"
        )
    return "\n".join(lines)


async def check(
    files: dict[str, Path], root: Path, progress: Callable[[str], None] = print, *, sleep: bool = False
) -> tuple[list[Goal], dict[str, Any]]:
    """Fill (or reuse) the two stores of each file under `root` and judge its goals; also every report. With
    `sleep`, each store is filled, closed and copied (to `<store>-after-sleep`, replacing an earlier copy), and the
    copy is asked, then asked again after a full sleep cycle (its report's `lifecycle`): the store itself is never
    asked or slept, so its figures as ingested are the copy's before its cycle."""
    goals: list[Goal] = []
    reports: dict[str, Any] = {}
    for dataset, data in files.items():
        namespaces = {q.namespace for q in QUESTIONS[dataset](data)}
        for label, overrides in STORES.items():
            folder = root / f"{dataset}-{label.replace(' ', '-')}"
            progress(f"{dataset}, {label}: {folder}")
            async with MemoryManager.open(_config(folder, overrides)) as manager:
                if not sleep:
                    reports[f"{dataset}, {label}"] = await run_bench(
                        manager, dataset, data, budgets=[BUDGET], progress=progress
                    )
                    continue
                filled = await fill(manager, dataset, data, namespaces, progress=progress)
            copy = folder.with_name(f"{folder.name}-after-sleep")
            await asyncio.to_thread(_copy_store, folder, copy)
            progress(f"{dataset}, {label}, asked as ingested and {AFTER_SLEEP}: {copy}")
            async with MemoryManager.open(_config(copy, overrides)) as manager:
                report = await run_bench(manager, dataset, data, budgets=[BUDGET], sleep=True, progress=progress)
            reports[f"{dataset}, {label}"] = report | {"ingest_seconds": round(filled.seconds, 2)}
        goals += goals_of(dataset, reports[f"{dataset}, shipped defaults"], reports[f"{dataset}, every turn kept"])
    return goals, reports


def _config(folder: Path, overrides: dict[str, Any]) -> Config:
    return load_config(environ={}, data_dir=str(folder), journal__fsync="never", **overrides)


def _copy_store(store: Path, copy: Path) -> None:
    """`store` copied whole to `copy` (a closed store: its log, SQLite, graph and vectors), an older copy first
    removed."""
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(store, copy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, help="a LoCoMo file (locomo10.json's format)")
    parser.add_argument("--longmemeval", type=Path, help="a LongMemEval file (.json or .json.gz)")
    parser.add_argument("--data-dir", type=Path, help="keep the stores here (reused by a second run)")
    parser.add_argument("--out", type=Path, help="write the goals and every report as JSON")
    parser.add_argument(
        "--sleep",
        action="store_true",
        help="also judge the recall goals on a copy of each store after a full sleep cycle, as a daemon's store is",
    )
    args = parser.parse_args(argv)
    files = {name: path for name, path in (("locomo", args.locomo), ("longmemeval", args.longmemeval)) if path}
    if not files:
        parser.error("give --locomo FILE, --longmemeval FILE or both")
    for name, path in files.items():
        if not path.is_file():
            parser.error(f"--{name}: no file at {path}")
    if args.out is not None and not args.out.parent.is_dir():  # said now, not after an hour of asking
        parser.error(f"--out: no folder {args.out.parent} to write {args.out.name} in")
    with ExitStack() as stack:
        root = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agent-memory-goals-")))
        goals, reports = asyncio.run(check(files, root, progress=_say, sleep=args.sleep))
    table = render(goals)
    print(table)
    if args.out:
        found = [
            {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(g).items()} for g in goals
        ]
        args.out.write_text(json.dumps({"goals": found, "reports": reports}, indent=2) + "\n", encoding="utf-8")
    return 1 if any(g.met is False and g.stage == AS_INGESTED for g in goals) else 0


def _say(line: str) -> None:
    print(line, file=sys.stderr)
