"""A data directory only its owner can read (issue 19, defect 7): the directory and every folder in it 0700, every
file 0600, whatever the umask; a token file others can read is refused; the API stays on loopback unless asked."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import ConfigError
from agent_memory.interfaces.cli import build_parser, main
from agent_memory.interfaces.discovery import publish, withdraw
from agent_memory.interfaces.serve import check_exposure, serve
from agent_memory.interfaces.token import load_or_create_token, read_token
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask of a user's shell: without our chmods, engines would make files 0644 and folders 0755."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def modes_not_private(data_dir: Path) -> list[str]:
    """Every path under `data_dir` (and itself) whose mode is not 0700 for a folder, 0600 for a file."""
    wrong = []
    for path in [data_dir, *data_dir.rglob("*")]:
        info = path.lstat()
        want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if stat.S_IMODE(info.st_mode) != want:
            wrong.append(f"{oct(stat.S_IMODE(info.st_mode))} {path.relative_to(data_dir.parent)}")
    return wrong


async def test_every_file_of_a_store_is_private_to_its_owner(
    config: Config, embedder: Embedder, open_umask: None
) -> None:
    """A library user's umask is left alone: the store narrows what Kuzu and Qdrant Edge made, at open and close."""
    data_dir = config.data_dir
    data_dir.mkdir(mode=0o755)  # a folder the user made before, readable by all: narrowed on open
    (data_dir / "memory.db").touch(mode=0o644)  # likewise a database file (SQLite makes an empty one a database)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        turns = [TurnInput("s1", n, f"my kite number {n} is red and it flies high") for n in range(6)]
        await manager.process_turns(turns)
        await manager.process_turn("s1", 6, "the red kite got caught in the old oak tree")
        await manager.flush()
        wal = data_dir / "memory.db-wal"
        assert wal.exists() and stat.S_IMODE(wal.stat().st_mode) == 0o600  # SQLite gave it the database's mode
    load_or_create_token(data_dir)
    publish(data_dir, "http://127.0.0.1:1")
    names = {path.name for path in data_dir.rglob("*")}
    assert {"memory.db", "graph.kuzu", "owner.lock", "api_token", "daemon.json", "segment-00000001.jsonl"} <= names
    assert any(path.parent.name == "vectors" for path in data_dir.rglob("*"))
    assert modes_not_private(data_dir) == []
    withdraw(data_dir)
    assert os.umask(0o022) == 0o022  # the library did not change this process's umask


def test_the_cli_runs_with_a_private_umask_and_restores_it(
    tmp_path: Path, open_umask: None, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation = tmp_path / "talk.jsonl"
    conversation.write_text(
        '{"session_id": "s1", "turn_number": 0, "content": "I moved to Porto last spring"}\n'
        '{"session_id": "s1", "turn_number": 1, "content": "My 10k race time was 48:37"}\n'
    )
    data_dir = tmp_path / "mem"
    assert main(["--data-dir", str(data_dir), "ingest", str(conversation)]) == 0, capsys.readouterr().err
    assert modes_not_private(data_dir) == []
    assert os.umask(0o022) == 0o022  # main() set 0o077 for its run and put the caller's back


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    token = load_or_create_token(tmp_path)
    path = tmp_path / "api_token"
    path.chmod(mode)
    for read in (load_or_create_token, read_token):
        with pytest.raises(ConfigError, match=f"{path}.*mode {mode:04o}.*chmod 600 {path}.*delete it"):
            read(tmp_path)
    path.chmod(0o600)
    assert load_or_create_token(tmp_path) == read_token(tmp_path) == token


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "10.0.0.1", "example.com", ""])
def test_a_host_other_than_loopback_needs_allow_remote(host: str) -> None:
    with pytest.raises(ConfigError, match=rf"serve.host {host!r} is not a loopback address.*--allow-remote"):
        check_exposure(host, allow_remote=False)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_a_loopback_host_needs_nothing(host: str, caplog: pytest.LogCaptureFixture) -> None:
    check_exposure(host, allow_remote=False)
    assert not caplog.records


def test_allow_remote_serves_but_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_exposure("0.0.0.0", allow_remote=True)
    assert "exposed with only the bearer token and no TLS" in caplog.text
    assert build_parser().parse_args(["serve", "--host", "0.0.0.0", "--allow-remote"]).allow_remote is True


async def test_the_daemon_refuses_a_remote_host_before_it_opens_the_store(config: Config) -> None:
    with pytest.raises(ConfigError, match="'0.0.0.0' is not a loopback address"):
        await serve(config, host="0.0.0.0", port=0)
    assert not config.data_dir.exists()
