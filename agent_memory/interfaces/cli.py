"""The `agent-memory` command line. A command goes through the daemon that owns the data directory when one runs,
and opens the store directly when none does (interfaces/routing.py); `serve` is that daemon (docs/daemon.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any, NoReturn

from agent_memory.config import Config, load_config
from agent_memory.errors import AgentMemoryError, InvalidInput
from agent_memory.interfaces.routing import open_store
from agent_memory.manager import MemoryManager
from agent_memory.models import JobRun, RetrievalResult, TurnInput, utc_now
from agent_memory.storage.private import PRIVATE_UMASK
from agent_memory.validation import check_turn


class Parser(argparse.ArgumentParser):
    """argparse, except that a bad argument is an InvalidInput, which `main` prints as one line (not the usage)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidInput(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=_data_dir,
        default=argparse.SUPPRESS,
        help="data directory (default: config data_dir, ~/.agent_memory)",
    )
    common.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="a TOML config file (see config/default.toml)"
    )
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress and warnings"
    )
    parser = Parser(prog="agent-memory", description="A local-first memory for AI agents.", parents=[common])
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
    ingest.add_argument("--batch", type=_positive, default=64, help="turns per transaction (default 64)")
    ingest.add_argument("--limit", type=_positive, help="ingest at most this many turns")
    ingest.add_argument("--skip", type=_non_negative, default=0, help="skip the first N turns (to resume an ingest)")

    search = commands.add_parser("search", help="retrieve memories for a query")
    search.add_argument("query")
    search.add_argument("-k", type=_positive, default=5)
    search.add_argument("--namespace", default="default")
    search.add_argument("--json", action="store_true", help="print JSON")

    stats = commands.add_parser("stats", help="counts from every store")
    stats.add_argument("--json", action="store_true")

    doctor = commands.add_parser("doctor", help="check that the stores agree; --repair rebuilds projections")
    doctor.add_argument("--repair", action="store_true")

    context = commands.add_parser("context", help="the token-budgeted memory block for a query, explained")
    context.add_argument("query")
    context.add_argument("--budget", type=_positive, default=2048, help="token budget (default 2048)")
    context.add_argument("--namespace", default="default")
    context.add_argument("--explain", action="store_true", help="also list what was included and left out, and why")

    bench = commands.add_parser("bench", help="score retrieval on LoCoMo or LongMemEval (evidence recall)")
    bench.add_argument("dataset", choices=["locomo", "longmemeval"])
    bench.add_argument("--data", type=Path, required=True, help="the benchmark file (kept wherever you keep it)")
    bench.add_argument("--budget", type=_budgets, default=[2048], help="token budgets, comma-separated: 512,2048")
    bench.add_argument("--out", type=_output_file, help="write the report as JSON here")
    bench.add_argument("--dump", type=_output_file, help="write one JSON line per question and budget here")
    bench.add_argument("--ablate", action="store_true", help="also score each layer alone and each signal added")
    bench.add_argument("--sleep", action="store_true", help="then run a full sleep cycle and score again (lifecycle)")
    bench.add_argument("--limit", type=_positive, help="ask only the first N questions (and ingest only their data)")

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
    export.add_argument("--out", type=_output_file, required=True)
    export.add_argument("--all", action="store_true", help="include decisions not labelled yet")
    jobs = commands.add_parser("jobs", help="the latest sleep job runs and their reports")
    jobs.add_argument("--job", help="only this job")
    jobs.add_argument("--limit", type=_positive, default=20)
    jobs.add_argument("--json", action="store_true")

    serve = commands.add_parser("serve", help="the daemon: HTTP API and scheduled sleep jobs (docs/daemon.md)")
    serve.add_argument("--host", help="address to listen on (default: serve.host, 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port to listen on (default: serve.port, 8765; 0 picks a free one)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback: the API is then exposed with only the token and no TLS",
    )

    demo = commands.add_parser("demo", help="ingest a sample conversation, answer questions, reopen")
    demo.add_argument("--data", type=Path, help="a JSONL conversation (default: data/sample_conversation.jsonl)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; an error is one line on stderr (`agent-memory: ...`), exit 2 (1 for an unexpected one)."""
    umask = os.umask(PRIVATE_UMASK)  # whatever this process creates is its owner's only (storage/private.py)
    verbose = False
    try:
        args = build_parser().parse_args(argv)
        verbose = bool(getattr(args, "verbose", False))
        return _run(args)
    except AgentMemoryError as exc:
        print(f"agent-memory: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a last resort: each failure we know of has its own typed error and message
        hint = "" if verbose else " (run again with -v for the traceback)"
        print(f"agent-memory: unexpected {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
        if verbose:
            traceback.print_exc()
        return 1
    finally:
        os.umask(umask)


def _run(args: argparse.Namespace) -> int:
    for name in ("data_dir", "config", "verbose"):  # given before or after the subcommand, or not at all
        setattr(args, name, getattr(args, name, None))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    config = _config(args)
    if args.command == "demo":
        from agent_memory.interfaces.demo import run_demo

        return asyncio.run(run_demo(args.data, data_dir=args.data_dir, config=config))
    return asyncio.run(COMMANDS[args.command](config, args))


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def _port(text: str) -> int:
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _data_dir(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty: that would put the store in the current directory")
    return Path(text)


def _output_file(text: str) -> Path:
    """A file this command can create: not a directory, and below a directory (or a path that can become one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {path}: it is a directory, not a file")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"cannot write {path}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise argparse.ArgumentTypeError(f"cannot write {path}: the directory {parent} is not writable")
            break
    return path


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
    if args.data_dir is not None:
        return load_config(args.config, data_dir=str(args.data_dir))
    return load_config(args.config)


async def cmd_ingest(config: Config, args: argparse.Namespace) -> int:
    """The file is read and checked whole first, so a bad turn anywhere means nothing is written. A batch refused
    while writing (a turn the store has already, a storage error) names the turns committed before it and how to
    resume (`--skip`)."""
    from tqdm import tqdm

    count = await asyncio.to_thread(_check_input, config, args)
    turns = _input_turns(args)
    saved = total = 0
    async with open_store(config) as store:
        with tqdm(total=count, unit="turn", desc="ingest", disable=not sys.stderr.isatty()) as bar:
            while batch := list(islice(turns, args.batch)):
                try:
                    results = await store.process_turns(batch)
                except AgentMemoryError as exc:
                    exc.args = (_stopped_at(exc, args, total, len(batch)),)
                    raise
                saved += sum(r.saved for r in results)
                total += len(results)
                bar.update(len(results))
    print(f"ingested {total} turns, {saved} kept as memories, into {config.data_dir}")
    return 0


def _input_turns(args: argparse.Namespace) -> Iterator[TurnInput]:
    from agent_memory.bench.datasets import READERS

    stop = args.skip + args.limit if args.limit else None
    turns = islice(READERS[args.format](args.file), args.skip, stop)
    return (_with_namespace(t, args.namespace) for t in turns) if args.namespace else turns


def _check_input(config: Config, args: argparse.Namespace) -> int:
    """How many turns the file gives; InvalidInput for the first that is unreadable, invalid or given twice."""
    now = utc_now()
    first_at: dict[tuple[str, str, int], int] = {}
    try:
        for number, turn in enumerate(_input_turns(args), args.skip + 1):
            key = (turn.namespace, turn.session_id, turn.turn_number)
            try:
                check_turn(turn, max_bytes=config.max_content_bytes, now=now)
                if key in first_at:
                    raise InvalidInput(
                        f"turn_number {key[2]} of session {key[1]!r} in namespace {key[0]!r} is already turn "
                        f"{first_at[key]} of the file"
                    )
            except InvalidInput as exc:
                exc.args = (f"turn {number} of {args.file.name}: {exc}",)
                raise
            first_at[key] = number
    except InvalidInput as exc:
        if first_at:  # a turn after good ones: say that those were not written either
            exc.args = (f"{exc}; nothing was ingested (the whole file is checked before a turn is written)",)
        raise
    return len(first_at)


def _stopped_at(exc: AgentMemoryError, args: argparse.Namespace, committed: int, size: int) -> str:
    """What a refused batch says when earlier batches were committed: which turns it held, and how to go on."""
    if not committed:
        return str(exc)  # nothing of this run was written
    first = args.skip + committed + 1
    held = f"turn {first}" if size == 1 else f"turns {first}-{first + size - 1}"
    done = f"turns {args.skip + 1}-{first - 1} were committed before them"
    return f"{held} of {args.file.name}: {exc}; {done}: fix the file, then resume with --skip {first - 1}"


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
    from agent_memory.interfaces.client import DaemonClient

    options = (
        {"out": args.out.expanduser().absolute(), "labelled_only": not args.all} if args.command == "export" else {}
    )
    async with open_store(config) as store:
        if options and isinstance(store, DaemonClient):  # the daemon streams the export; it is written here
            started = datetime.now(UTC)
            counts = await store.export_policy(options["out"], labelled_only=options["labelled_only"])
            took = (datetime.now(UTC) - started).total_seconds()
            print(f"export ok through {store.url} ({took:.2f} s): {json.dumps(counts, sort_keys=True)}")
            return 0
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

    if args.allow_remote:
        config = config.model_copy(update={"serve": config.serve.model_copy(update={"allow_remote": True})})
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
