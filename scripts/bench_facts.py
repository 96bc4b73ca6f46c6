#!/usr/bin/env python3
"""A fact extractor's precision and recall on a labelled sample (issue #20): the offline rules, or the configured LLM.

Usage: python scripts/bench_facts.py [--data data/fact_sample.jsonl] [--extractor heuristic|llm] [--config FILE]
(for llm: llm.model from --config or AGENT_MEMORY__LLM__MODEL, with llm.api_base / llm.api_key as the model needs)
"""

import sys

from agent_memory.bench.fact_precision import main

if __name__ == "__main__":
    sys.exit(main())
