"""One owner, many agents: find the daemon that owns a data directory, and start one when none does.

A face that talks to the store (the MCP server, the hooks, the CLI through a daemon) never opens the engines; it
calls `daemon_client`, which returns a client of the live daemon (daemon.json, checked against the owner lock:
discovery.py) or starts `agent-memory serve` for that directory, detached, on a free loopback port, with its log
in `data_dir/daemon.log`, and waits for its health check. Two faces starting at once do not start two daemons: a
spawn lock in the data directory lets one of them start it while the other waits for the same daemon. If a daemon
dies, the next call finds no live one and starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from agent_memory.errors import DaemonUnreachable
from agent_memory.interfaces.client import DaemonClient, find_daemon
from agent_memory.interfaces.discovery import live_daemon
from agent_memory.storage.lock import owner_of
from agent_memory.storage.private import make_private_dir

LOG_FILE = "daemon.log"
SPAWN_LOCK = "spawn.lock"
START_TIMEOUT = 60.0
"""Opening the stores and loading the text model takes 2-5 s here; a cold disk or a busy machine takes longer."""
POLL = 0.05
_children: list[subprocess.Popen[bytes]] = []
"""Daemons this process started, reaped once they exit (a dead one must not linger as a zombie)."""


async def daemon_client(
    data_dir: Path, *, start: bool = True, wait: float = START_TIMEOUT, config_path: Path | None = None
) -> DaemonClient:
    """A client of the daemon that owns `data_dir`; with `start`, one is started and waited for when none runs.
    DaemonUnreachable when none runs (and `start` is off), or one started but did not answer within `wait` seconds."""
    data_dir = _absolute(data_dir)
    _children[:] = [child for child in _children if child.poll() is None]
    client = await find_daemon(data_dir)
    if client is not None:
        return client
    if not start:
        raise DaemonUnreachable(str(data_dir), "no daemon serves this data directory")
    deadline = time.monotonic() + wait
    process: subprocess.Popen[bytes] | None = None
    with _spawn_lock(data_dir) as mine:
        if mine and live_daemon(data_dir) is None:
            process = spawn_daemon(data_dir, config_path=config_path)
        while time.monotonic() < deadline:
            with contextlib.suppress(DaemonUnreachable):
                client = await find_daemon(data_dir)
                if client is not None:
                    return client
            if process is not None and process.poll() is not None:
                raise DaemonUnreachable(
                    str(data_dir), f"the daemon started for it exited with {process.returncode}: {_log_tail(data_dir)}"
                )
            await asyncio.sleep(POLL)
    raise DaemonUnreachable(str(data_dir), f"no daemon answered within {wait:.0f} s: {_log_tail(data_dir)}")


def stop_daemon(data_dir: Path, *, wait: float = 60.0) -> bool:
    """SIGTERM the daemon that owns `data_dir` and wait until it has let go of the directory (a daemon this process
    started is reaped too). Whether one was running."""
    info = live_daemon(_absolute(data_dir))
    if info is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    # the daemon removes daemon.json first and lets go of the owner lock last, once its engines have closed
    while owner_of(_absolute(data_dir)) == info.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in [c for c in _children if c.pid == info.pid]:
        child.wait(timeout=max(0.0, deadline - time.monotonic()))
        _children.remove(child)
    return True


def spawn_daemon(data_dir: Path, *, config_path: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `agent-memory serve` for `data_dir`, detached (its own session: it outlives this process and ignores
    this terminal's signals), on a free loopback port; return at once. Its output goes to data_dir/daemon.log."""
    data_dir = data_dir.expanduser().absolute()
    make_private_dir(data_dir)
    command = [sys.executable, "-c", "from agent_memory.interfaces.cli import main; raise SystemExit(main())"]
    command += ["serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0"]
    if config_path is not None:
        command += ["--config", str(config_path)]
    fd = os.open(data_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            cwd=str(data_dir),
        )
    finally:
        os.close(fd)
    _children.append(process)
    return process


@contextlib.contextmanager
def _spawn_lock(data_dir: Path) -> Iterator[bool]:
    """Whether this process may start the daemon: it holds data_dir/spawn.lock (taken without waiting; the
    holder's peers wait for the daemon it starts). Released when the daemon answers or the wait ends."""
    make_private_dir(data_dir)
    fd = os.open(data_dir / SPAWN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _absolute(data_dir: Path) -> Path:
    return data_dir.expanduser().absolute()


def _log_tail(data_dir: Path, lines: int = 5) -> str:
    try:
        text = (data_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "no daemon.log"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(tail) if tail else "daemon.log is empty"
