#!/usr/bin/env python3
"""Retrieval settings judged by folds (issue #22): LoCoMo dev leave-one-conversation-out, LongMemEval dev.

Usage: python scripts/bench_folds.py --dataset locomo --data ../shared/data/locomo/locomo_dev.json \
    --data-dir DIR --variant 'anchors off=event_anchors:false' --variant 'evidence=keyword_evidence:true' [--out F]
DIR is a store the harness filled (agent-memory --data-dir DIR bench ..., every turn kept).

With --baseline-dir OTHER, two stores of the same data are compared instead (say, one ingested with
AGENT_MEMORY__EMBEDDING__DOCUMENT_PRECISION=float32 and one with int8): each asked with the shipped defaults,
DIR's per-question figures against OTHER's, per fold and with the same paired, clustered bootstrap. A store is
asked as a daemon leaves it after a pause: its int8 document vectors are first made again in float32 (in place,
vector_upgrade.py) unless AGENT_MEMORY__EMBEDDING__DOCUMENT_PRECISION=int8 or ..._UPGRADE_VECTORS=false is set.

With --apart, DIR (every conversation or haystack a namespace of one store, as the harness fills it) is compared
with a fresh store for each conversation alone, as a user's store holds one history: what sharing a store adds to
the figures. LongMemEval dev takes about 15 minutes here (49 stores).
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.folds import compare, figures, format_comparison, parse_variants, stores_apart, stores_compared


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["locomo", "longmemeval"], required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--variant", action="append", default=[], help="NAME=key:value,key:value")
    parser.add_argument("--baseline-dir", type=Path, help="another store of the same data: compare DIR against it")
    parser.add_argument(
        "--apart", action="store_true", help="compare DIR with a store of its own for each conversation"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        variants = parse_variants(args.variant)
    except ValueError as exc:
        parser.error(str(exc))
    for name, folder in (("--data-dir", args.data_dir), ("--baseline-dir", args.baseline_dir)):
        if folder is not None and not (folder / "memory.db").is_file():  # opening it would make an empty store
            parser.error(f"{name} {folder}: no store there (no memory.db); fill one with agent-memory bench first")
    if args.apart:
        if args.variant or args.baseline_dir is not None:
            parser.error(
                "--apart compares DIR with a store per conversation, with the shipped defaults: give no --variant or --baseline-dir"
            )
        results = asyncio.run(stores_apart(args.data_dir, args.dataset, args.data, budget=args.budget))
        report = compare(results, "one store")
    elif args.baseline_dir is not None:
        if args.variant:
            parser.error("--baseline-dir compares two stores with the shipped defaults: give no --variant")
        results = asyncio.run(
            stores_compared(args.data_dir, args.baseline_dir, args.dataset, args.data, budget=args.budget)
        )
        report = compare(results, "baseline store")
    else:
        results = asyncio.run(figures(args.data_dir, args.dataset, args.data, variants, budget=args.budget))
        report = compare(results, "shipped defaults")
    print(format_comparison(report, args.dataset))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
