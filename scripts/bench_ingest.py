#!/usr/bin/env python3
"""process_turn p50/p95 and bulk ingest turns/s; writes docs/benchmarks.md.

Usage: python scripts/bench_ingest.py --data ../shared/data/locomo/locomo_dev.json [--with-test-llm]

--with-test-llm starts the tests' OpenAI-compatible server on 127.0.0.1 (tests/llm_server.py, answering valid
verdicts at once) and points the save decision at it, so the figures show what the LLM path costs in
agent-memory itself (litellm, the prompt, validation), not a model's own latency.
"""

import sys
from pathlib import Path

from agent_memory.bench.perf import main

if __name__ == "__main__":
    if "--with-test-llm" not in sys.argv:
        sys.exit(main())
    sys.argv.remove("--with-test-llm")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from llm_server import good, start_server

    server = start_server(good)
    try:
        sys.exit(main(llm=server.llm_config()))
    finally:
        server.stop()
