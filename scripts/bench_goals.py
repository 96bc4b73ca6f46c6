#!/usr/bin/env python3
"""Issue #22's retrieval goals on a LoCoMo and a LongMemEval file: the held-out check, in one command.

Usage: python scripts/bench_goals.py --locomo HELDOUT_LOCOMO.json --longmemeval HELDOUT_LONGMEMEVAL.json.gz \
    [--data-dir DIR] [--out report.json]
(agent_memory/bench/goals.py). Exit 0 when every goal is met, 1 when one is not.
"""

import sys

from agent_memory.bench.goals import main

if __name__ == "__main__":
    sys.exit(main())
