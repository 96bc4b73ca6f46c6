#!/usr/bin/env python3
"""A one-shot `agent-memory search` through a running daemon vs. opening the store directly (issue #23).

Usage: python scripts/bench_light_cli.py [--size 1000] [--runs 20] [--direct-runs 3] [--no-docs]
"""

import sys

from agent_memory.bench.light_cli import main

if __name__ == "__main__":
    sys.exit(main())
