#!/usr/bin/env python3
"""The agent loop (issue #21): what AgentRuntime and the memory proxy add to a turn at 10k memories, and with
`--proof` the 2,000-turn conversation through a 4,000-token window.

Usage: nice -n 10 python scripts/bench_runtime.py [--size 10000] [--turns 200] [--keep /tmp/bench-retrieve]
       nice -n 10 python scripts/bench_runtime.py --proof [--proof-turns 2000] [--facts 10]
"""

import argparse
import logging
import sys

from agent_memory.bench import runtime_bench


def main() -> int:
    parser = runtime_bench.arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    return runtime_bench.main(args)


if __name__ == "__main__":
    sys.exit(main())
