#!/usr/bin/env python3
"""retrieve() right after process_turn() of the same text, against questions never stored.

Usage: python scripts/bench_agent_loop.py --keep /tmp/bench-retrieve [--size 10000] [--queries 100]
"""

import sys

from agent_memory.bench.agent_loop import main

if __name__ == "__main__":
    sys.exit(main())
