#!/usr/bin/env python3
"""The coding-notes retrieval check (issue #23): recall@5 for literal and paraphrased questions, each layer alone,
each signal left out, and whether the order of the questions changes the rankings.

Usage: python scripts/bench_coding_notes.py [--data FILE] [--only NAME ...] [--no-order-check] [--out report.json]
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.coding_notes import VARIANTS, format_report, load_notes, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a notes file of the same shape (default: the shipped set)")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="run only these configurations")
    parser.add_argument("--no-order-check", action="store_true")
    parser.add_argument("--out", type=Path, help="write the report as JSON")
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.only} if args.only else VARIANTS
    report = asyncio.run(run(load_notes(args.data), variants=variants, order_check=not args.no_order_check))
    print(format_report(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
