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
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_memory.config import Config, load_config
from agent_memory.errors import AgentMemoryError, InvalidInput
from agent_memory.interfaces.cli_facts import cmd_fact_history, cmd_facts, cmd_remember
from agent_memory.interfaces.cli_import import cmd_import_markdown
from agent_memory.interfaces.cli_ingest import cmd_ingest
from agent_memory.interfaces.cli_mcp import cmd_mcp
from agent_memory.interfaces.cli_model import cmd_fetch_model
from agent_memory.interfaces.cli_parser import build_parser
from agent_memory.interfaces.cli_proxy import cmd_chat, cmd_proxy
from agent_memory.interfaces.cli_reembed import cmd_reembed
from agent_memory.interfaces.cli_setup import cmd_hooks, cmd_setup
from agent_memory.interfaces.routing import open_store
from agent_memory.models import JobRun, Memory, RetrievalResult
from agent_memory.storage.private import PRIVATE_UMASK


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
    if args.command == "hook":  # before the config is read: a hook fails quietly, whatever fails
        from agent_memory.interfaces.cli_hooks import run_hook

        return run_hook(args)
    config = _config(args)
    if args.command == "demo" and args.agents:
        from agent_memory.interfaces.demo_agents import run_agents_demo

        return asyncio.run(run_agents_demo(args.data_dir))
    if args.command == "demo":
        from agent_memory.interfaces.demo import run_demo

        return asyncio.run(run_demo(args.data, data_dir=args.data_dir, config=config))
    return asyncio.run(COMMANDS[args.command](config, args))


def _config(args: argparse.Namespace) -> Config:
    if args.data_dir is not None:
        return load_config(args.config, data_dir=str(args.data_dir))
    return load_config(args.config)


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
    from agent_memory.manager import MemoryManager

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
    if args.command == "compress":
        options = {"cap": args.cap, "namespace": args.policy_namespace, "dry_run": args.dry_run}
    async with open_store(config) as store:
        if args.command == "export" and isinstance(store, DaemonClient):  # the daemon streams it; written here
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


