#!/usr/bin/env python3
"""SIGKILL a turn-ingesting child at random moments and check nothing acknowledged was lost.

Usage: python scripts/crash_test.py --cycles 50 [--seed S] [--data-dir D]
       python scripts/crash_test.py --daemon --clients 8 --cycles 50 [--seed S] [--data-dir D]
         (the daemon, SIGKILLed under concurrent HTTP writers; unanswered turns re-sent to the next one)
Last line: cycles=N acknowledged=A lost=L divergent=D
"""

import sys

from agent_memory.bench.crash import main

if __name__ == "__main__":
    sys.exit(main())
