"""The knowledge-update benchmark's runner: the stores, the ways of building a context, the report (issue #20).

`python scripts/bench_knowledge_update.py --data ../shared/data/longmemeval/longmemeval_s_dev.json.gz` ingests
the knowledge-update questions' haystacks into the shipped store and the keep-all store (facts extracted on write in
both: only the facts block reads them), then asks each question with the turns alone, with the "known facts"
block, and (keep-all store) with plain BM25 over the turns. What is measured and how a question is classified:
bench/knowledge_update.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_memory.bench.filling import ingest, turns_for
from agent_memory.bench.harness import _saved
from agent_memory.bench.knowledge_update import (
    NEITHER,
    NEWEST,
    PLAIN_BM25,
    STALE,
    UpdateQuestion,
    ask_updates,
    compare,
    diagnose,
    summarise,
    update_questions,
)
from agent_memory.config import Config, load_config
from agent_memory.manager import MemoryManager


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of building the context over a store: retrieval changes on top of the store's config, the facts
    block or not, and whether it needs every turn stored (plain BM25 over turns does)."""

    name: str
    retrieval: Mapping[str, Any] = field(default_factory=dict)
    facts: str | None = None
    """None: the turns alone; else the facts block, chosen by this `facts.block_match`."""
    keep_all_only: bool = False


VARIANTS = (
    Variant("turns"),
    Variant("facts block", facts="speaker"),
    Variant("facts block, query words", facts="words"),
    Variant("plain BM25", PLAIN_BM25, keep_all_only=True),
)
STORES: dict[str, dict[str, Any]] = {"shipped": {"save__keep_all": False}, "keep-all": {"save__keep_all": True}}
BASELINE = ("keep-all", "plain BM25")


