"""Two coding agents hand work over through one store, over MCP stdio (agent_memory/interfaces/demo_agents.py).

    python scripts/handoff_demo.py [--root DIR]

The same as `agent-memory demo --agents`. No model calls, no network; exits 1 when a step does not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agent_memory.interfaces.demo_agents import run_agents_demo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, help="the project folder to use (default: a temporary one)")
    args = parser.parse_args()
    return asyncio.run(run_agents_demo(args.root))


if __name__ == "__main__":
    sys.exit(main())
