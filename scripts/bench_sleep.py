#!/usr/bin/env python3
"""A full sleep cycle timed per job on synthetic 10k/100k stores; writes docs/benchmarks.md.

Usage: python scripts/bench_sleep.py --sizes 10000,100000 [--keep /tmp/bench-retrieve] [--no-docs]
"""

import sys

from agent_memory.bench.sleep_cycle import main

if __name__ == "__main__":
    sys.exit(main())
