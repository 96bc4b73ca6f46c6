#!/usr/bin/env python3
"""stats() p50 / p95 under concurrent writes on a large store, now and the way it was (issue #19).

Usage: python scripts/bench_stats.py --size 100000 --writers 8 --seconds 30 [--keep DIR]
"""

import sys

from agent_memory.bench.stats_load import main

if __name__ == "__main__":
    sys.exit(main())
