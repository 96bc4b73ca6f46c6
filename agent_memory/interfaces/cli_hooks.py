"""`agent-memory hook session-start|stop`: the Claude Code hooks that `agent-memory hooks install` writes.

A hook is never in the way of a prompt. Everything, reading stdin included, is capped at HOOK_CAP (2 s) from the
start of the command; any failure (no daemon, a dead one, a malformed input or transcript, a bad config) prints
nothing and exits 0. `session-start` prints Claude Code's SessionStart answer, whose `additionalContext` is the
boot context of the project (`memory_boot`); when no daemon owns the data directory it starts one, detached,
and does not wait for it (the next hook or MCP call finds it), answering with no context. `stop` reads the end
of the session transcript and writes one short worklog note ("User asked: ... / Agent did: ...") when a daemon
is live; it starts none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HOOK_CAP = 2.0
"""Seconds from the start of the command after which a hook gives up, whatever it was doing."""
STDIN_WAIT = 0.5
"""Claude Code writes the hook's input at once; a stdin that says nothing for this long is taken as empty."""
MAX_STDIN = 1024 * 1024
BOOT_TOKENS = 600


def run_hook(args: argparse.Namespace) -> int:
    """Run one hook; always 0. What it prints (if anything) is one JSON answer on stdout."""
    started = time.monotonic()
    try:
        payload = hook_payload(read_stdin(started + STDIN_WAIT))
        answer = asyncio.run(_capped(args, payload, started + HOOK_CAP))
    except (Exception, asyncio.CancelledError):  # never in the way: quiet, and fast
        log.info("hook %s gave up", args.event, exc_info=True)
        return 0
    if answer is not None:
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    return 0


def read_stdin(deadline: float) -> bytes:
    """What stdin holds, read until EOF, MAX_STDIN bytes or `deadline`, whichever comes first (select on fd 0:
    a blocked read in a thread would hold the interpreter at exit)."""
    if sys.stdin is None or sys.stdin.closed or sys.stdin.isatty():
        return b""
    fd, chunks, size = sys.stdin.fileno(), list[bytes](), 0
    while size < MAX_STDIN and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def hook_payload(raw: bytes) -> dict[str, Any]:
    """The hook's input object; {} for nothing, or for anything that is not a JSON object."""
    try:
        data = json.loads(raw.decode("utf-8", errors="replace")) if raw.strip() else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


async def _capped(args: argparse.Namespace, payload: dict[str, Any], deadline: float) -> str | None:
    return await asyncio.wait_for(_hook(args, payload), timeout=max(0.05, deadline - time.monotonic()))


async def _hook(args: argparse.Namespace, payload: dict[str, Any]) -> str | None:
    from agent_memory.interfaces.client import find_daemon

    data_dir, namespace, task = _where(args, payload)
    note = _worklog(payload) if args.event == "stop" else None
    if args.event == "stop" and note is None:
        return None
    client = await find_daemon(data_dir)
    if client is None:
        if args.event == "session-start" and not args.no_start:
            from agent_memory.interfaces.autostart import spawn_daemon

            spawn_daemon(data_dir, config_path=args.config)
        return None
    async with client:
        if note is not None:
            source = {"path": str(payload["transcript_path"])}
            await client.notes.write(note, kind="worklog", namespace=namespace, agent="claude-code", source=source)
            return None
        boot = await client.notes.boot(task, budget_tokens=BOOT_TOKENS, namespace=namespace)
    if not boot.text.strip():
        return None
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": boot.text}})


def _where(args: argparse.Namespace, payload: dict[str, Any]) -> tuple[Path, str, str]:
    """The data directory, the namespace the MCP server uses there (cli_mcp.default_namespace) and the project's
    name (the boot task) for the session's folder."""
    from agent_memory.interfaces.cli_mcp import default_namespace
    from agent_memory.project import DATA_DIR_NAME, project_root

    cwd = Path(str(payload.get("cwd") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()))
    if args.data_dir is not None:
        data_dir = Path(args.data_dir).expanduser()
    else:
        from agent_memory.config import load_config

        data_dir = load_config(args.config).data_dir
    root = data_dir.parent if data_dir.name == DATA_DIR_NAME else project_root(cwd)
    return data_dir, default_namespace(data_dir, cwd), root.name if root is not None else ""


def _worklog(payload: dict[str, Any]) -> str | None:
    from agent_memory.interfaces.transcript import last_exchange, tail_lines, worklog_text

    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        return None
    exchange = last_exchange(tail_lines(Path(path).expanduser()))
    return worklog_text(*exchange) if exchange else None
