#!/usr/bin/env python3
"""erase of one memory at 10k and 100k memories: p50 / max seconds and what the proof scan read (issue #20).

Usage: python scripts/bench_erase.py --sizes 10000,100000 --erases 5 [--keep DIR]
"""

import sys

from agent_memory.bench.erase_bench import main

if __name__ == "__main__":
    sys.exit(main())