async def cmd_get(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        memory = await store.get(args.memory_id, original=args.original)
        earlier = await store.history(args.memory_id)
    print(
        json.dumps(_memory_dict(memory, len(earlier)), indent=2) if args.json else _memory_lines(memory, len(earlier))
    )
    return 0


async def cmd_history(config: Config, args: argparse.Namespace) -> int:
    if args.attribute is not None:
        return await cmd_fact_history(config, args)
    async with open_store(config) as store:
        memory = await store.get(args.memory_id)
        earlier = await store.history(args.memory_id)
    if args.json:
        print(json.dumps([_jsonable(asdict(r)) for r in earlier], indent=2))
        return 0
    for r in earlier:
        who = f" by {r.agent}" if r.agent else ""
        why = f" ({r.reason})" if r.reason else ""
        print(
            f"revision {r.revision} [{r.status.value}] {r.began_at:%Y-%m-%d %H:%M} - {r.ended_at:%Y-%m-%d %H:%M}, "
            f"ended by {r.change}{who}{why}: {r.content or '(its turn as logged: get --original)'}"
        )
    print(f"revision {memory.revision} [{memory.status.value}] now: {memory.content}")
    return 0


async def cmd_change(config: Config, args: argparse.Namespace) -> int:
    """update and supersede: both name the revision read, and print the memory the change leaves current."""
    async with open_store(config) as store:
        change = store.update if args.command == "update" else store.supersede
        memory = await change(
            args.memory_id, args.text, expected_revision=args.expected_revision, agent=args.agent, reason=args.reason
        )
        earlier = await store.history(memory.memory_id)
    print(
        json.dumps(_memory_dict(memory, len(earlier)), indent=2) if args.json else _memory_lines(memory, len(earlier))
    )
    return 0


async def cmd_forget(config: Config, args: argparse.Namespace) -> int:
    """forget and restore: print the memory as the change leaves it."""
    if args.command == "forget" and args.memory_id is None:
        return await _forget_by_policy(config, args)
    if args.command == "forget" and args.expected_revision is None:
        raise InvalidInput("forget MEMORY_ID needs --expected-revision (the revision you read with get)")
    async with open_store(config) as store:
        if args.command == "forget":
            memory = await store.forget(
                args.memory_id, expected_revision=args.expected_revision, agent=args.agent, reason=args.reason
            )
        else:
            memory = await store.restore(args.memory_id, agent=args.agent, reason=args.reason)
        earlier = await store.history(memory.memory_id)
    print(
        json.dumps(_memory_dict(memory, len(earlier)), indent=2) if args.json else _memory_lines(memory, len(earlier))
    )
    return 0


async def cmd_erase(config: Config, args: argparse.Namespace) -> int:
    """erase: what went and the proof (exit 1 if the scan found any hit), or with --dry-run what would go."""
    if not (args.memory_ids or args.turn_ids or args.session_id is not None or args.whole_namespace):
        raise InvalidInput("erase needs --memory, --turn, --session or --whole-namespace: nothing was named")
    selection: dict[str, Any] = {
        "memory_ids": args.memory_ids, "turn_ids": args.turn_ids, "session_id": args.session_id,
        "namespace": args.namespace, "whole_namespace": args.whole_namespace,
    }  # fmt: skip
    async with open_store(config) as store:
        answer = await store.erase(reason=args.reason, dry_run=args.dry_run, **selection)
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(_erase_lines(answer))
    return 1 if answer.get("proof", {}).get("hits", 0) else 0


def _erase_lines(answer: dict[str, Any]) -> str:
    took = (
        f"{len(answer['memory_ids'])} memories, {len(answer['turn_ids'])} turns, {answer['log_records']} log records, "
        f"{answer['images']} images, {answer['text_bytes']} bytes of text; "
        f"{len(answer['digests_rewritten'])} digests rewritten, {len(answer['sources_restored'])} sources restored"
    )
    if answer.get("dry_run"):
        return "would erase " + took + "".join(f"\n  memory {i}" for i in answer["memory_ids"])
    proof = answer["proof"]
    lines = [
        f"erased {took} (erase {answer['erase_id']}, {answer['seconds']} s)",
        f"proof: files={proof['files']} bytes={proof['bytes']} needles={proof['needles']} hits={proof['hits']}",
    ]
    return "\n".join(lines + [f"  hit at {place}" for place in proof["locations"]])


async def _forget_by_policy(config: Config, args: argparse.Namespace) -> int:
    """`forget --role/--before/--phatic`: the sleep job `forget` once, with these policies."""
    if not (args.roles or args.before or args.phatic):
        raise InvalidInput("forget needs a MEMORY_ID, or a policy: --role, --before or --phatic")
    options = {"roles": args.roles or [], "before": args.before, "phatic": bool(args.phatic)}
    options |= {"namespace": args.policy_namespace, "dry_run": args.dry_run}
    async with open_store(config) as store:
        run = await store.run_job("forget", **options)
    print(json.dumps(_run_dict(run), indent=2) if args.json else _run_line(run))
    return 0 if run.status == "ok" else 1


def _memory_dict(memory: Memory, history: int) -> dict[str, Any]:
    return {**_jsonable(asdict(memory)), "history_length": history}


def _memory_lines(memory: Memory, history: int) -> str:
    replaced = f", superseded by {memory.superseded_by}" if memory.superseded_by else ""
    return (
        f"{memory.memory_id} revision {memory.revision} [{memory.status.value}{replaced}], "
        f"{history} earlier revision(s)\n{memory.content}"
        + (f"\noriginal (the log):\n{memory.original}" if memory.original is not None else "")
    )


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(
        json.dumps(data, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))
    )
    return shown


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
    "reembed": cmd_reembed,
    "fetch-model": cmd_fetch_model,
    "decay": cmd_job,
    "tier": cmd_job,
    "assess": cmd_job,
    "reweight": cmd_job,
    "dream": cmd_job,
    "index": cmd_job,
    "neighbours": cmd_job,
    "upgrade": cmd_job,
    "entities": cmd_job,
    "compact": cmd_job,
    "digest": cmd_job,
    "compress": cmd_job,
    "export": cmd_job,
    "jobs": cmd_jobs,
    "get": cmd_get,
    "history": cmd_history,
    "update": cmd_change,
    "supersede": cmd_change,
    "forget": cmd_forget,
    "remember": cmd_remember,
    "facts": cmd_facts,
    "restore": cmd_forget,
    "erase": cmd_erase,
    "serve": cmd_serve,
    "setup": cmd_setup,
    "hooks": cmd_hooks,
    "import-markdown": cmd_import_markdown,
    "mcp": cmd_mcp,
    "proxy": cmd_proxy,
    "chat": cmd_chat,
}

if __name__ == "__main__":
    sys.exit(main())
