"""The daemon's bearer token: created once, on first start, in `data_dir/api_token` (mode 0600), read after.

A token file that other users can read (group or other bits set) is refused: anyone who can read it can use the API."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from agent_memory.errors import ConfigError

TOKEN_FILE = "api_token"


def token_path(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def load_or_create_token(data_dir: Path) -> str:
    """The token in `data_dir/api_token`; on first call a new one, written so only its owner can read it."""
    path = token_path(data_dir)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(token + "\n")
        out.flush()
        os.fsync(out.fileno())
    return token


def read_token(data_dir: Path) -> str:
    """The token a client sends: the daemon's, which it created on its first start."""
    path = token_path(data_dir)
    try:
        return _read(path)
    except OSError as exc:
        raise ConfigError(f"Cannot read the daemon's token {path}: {exc.strerror or exc}") from exc


def _read(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"The token file {path} can be read by other users (mode {mode:04o}), so anyone on this machine could "
            f"use the API: run `chmod 600 {path}`, or delete it and start the daemon again to make a new one"
        )
    token = path.read_text(encoding="ascii").strip()
    if not token:
        raise ConfigError(f"The token file {path} is empty; delete it and start the daemon again to make a new one")
    return token
