#!/usr/bin/env python3
"""update, supersede, forget and remember_fact p50 / p95 beside process_turn on a 10k store (issue #20).

Usage: python scripts/bench_revisions.py --size 10000 --changes 200 [--keep DIR]
"""

import sys

from agent_memory.bench.revisions_bench import main

if __name__ == "__main__":
    sys.exit(main())
