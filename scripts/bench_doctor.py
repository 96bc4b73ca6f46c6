#!/usr/bin/env python3
"""How long doctor holds the event loop on a store (a copy of it).

Usage: python scripts/bench_doctor.py --store /path/to/data-dir [--rounds 2]
"""

import sys

from agent_memory.bench.doctor_stalls import main

if __name__ == "__main__":
    sys.exit(main())
