"""`data_dir/daemon.json`: how another process finds the daemon that owns a data directory.

The daemon writes it once its socket is bound (`{"url", "pid", "started_at"}`, mode 0600, written to a temporary
file and renamed into place, so a reader never sees half of it) and removes it when it stops serving. A file left
behind by a daemon that died (kill -9, a crash) is stale: its pid is gone, or that pid no longer holds the owner
lock (storage/lock.py). `live_daemon` ignores such a file rather than trusting it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from agent_memory.models import utc_now
from agent_memory.storage.lock import owner_of

DAEMON_FILE = "daemon.json"


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    url: str
    pid: int
    started_at: datetime


def daemon_file(data_dir: Path) -> Path:
    return data_dir / DAEMON_FILE


def publish(data_dir: Path, url: str, *, started_at: datetime | None = None) -> DaemonInfo:
    """Say that this process serves `data_dir` at `url`: write daemon.json atomically, readable by its owner only."""
    info = DaemonInfo(url, os.getpid(), started_at or utc_now())
    body = {"url": info.url, "pid": info.pid, "started_at": info.started_at.isoformat()}
    path = daemon_file(data_dir)
    tmp = path.with_name(f".{DAEMON_FILE}.{info.pid}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(body, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return info


def withdraw(data_dir: Path) -> None:
    """Remove daemon.json if it still names this process (a later daemon's file is left alone)."""
    info = read_daemon_file(data_dir)
    if info is not None and info.pid == os.getpid():
        daemon_file(data_dir).unlink(missing_ok=True)


def read_daemon_file(data_dir: Path) -> DaemonInfo | None:
    """What daemon.json says, or None when it is missing or malformed. Not checked: see `live_daemon`."""
    try:
        data = json.loads(daemon_file(data_dir).read_text(encoding="utf-8"))
        return DaemonInfo(str(data["url"]), int(data["pid"]), datetime.fromisoformat(data["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_daemon(data_dir: Path) -> DaemonInfo | None:
    """daemon.json when the process it names is alive and holds the owner lock of `data_dir`; else None."""
    info = read_daemon_file(data_dir)
    if info is None or not _alive(info.pid) or owner_of(data_dir) != info.pid:
        return None
    return info


def _alive(pid: int) -> bool:
    if pid <= 0:  # kill(0) and kill(-1) would signal process groups, not one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and someone else's
        return True
    return True


def serving_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a socket bound to host:port (a wildcard address means loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
