#!/usr/bin/env python3
"""The coding-notes retrieval check (issue #23): recall@5 for literal and paraphrased questions, each layer alone,
each signal left out, and whether the order of the questions changes the rankings.

Usage: python scripts/bench_coding_notes.py [--data FILE | --heldout | --third | --fourth | --fifth] [--only NAME ...]
    [--variant NAME=key:value,...] [--no-order-check] [--out report.json]

--variant adds a configuration of your own beside the shipped defaults (values as JSON scalars), e.g.
--only 'shipped defaults' --variant 'floor 0.4=evidence_floor:0.4' --variant 'blend=fusion:"blend"'.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.coding_notes import (
    FIFTH,
    FOURTH,
    HELDOUT,
    SHIPPED,
    THIRD,
    VARIANTS,
    format_report,
    load_notes,
    run,
)
from agent_memory.bench.folds import parse_variants


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a notes file of the same shape (default: the shipped set)")
    parser.add_argument("--heldout", action="store_true", help="the held-out set that ships beside it")
    parser.add_argument("--third", action="store_true", help="the third set, written after the settings were chosen")
    parser.add_argument("--fourth", action="store_true", help="the fourth set, written after the third was scored")
    parser.add_argument("--fifth", action="store_true", help="the fifth set, written blind, scored once")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="run only these configurations")
    parser.add_argument("--variant", action="append", default=[], help="NAME=key:value,key:value")
    parser.add_argument("--no-order-check", action="store_true")
    parser.add_argument("--out", type=Path, help="write the report as JSON")
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.only or []} if args.only or args.variant else dict(VARIANTS)
    variants |= {name: changes for name, changes in parse_variants(args.variant).items() if name not in variants}
    report = asyncio.run(
        run(
            load_notes(
                args.data,
                name=FIFTH
                if args.fifth
                else FOURTH
                if args.fourth
                else THIRD
                if args.third
                else HELDOUT
                if args.heldout
                else SHIPPED,
            ),
            variants=variants,
            order_check=not args.no_order_check,
        )
    )
    print(format_report(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
