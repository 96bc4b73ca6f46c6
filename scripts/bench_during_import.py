#!/usr/bin/env python3
"""A question's latency while an import runs into the same store (agent_memory/bench/during_import.py).

Usage: python scripts/bench_during_import.py --keep /tmp/latency-real [--out docs/benchmarks.md]
"""

import sys

from agent_memory.bench.during_import import main

if __name__ == "__main__":
    sys.exit(main())