async def measure_store(
    config: Config,
    updates: Sequence[UpdateQuestion],
    data: Path,
    *,
    budgets: Sequence[int],
    variants: Sequence[Variant],
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Ingest the questions' haystacks (turns already in `config.data_dir` are reused) and ask every variant."""
    async with MemoryManager.open(config) as manager:
        namespaces = {u.question.namespace for u in updates}
        present = {ns: await manager.records.turn_keys(ns) for ns in namespaces}
        fresh = (
            t
            for t in turns_for("longmemeval", data, namespaces)
            if (t.session_id, t.turn_number) not in present[t.namespace]
        )
        turns, seconds = await ingest(manager, fresh)
        progress(f"{config.data_dir}: ingested {turns} turns in {seconds:.0f} s")
        held = [len(await manager.facts(namespace=ns)) for ns in sorted(namespaces)]
        store: dict[str, Any] = {
            "turns": turns + sum(map(len, present.values())),
            "ingest_seconds": round(seconds, 1),
            "save": await _saved(manager),
            "facts_held": {"total": sum(held), "median": statistics.median(held)},
            "rows": {},
        }
        base = manager.config.retrieval
        for variant in variants:
            manager.configure_retrieval(base.model_copy(update=dict(variant.retrieval)))
            store["rows"][variant.name] = await ask_updates(manager, updates, budgets=budgets, facts=variant.facts)
            progress(f"{variant.name}: asked {len(updates)} questions")
        manager.configure_retrieval(base)
    return store


async def run(
    data: Path,
    *,
    budgets: Sequence[int],
    stores: Sequence[str] = tuple(STORES),
    variants: Sequence[Variant] = VARIANTS,
    keep: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every store (a fresh temporary one, or `keep`/NAME reused), every variant, the summaries and the paired
    differences over plain BM25 and of the facts block over the turns alone. Facts are extracted on write in every
    store: only the facts block reads them, so the turns' figures are the store's own."""
    updates = update_questions(data)
    report: dict[str, Any] = {
        "data": str(data),
        "questions": len(updates),
        "asks": {a: sum(u.asks == a for u in updates) for a in ("current", "earlier", "unclear")},
        "budgets": list(budgets),
        "stores": {},
    }
    for name in stores:
        with tempfile.TemporaryDirectory(prefix="agent-memory-ku-") as scratch:
            root = keep / name if keep else Path(scratch)
            config = load_config(data_dir=str(root), facts__extract_on_write=True, **STORES[name])
            chosen = [v for v in variants if name == "keep-all" or not v.keep_all_only]
            report["stores"][name] = await measure_store(
                config, updates, data, budgets=budgets, variants=chosen, progress=progress
            )
    for store in report["stores"].values():
        store["summary"] = {
            v: {str(b): summarise([r for r in rows if r["budget"] == b]) for b in budgets}
            for v, rows in store["rows"].items()
        }
    report["differences"] = differences(report, budgets)
    by_id = {u.question.question_id: u for u in updates}
    report["diagnosis"] = {
        f"{store} / {variant}": [diagnose(by_id[r["question_id"]], r) for r in rows if r["turn"] not in (NEWEST, None)]
        for store, body in report["stores"].items()
        for variant, rows in body["rows"].items()
    }
    return report


def differences(report: Mapping[str, Any], budgets: Sequence[int]) -> list[dict[str, Any]]:
    """Each variant over plain BM25, and the facts block over the turns alone, paired by question."""
    stores = report["stores"]
    baseline = stores.get(BASELINE[0], {}).get("rows", {}).get(BASELINE[1])
    found: list[dict[str, Any]] = []
    for store, body in stores.items():
        for variant, rows in body["rows"].items():
            against = [(BASELINE, baseline)] if baseline is not None and (store, variant) != BASELINE else []
            if variant != "turns" and "turns" in body["rows"]:
                against.append(((store, "turns"), body["rows"]["turns"]))
            found.extend(
                {"store": store, "variant": variant, "over": f"{over[0]} / {over[1]}", "budget": budget}
                | {k: list(v) for k, v in compare(rows, base_rows, budget).items()}
                for over, base_rows in against
                for budget in budgets
            )
    return found


def format_report(report: Mapping[str, Any]) -> str:
    """The summary table (markdown), the differences, and each question's class per variant."""
    asks = ", ".join(f"{n} {a}" for a, n in report["asks"].items())
    lines = [
        f"{report['questions']} knowledge-update questions ({asks}); shares at turn level (session level after /)",
        "",
        "| store | context | budget | newest | stale only | neither | both | via facts | turn recall | session recall "
        "| tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for store, body in report["stores"].items():
        for variant, by_budget in body["summary"].items():
            for budget, s in by_budget.items():
                cells = [f"{s[f'turn {r}']:.1%} / {s[f'session {r}']:.1%}" for r in (NEWEST, STALE, NEITHER)]
                lines.append(
                    f"| {store} | {variant} | {int(budget):,} | "
                    + " | ".join(cells)
                    + f" | {s['both']:.1%} | {s['via_facts']:.1%} | {s['recall']:.3f} | {s['session_recall']:.3f}"
                    + f" | {s['tokens']:.0f} |"
                )
    lines += ["", "Paired differences (mean [95% bootstrap interval over questions]):"]
    for d in report["differences"]:
        parts = [f"{k} {v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]" for k, v in d.items() if isinstance(v, list)]
        lines.append(f"  {d['store']} / {d['variant']} over {d['over']} at {d['budget']}: " + "; ".join(parts))
    lines += ["", "Per question (turn level; asks for; newest rank / stale rank in the ranked turns):"]
    for store, body in report["stores"].items():
        for variant, rows in body["rows"].items():
            for r in rows:
                lines.append(
                    f"  {store} / {variant} {r['budget']:>5} {r['question_id']} ({r['asks']}): {r['turn']}, "
                    f"session {r['session']}, ranks {r['newest_rank']} / {r['stale_rank']}, recall {r['recall']:.2f}"
                )
    lines += ["", "Missed the newest value (query words each evidence turn shares; rank; chars; days before):"]
    for name, missed in report.get("diagnosis", {}).items():
        for d in missed:
            evidence = "; ".join(
                f"{kind} {e['turn'][0]}:{e['turn'][1]} {e['shares']} rank {d[f'{kind}_rank']} {e['chars']} ch "
                f"{e['days_before_question']} d"
                for kind in ("newest", "stale")
                for e in d[kind]
            )
            lines.append(f"  {name} {d['budget']:>5} {d['question_id']} {d['turn']}: {d['query_words']} | {evidence}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="LongMemEval knowledge-update questions: newest value or stale")
    parser.add_argument("--data", type=Path, required=True, help="longmemeval_s_dev.json.gz (read, never copied)")
    parser.add_argument("--budget", default="512,2048", help="token budgets, comma-separated")
    parser.add_argument("--stores", default=",".join(STORES), help=f"of {', '.join(STORES)}")
    parser.add_argument("--keep", type=Path, help="keep each store in KEEP/NAME, and reuse it when present")
    parser.add_argument("--out", type=Path, help="write the whole report (every row and context) as JSON")
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budget.split(",")]
    stores = [s for s in args.stores.split(",") if s]
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)  # noqa: E731
    report = asyncio.run(run(args.data, budgets=budgets, stores=stores, keep=args.keep, progress=say))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    for body in report["stores"].values():
        for rows in body["rows"].values():
            for row in rows:
                row.pop("context")
    print(format_report(report))
    return 0
