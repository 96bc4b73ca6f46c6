"""MCP round trips over stdio through the daemon, cold start, boot size: see agent_memory/bench/mcp_bench.py."""

from __future__ import annotations

import sys

from agent_memory.bench.mcp_bench import main

if __name__ == "__main__":
    sys.exit(main())
