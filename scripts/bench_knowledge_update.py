#!/usr/bin/env python3
"""LongMemEval knowledge-update questions: the share whose newest value reaches the context, and the share where
only a stale value does (issue #20), for the shipped store, the keep-all store, the facts block and plain BM25.

Usage: nice -n 10 python scripts/bench_knowledge_update.py --data ../shared/data/longmemeval/longmemeval_s_dev.json.gz
       [--budget 512,2048] [--stores shipped,keep-all] [--keep DIR] [--out report.json]
"""

import sys

from agent_memory.bench.knowledge_update_report import main

if __name__ == "__main__":
    sys.exit(main())
