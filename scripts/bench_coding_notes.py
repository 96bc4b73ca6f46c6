#!/usr/bin/env python3
"""The coding-notes retrieval check (issue #23): recall@5 for literal and paraphrased questions, each layer alone,
each signal left out, and whether the order of the questions changes the rankings.

Usage: python scripts/bench_coding_notes.py [--data FILE | --set shipped|heldout|third|fourth|fifth|sixth|all]
    [--only NAME ...] [--variant NAME=key:value,...] [--no-order-check] [--out report.json]

--set all runs every set that ships and adds the figures pooled over them, each variant against the shipped
defaults with an interval that resamples sets, then questions. --heldout, --third, --fourth, --fifth and --sixth are short
for --set. --variant adds a configuration of your own beside the shipped defaults (values as JSON scalars), e.g.
--only 'shipped defaults' --variant 'floor 0.4=evidence_floor:0.4' --variant 'blend=fusion:"blend"'.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.coding_notes import SETS, VARIANTS, format_pooled, format_report, load_notes, pooled, run
from agent_memory.bench.folds import parse_variants


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a notes file of the same shape (default: the shipped set)")
    parser.add_argument("--set", choices=[*SETS, "all"], default="shipped", help="which shipped set")
    for name in ("heldout", "third", "fourth", "fifth", "sixth"):
        parser.add_argument(f"--{name}", dest="set", action="store_const", const=name, help=f"--set {name}")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="run only these configurations")
    parser.add_argument("--variant", action="append", default=[], help="NAME=key:value,key:value")
    parser.add_argument("--no-order-check", action="store_true")
    parser.add_argument("--out", type=Path, help="write the report as JSON")
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.only or []} if args.only or args.variant else dict(VARIANTS)
    try:
        yours = parse_variants(args.variant)
    except ValueError as exc:
        parser.error(str(exc))
    variants |= {name: changes for name, changes in yours.items() if name not in variants}
    files = {str(args.data): load_notes(args.data)} if args.data else {}
    names = [args.set] if args.set != "all" else list(SETS)
    sets = files or {name: load_notes(name=SETS[name]) for name in names}
    reports = {}
    for name, notes in sets.items():
        reports[name] = asyncio.run(run(notes, variants=variants, order_check=not args.no_order_check))
        print(f"== {name}\n{format_report(reports[name])}")
    names = list(reports)
    output: dict[str, object] = dict(reports) if len(reports) > 1 else reports[names[0]]
    if len(reports) > 1 and "shipped defaults" in variants:
        output["pooled"] = pooled(reports)
        print(format_pooled(output["pooled"], names))  # type: ignore[arg-type]
    if args.out:
        args.out.write_text(json.dumps(output, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
