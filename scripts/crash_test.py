#!/usr/bin/env python3
"""SIGKILL a turn-ingesting child at random moments and check nothing acknowledged was lost.

Usage: python scripts/crash_test.py --cycles 50 [--seed S] [--data-dir D]
Last line: cycles=N acknowledged=A lost=L divergent=D
"""

import sys

from agent_memory.bench.crash import main

if __name__ == "__main__":
    sys.exit(main())
