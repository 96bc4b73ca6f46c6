#!/usr/bin/env python3
"""The short-term window (issue #21): cost per turn at some 200 messages, and 2,000 turns through 4,000 tokens.

Usage: nice -n 10 python scripts/bench_window.py [--turns 3000] [--limit 12000] [--long-turns 2000]
"""

import argparse
import asyncio
import os
import platform
import sys

from agent_memory.bench.window_bench import long_chat, measure_cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000, help="timed turns, after the window first fills")
    parser.add_argument("--limit", type=int, default=12000, help="window size for the cost run (tokens)")
    parser.add_argument("--long-turns", type=int, default=2000)
    args = parser.parse_args()
    cost = asyncio.run(measure_cost(turns=args.turns, limit=args.limit))
    print(f"python {platform.python_version()}, {platform.machine()}; cl100k_base counter, extractive summary")
    print(
        f"cost per turn ({cost.turns} turns, {cost.limit:,}-token window holding {cost.messages_min}-"
        f"{cost.messages_max} messages, median {cost.messages_median}; summaries on {cost.summarising_share:.1%} "
        f"of turns): p50 {cost.turn_p50_ms:.3f} ms, p95 {cost.turn_p95_ms:.3f} ms, p99 {cost.turn_p99_ms:.3f} ms, "
        f"max {cost.turn_max_ms:.3f} ms"
    )
    print(
        f"  cpu time per turn: p50 {cost.cpu_p50_ms:.3f} ms, p95 {cost.cpu_p95_ms:.3f} ms, "
        f"p99 {cost.cpu_p99_ms:.3f} ms (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)"
    )
    print(f"  one force_fit (wall): p50 {cost.fit_p50_ms:.3f} ms, p95 {cost.fit_p95_ms:.3f} ms")
    print(
        f"  turns that summarise: cpu p50 {cost.summary_turn_cpu_p50_ms:.3f} ms, "
        f"max {cost.summary_turn_cpu_max_ms:.3f} ms"
    )
    report = asyncio.run(long_chat(turns=args.long_turns, limit=4000))
    print(
        f"long chat: {report.turns} turns through {report.limit:,} tokens: {report.overflows} overflows, "
        f"pinned broken on {report.pinned_broken} turns, at most {report.max_tokens:,} tokens; "
        f"{report.summaries} summaries, {report.filtered} filtered, {report.dropped} dropped, {report.cut} cut"
    )
    return 0 if report.overflows == 0 and report.pinned_broken == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
