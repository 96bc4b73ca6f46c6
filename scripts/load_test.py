#!/usr/bin/env python3
"""Load a real daemon with concurrent HTTP clients, stop it, and check nothing acknowledged was lost.

Usage: python scripts/load_test.py --clients 16 --seconds 60 [--data-dir D] [--seed S] [--json OUT]
Last line: clients=C seconds=S requests=R errors=E lost=L divergent=D
"""

import sys

from agent_memory.bench.load import main

if __name__ == "__main__":
    sys.exit(main())
