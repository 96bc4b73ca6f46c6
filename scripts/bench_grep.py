#!/usr/bin/env python3
"""The grep layer alone over a log of real text, one rg a segment side by side against one in turn.

Usage: python scripts/bench_grep.py [--sizes 10000,100000] [--repeat 5] [--keep DIR]  (agent_memory/bench/grep_bench.py)
"""

import sys

from agent_memory.bench.grep_bench import main

if __name__ == "__main__":
    sys.exit(main())
