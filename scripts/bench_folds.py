#!/usr/bin/env python3
"""Retrieval settings judged by folds (issue #22): LoCoMo dev leave-one-conversation-out, LongMemEval dev.

Usage: python scripts/bench_folds.py --dataset locomo --data ../shared/data/locomo/locomo_dev.json \
    --data-dir DIR --variant 'anchors off=event_anchors:false' --variant 'evidence=keyword_evidence:true' [--out F]
DIR is a store the harness filled (agent-memory --data-dir DIR bench ..., every turn kept).
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.folds import compare, figures, format_comparison, parse_variants


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["locomo", "longmemeval"], required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--variant", action="append", default=[], help="NAME=key:value,key:value")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    variants = parse_variants(args.variant)
    results = asyncio.run(figures(args.data_dir, args.dataset, args.data, variants, budget=args.budget))
    report = compare(results, "shipped defaults")
    print(format_comparison(report, args.dataset))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
