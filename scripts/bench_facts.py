#!/usr/bin/env python3
"""The offline fact extractor's precision and recall on a labelled sample (issue #20).

Usage: python scripts/bench_facts.py [--data data/fact_sample.jsonl]
"""

import sys

from agent_memory.bench.fact_precision import main

if __name__ == "__main__":
    sys.exit(main())
