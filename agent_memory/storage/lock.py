"""The owner lock: one process owns a data directory; a second open fails at once, naming the owner."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from agent_memory.errors import DataDirError, StoreLocked
from agent_memory.storage.private import make_private_dir


class OwnerLock:
    """An exclusive `flock` on `owner.lock`, which also records the owner's pid.

    flock belongs to the open file description, so a second open from this same process is refused too.
    The kernel drops the lock when the process dies, even by SIGKILL: no stale lock survives a crash.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock, or raise StoreLocked naming the owner (DataDirError when the lock file cannot be opened)."""
        make_private_dir(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            problem = f"cannot be written: its lock file {self.path.name} cannot be opened ({exc.strerror or exc})"
            raise DataDirError(str(self.path.parent), problem) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(str(self.path.parent), read_owner(self.path)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0


def read_owner(path: Path) -> int | None:
    """The pid recorded in a lock file, or None when there is none."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def owner_of(data_dir: Path) -> int | None:
    """The pid of the live process that owns `data_dir`, or None when nobody holds the lock."""
    path = data_dir / "owner.lock"
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_owner(path)
    finally:
        os.close(fd)
    return None
