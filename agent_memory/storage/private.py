"""A data directory only its owner can read: the directory and every folder in it 0700, every file in it 0600.

Our own files are created so (the journal, owner.lock, api_token, daemon.json, images, and memory.db before SQLite
opens it: SQLite gives its WAL and SHM the database's mode). Kuzu and Qdrant Edge create their files with the
process umask, so the manager makes the whole tree private again once they have opened and when the store closes.
The CLI and the daemon, our own processes, also run with the umask 0o077; a library never changes its caller's.

Modes are only ever narrowed: the group and other bits are taken off, the owner's are left as they are (a folder
its owner made read-only stays read-only, and then says so).
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from pathlib import Path

from agent_memory.errors import DataDirError

log = logging.getLogger(__name__)
PRIVATE_UMASK = 0o077
"""The umask of our own processes (the CLI, the daemon): every file and folder they create is their owner's only."""


def make_private_dir(path: Path) -> None:
    """Create `path` 0700 (missing parents as well), or narrow an existing one to its owner; then check that this
    process can create files in it. DataDirError names the path and what is wrong."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise DataDirError(str(path), f"is not a directory (it is {_kind(path)})") from None
    except NotADirectoryError:
        raise DataDirError(str(path), f"cannot be created: {_file_above(path)} is not a directory") from None
    except OSError as exc:
        raise DataDirError(str(path), f"cannot be created ({exc.strerror or exc})") from exc
    _narrow(path)
    _check_writable(path)


def make_private_dirs(data_dir: Path, *folders: str) -> None:
    """`make_private_dir` for the data directory, then for each of its `folders`."""
    for path in [data_dir, *(data_dir / folder for folder in folders)]:
        make_private_dir(path)


def make_private_file(path: Path) -> None:
    """Create `path` 0600 if it is missing, or narrow it to its owner; raises OSError (the caller names the store)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            os.fchmod(fd, mode & 0o700)
    finally:
        os.close(fd)


def make_private_tree(root: Path) -> None:
    """Narrow every folder and file under `root`, and `root` itself, to its owner. Symbolic links are not followed;
    a file that vanishes meanwhile is skipped, one that cannot be changed (another owner's) is logged."""
    _narrow(root)
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            _narrow(Path(folder) / name)


def _narrow(path: Path) -> None:
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_IMODE(info.st_mode) & 0o077:
            return
        os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("cannot make %s private to its owner (%s)", path, exc.strerror or exc)


def _check_writable(path: Path) -> None:
    """Create and remove a file in `path`: the kernel's own answer (a mode, an immutable flag, a read-only mount)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=path)
    except OSError as exc:
        raise DataDirError(str(path), f"cannot be written ({exc.strerror or exc})") from exc
    os.close(fd)
    os.unlink(probe)


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _file_above(path: Path) -> Path:
    """The nearest existing ancestor of `path` that is not a directory (why `path` cannot be created)."""
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            return parent
    return path.parent
