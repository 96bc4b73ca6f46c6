#!/usr/bin/env python3
"""Retrieval latency p50/p95 per layer and fused, on synthetic 10k/100k stores; writes docs/benchmarks.md.

Usage: python scripts/bench_retrieve.py --sizes 10000,100000 [--keep /tmp/bench-retrieve] [--no-docs]
       python scripts/bench_retrieve.py --text real|both --sizes 10000 --keep /tmp/latency-real [--pace 0,50]
"""

import sys

from agent_memory.bench.latency import main

if __name__ == "__main__":
    sys.exit(main())
