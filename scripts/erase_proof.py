#!/usr/bin/env python3
"""Erase under SIGKILL, 20 cycles: a canary written, touched by retrieval and sleep jobs, erased, the eraser
killed at a random moment; the next open finishes it; every file is searched for the canaries.

Usage: python scripts/erase_proof.py --cycles 20 [--seed S] [--data-dir D]
Last line: cycles=N erased=E hits=0 divergent=0
"""

import sys

from agent_memory.bench.erase_proof import main

if __name__ == "__main__":
    sys.exit(main())
