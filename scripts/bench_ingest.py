#!/usr/bin/env python3
"""process_turn p50/p95 and bulk ingest turns/s; writes docs/benchmarks.md.

Usage: python scripts/bench_ingest.py --data ../shared/data/locomo/locomo_dev.json
"""

import sys

from agent_memory.bench.perf import main

if __name__ == "__main__":
    sys.exit(main())
