"""The `agent-memory` command line. A command goes through the daemon that owns the data directory when one runs,
and opens the store directly when none does (interfaces/routing.py); `serve` is that daemon (docs/daemon.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

from agent_memory.config import Config, load_config
from agent_memory.errors import AgentMemoryError
from agent_memory.interfaces.routing import open_store
from agent_memory.manager import MemoryManager
from agent_memory.models import JobRun, RetrievalResult


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=Path,
        default=argparse.SUPPRESS,
        help="data directory (default: config data_dir, ~/.agent_memory)",
    )
    common.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="a TOML config file (see config/default.toml)"
    )
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress and warnings"
    )
    parser = argparse.ArgumentParser(
        prog="agent-memory", description="A local-first memory for AI agents.", parents=[common]
    )
    subparsers = parser.add_subparsers(dest="command", required=True)

    class Commands:  # every subcommand takes --data-dir, --config and -v too, before or after its name
        @staticmethod
        def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
            return subparsers.add_parser(name, parents=[common], **kwargs)

    commands = Commands()

    ingest = commands.add_parser("ingest", help="ingest turns from a file")
    ingest.add_argument("file", type=Path)
    ingest.add_argument("--format", choices=["jsonl", "locomo", "longmemeval"], default="jsonl")
    ingest.add_argument("--namespace", help="put every turn in this namespace")
    ingest.add_argument("--batch", type=int, default=64, help="turns per transaction (default 64)")
    ingest.add_argument("--limit", type=int, help="ingest at most this many turns")

    search = commands.add_parser("search", help="retrieve memories for a query")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=5)
    search.add_argument("--namespace", default="default")
    search.add_argument("--json", action="store_true", help="print JSON")

    stats = commands.add_parser("stats", help="counts from every store")
    stats.add_argument("--json", action="store_true")

    doctor = commands.add_parser("doctor", help="check that the stores agree; --repair rebuilds projections")
    doctor.add_argument("--repair", action="store_true")

    context = commands.add_parser("context", help="the token-budgeted memory block for a query, explained")
    context.add_argument("query")
    context.add_argument("--budget", type=int, default=2048, help="token budget (default 2048)")
    context.add_argument("--namespace", default="default")
    context.add_argument("--explain", action="store_true", help="also list what was included and left out, and why")

    bench = commands.add_parser("bench", help="score retrieval on LoCoMo or LongMemEval (evidence recall)")
    bench.add_argument("dataset", choices=["locomo", "longmemeval"])
    bench.add_argument("--data", type=Path, required=True, help="the benchmark file (kept wherever you keep it)")
    bench.add_argument("--budget", type=_budgets, default=[2048], help="token budgets, comma-separated: 512,2048")
    bench.add_argument("--out", type=Path, help="write the report as JSON here")
    bench.add_argument("--dump", type=Path, help="write one JSON line per question and budget here")
    bench.add_argument("--ablate", action="store_true", help="also score each layer alone and each signal added")
    bench.add_argument("--sleep", action="store_true", help="then run a full sleep cycle and score again (lifecycle)")
    bench.add_argument("--limit", type=int, help="ask only the first N questions (and ingest only their data)")

    for job, what in (
        ("decay", "score how strongly each memory is still held"),
        ("tier", "move memories between tiers"),
        ("assess", "label decisions whose outcome window has passed"),
        ("reweight", "weigh keywords that connected memories share"),
        ("dream", "explore the graph for links nothing has made yet"),
        ("index", "build the vector index where enough points are unindexed"),
        ("compact", "consolidate overlapping memories, each merge checked by generative replay"),
        ("digest", "gather each speaker's statements about themselves into dated digests by topic"),
    ):
        run = commands.add_parser(job, help=f"sleep job, once: {what}")
        run.add_argument("--now", type=_aware_time, help="run as of this ISO-8601 time (default: now)")
        run.add_argument("--json", action="store_true")
        if job in ("digest", "compact"):
            run.add_argument(
                "--until-done", action="store_true", help="run again while a run stops at its time budget (deferred)"
            )
    export = commands.add_parser("export", help="export labelled decisions as JSONL (docs/policy-export.md)")
    export.add_argument("what", choices=["policy"])
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--all", action="store_true", help="include decisions not labelled yet")
    jobs = commands.add_parser("jobs", help="the latest sleep job runs and their reports")
    jobs.add_argument("--job", help="only this job")
    jobs.add_argument("--limit", type=int, default=20)
    jobs.add_argument("--json", action="store_true")

    serve = commands.add_parser("serve", help="the daemon: HTTP API and scheduled sleep jobs (docs/daemon.md)")
    serve.add_argument("--host", help="address to listen on (default: serve.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: serve.port, 8765; 0 picks a free one)")

    demo = commands.add_parser("demo", help="ingest a sample conversation, answer questions, reopen")
    demo.add_argument("--data", type=Path, help="a JSONL conversation (default: data/sample_conversation.jsonl)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("data_dir", "config", "verbose"):  # given before or after the subcommand, or not at all
        setattr(args, name, getattr(args, name, None))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        config = _config(args)
        if args.command == "demo":
            from agent_memory.interfaces.demo import run_demo

            return asyncio.run(run_demo(args.data, data_dir=args.data_dir, config=config))
        return asyncio.run(COMMANDS[args.command](config, args))
    except AgentMemoryError as exc:
        print(f"agent-memory: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _budgets(text: str) -> list[int]:
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be integers separated by commas, got {text!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be positive, got {text!r}")
    return budgets


def _aware_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _config(args: argparse.Namespace) -> Config:
    if args.data_dir:
        return load_config(args.config, data_dir=str(args.data_dir))
    return load_config(args.config)


async def cmd_ingest(config: Config, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from agent_memory.bench.datasets import READERS

    turns = READERS[args.format](args.file)
    if args.limit:
        turns = islice(turns, args.limit)
    saved = total = 0
    async with open_store(config) as store:
        with tqdm(unit="turn", desc="ingest", disable=not sys.stderr.isatty()) as bar:
            while batch := list(islice(turns, args.batch)):
                if args.namespace:
                    batch = [_with_namespace(t, args.namespace) for t in batch]
                results = await store.process_turns(batch)
                saved += sum(r.saved for r in results)
                total += len(results)
                bar.update(len(results))
    print(f"ingested {total} turns, {saved} kept as memories, into {config.data_dir}")
    return 0


def _with_namespace(turn: Any, namespace: str) -> Any:
    from dataclasses import replace

    return replace(turn, namespace=namespace)


async def cmd_search(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        results = await store.retrieve(args.query, k=args.k, namespace=args.namespace)
    if args.json:
        print(json.dumps([result_json(r) for r in results], indent=2))
    else:
        for result in results:
            print(format_result(result))
        if not results:
            print("no memories matched")
    return 0


def result_json(result: RetrievalResult) -> dict[str, Any]:
    m = result.memory
    return {
        "rank": result.rank,
        "score": result.score,
        "memory_id": m.memory_id,
        "content": m.content,
        "session_id": m.session_id,
        "event_at": m.event_at.isoformat(),
        "type": m.memory_type.value,
        "layers": {name: {"rank": h.rank, "score": h.score} for name, h in result.layers.items()},
    }


def format_result(result: RetrievalResult) -> str:
    m = result.memory
    return f"{result.rank:>2}. [{m.event_at:%Y-%m-%d} {m.session_id}] {m.content}\n    {result.explain()}"


async def cmd_context(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        context = await store.context(args.query, budget_tokens=args.budget, namespace=args.namespace)
    print(context.text or "(no memory fits)")
    if args.explain:
        print(context.explain())
    return 0


async def cmd_bench(config: Config, args: argparse.Namespace) -> int:
    """Into a fresh temporary store unless --data-dir names one (the benchmark must not mix with your memories)."""
    import tempfile
    from contextlib import ExitStack

    from agent_memory.bench.harness import format_report, run_bench

    if not args.data.is_file():
        print(f"agent-memory: no benchmark file at {args.data}", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        if args.data_dir is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="agent-memory-bench-"))
            config = config.model_copy(update={"data_dir": Path(folder)})
        dump = stack.enter_context(args.dump.open("w", encoding="utf-8")) if args.dump else None
        async with MemoryManager.open(config) as manager:
            report = await run_bench(
                manager,
                args.dataset,
                args.data,
                budgets=args.budget,
                limit=args.limit,
                dump=dump,
                ablate=args.ablate,
                sleep=args.sleep,
                progress=lambda line: print(line, file=sys.stderr),
            )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_report(report))
    return 0


async def cmd_stats(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        stats = await store.stats()
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        for section, value in stats.items():
            print(f"{section}: {value}")
    return 0


async def cmd_doctor(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        report = await store.doctor(repair=args.repair)
    print(f"memories={report.memories} turns={report.turns} pending_outbox={report.pending_outbox}")
    for action in report.repaired:
        print(f"repaired: {action}")
    for problem in report.disagreements:
        print(f"DISAGREES {problem}")
    print("consistent" if report.consistent else "INCONSISTENT (run `agent-memory doctor --repair`)")
    return 0 if report.consistent else 1


async def cmd_job(config: Config, args: argparse.Namespace) -> int:
    options = (
        {"out": args.out.expanduser().absolute(), "labelled_only": not args.all} if args.command == "export" else {}
    )
    async with open_store(config) as store:
        run = await store.run_job(args.command, now=getattr(args, "now", None), **options)
        while getattr(args, "until_done", False) and run.status == "ok" and run.counts.get("deferred"):
            if not getattr(args, "json", False):
                print(_run_line(run))
            run = await store.run_job(args.command, now=getattr(args, "now", None), **options)
    print(json.dumps(_run_dict(run), indent=2) if getattr(args, "json", False) else _run_line(run))
    return 0 if run.status == "ok" else 1


async def cmd_jobs(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        runs = await store.job_runs(args.job, limit=args.limit)
    if args.json:
        print(json.dumps([_run_dict(r) for r in runs], indent=2))
    for run in [] if args.json else runs:
        print(_run_line(run))
    return 0


def _run_dict(run: JobRun) -> dict[str, Any]:
    finished = run.finished_at.isoformat() if run.finished_at else None
    return {**asdict(run), "started_at": run.started_at.isoformat(), "finished_at": finished}


def _run_line(run: JobRun) -> str:
    took = f"{(run.finished_at - run.started_at).total_seconds():.2f} s" if run.finished_at else "running"
    what = run.error or json.dumps(dict(run.counts), sort_keys=True)
    return f"#{run.run_id} {run.job} {run.status} at {run.started_at.isoformat()} ({took}): {what}"


async def cmd_serve(config: Config, args: argparse.Namespace) -> int:
    from agent_memory.interfaces.serve import serve

    await serve(config, host=args.host, port=args.port)
    return 0


COMMANDS = {
    "ingest": cmd_ingest,
    "search": cmd_search,
    "context": cmd_context,
    "bench": cmd_bench,
    "stats": cmd_stats,
    "doctor": cmd_doctor,
    "decay": cmd_job,
    "tier": cmd_job,
    "assess": cmd_job,
    "reweight": cmd_job,
    "dream": cmd_job,
    "index": cmd_job,
    "compact": cmd_job,
    "digest": cmd_job,
    "export": cmd_job,
    "jobs": cmd_jobs,
    "serve": cmd_serve,
}

if __name__ == "__main__":
    sys.exit(main())
