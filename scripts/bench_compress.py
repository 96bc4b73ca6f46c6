#!/usr/bin/env python3
"""BM25 turn recall on LongMemEval with every turn truncated or cut to its salient sentences (issue #20).

Usage: python scripts/bench_compress.py --data ../shared/data/longmemeval/longmemeval_s_dev.json.gz [--caps 128,256]
"""

import sys

from agent_memory.bench.compress_probe import main

if __name__ == "__main__":
    sys.exit(main())
