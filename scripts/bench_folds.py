#!/usr/bin/env python3
"""Retrieval settings judged by folds (issue #22): LoCoMo dev leave-one-conversation-out, LongMemEval dev.

Usage: python scripts/bench_folds.py --dataset locomo --data ../shared/data/locomo/locomo_dev.json \
    --data-dir DIR --variant 'anchors off=event_anchors:false' --variant 'evidence=keyword_evidence:true' [--out F]
DIR is a store the harness filled (agent-memory --data-dir DIR bench ..., every turn kept).

With --baseline-dir OTHER, two stores of the same data are compared instead (say, one ingested with
AGENT_MEMORY__EMBEDDING__DOCUMENT_PRECISION=float32 and one with int8): each asked with the shipped defaults,
DIR's per-question figures against OTHER's, per fold and with the same paired, clustered bootstrap. A store is
asked as a daemon leaves it after a pause: its int8 document vectors are first made again in float32 (in place,
vector_upgrade.py) unless AGENT_MEMORY__EMBEDDING__DOCUMENT_PRECISION=int8 or ..._UPGRADE_VECTORS=false is set, and
the digests an idle store makes are made (in place, sleep/digests.py) unless AGENT_MEMORY__SLEEP__DIGEST_IDLE_DELAY
is PT0S.

With --apart, DIR (every conversation or haystack a namespace of one store, as the harness fills it) is compared
with a fresh store for each conversation alone, as a user's store holds one history: what sharing a store adds to
the figures. LongMemEval dev takes about 15 minutes here (49 stores).

With --sleep-variant NAME=key:value (settings of [sleep]), each variant is a copy of DIR after the sleep jobs
--sleep-jobs names (digest by default; 'cycle' for the whole sleep cycle) ran at the time of the last question,
each copy first given the digests an idle store makes (by the variant's settings), compared with DIR as ingested
(asked without them); the shipped sleep settings are always one of them. --without-job JOB adds a variant running
those jobs but JOB (without digest: no idle digests either), and a second comparison against all of them: what each job adds to the others. On
LoCoMo the report then also says, for each conversation left out, which variant the other two pick and what it
scores on the one left out. DIR is not changed.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_memory.bench.folds import (
    AS_INGESTED,
    after_sleep,
    compare,
    figures,
    format_choice,
    format_comparison,
    loco_choice,
    parse_variants,
    stores_apart,
    stores_compared,
)
from agent_memory.sleep.jobs import SLEEP_CYCLE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["locomo", "longmemeval"], required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--variant", action="append", default=[], help="NAME=key:value,key:value")
    parser.add_argument("--baseline-dir", type=Path, help="another store of the same data: compare DIR against it")
    parser.add_argument(
        "--apart", action="store_true", help="compare DIR with a store of its own for each conversation"
    )
    parser.add_argument(
        "--sleep-variant", action="append", default=[], help="NAME=key:value,... of [sleep], judged after --sleep-jobs"
    )
    parser.add_argument(
        "--sleep-jobs",
        default=None,
        help="comma-separated sleep jobs run for --sleep-variant, in the cycle's order; 'cycle' for every one",
    )
    parser.add_argument(
        "--without-job", action="append", default=[], help="one more sleep variant: --sleep-jobs but this one"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        variants = parse_variants(args.variant)
        sleep_variants = parse_variants(args.sleep_variant, "sleep")
    except ValueError as exc:
        parser.error(str(exc))
    named = [job.strip() for job in (args.sleep_jobs or "digest").split(",") if job.strip()]
    jobs = list(SLEEP_CYCLE) if named == ["cycle"] else [job for job in SLEEP_CYCLE if job in named]
    if not jobs or (named != ["cycle"] and [job for job in named if job not in SLEEP_CYCLE]):
        parser.error(f"--sleep-jobs {args.sleep_jobs!r}: give 'cycle' or some of {', '.join(SLEEP_CYCLE)}")
    if [job for job in args.without_job if job not in jobs]:
        parser.error(
            f"--without-job {', '.join(args.without_job)}: leave out only jobs --sleep-jobs runs ({', '.join(jobs)})"
        )
    sleeping = bool(args.sleep_variant or args.without_job)
    if not sleeping and args.sleep_jobs is not None:
        parser.error("--sleep-jobs says which jobs --sleep-variant or --without-job run: give one of them too")
    if sleeping and (args.variant or args.baseline_dir is not None or args.apart):
        parser.error(
            "--sleep-variant and --without-job compare sleep settings on copies of DIR: "
            "give no --variant, --baseline-dir or --apart"
        )
    for name, folder in (("--data-dir", args.data_dir), ("--baseline-dir", args.baseline_dir)):
        if folder is not None and not (folder / "memory.db").is_file():  # opening it would make an empty store
            parser.error(f"{name} {folder}: no store there (no memory.db); fill one with agent-memory bench first")
    if args.apart:
        if args.variant or args.baseline_dir is not None:
            parser.error(
                "--apart compares DIR with a store per conversation, with the shipped defaults: give no --variant or --baseline-dir"
            )
        results = asyncio.run(stores_apart(args.data_dir, args.dataset, args.data, budget=args.budget))
        report = compare(results, "one store")
    elif sleeping:
        results = asyncio.run(
            after_sleep(
                args.data_dir,
                args.dataset,
                args.data,
                sleep_variants,
                jobs=jobs,
                without=args.without_job,
                budget=args.budget,
            )
        )
        report = compare(results, AS_INGESTED)
        if args.without_job:  # each job's own share: the shipped jobs against the same jobs but one
            report["against every job"] = compare(
                {k: v for k, v in results.items() if k != AS_INGESTED}, "shipped defaults"
            )
        if len(results[AS_INGESTED]["recall"]) > 1:
            report["leave one conversation out"] = loco_choice(results, AS_INGESTED)
    elif args.baseline_dir is not None:
        if args.variant:
            parser.error("--baseline-dir compares two stores with the shipped defaults: give no --variant")
        results = asyncio.run(
            stores_compared(args.data_dir, args.baseline_dir, args.dataset, args.data, budget=args.budget)
        )
        report = compare(results, "baseline store")
    else:
        results = asyncio.run(figures(args.data_dir, args.dataset, args.data, variants, budget=args.budget))
        report = compare(results, "shipped defaults")
    choices = report.pop("leave one conversation out", None)
    every_job = report.pop("against every job", None)
    print(format_comparison(report, args.dataset))
    if every_job is not None:
        print(format_comparison(every_job, f"{args.dataset}, against every job run ('shipped defaults')"))
        report["against every job"] = every_job
    if choices is not None:
        print(format_choice(choices))
        report["leave one conversation out"] = choices
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
