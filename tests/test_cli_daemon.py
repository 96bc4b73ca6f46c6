"""The CLI and a running daemon (issue #5): while `agent-memory serve` owns the data directory the commands go
through it, and once it stops the same commands open the store directly.

One real daemon process serves the module's first tests; the last test (`test_..._once_the_daemon_stops`) stops it,
so it stays the last one that uses the `daemon` fixture. The other tests need no daemon process."""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from agent_memory.config import SleepConfig, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import (
    AgentMemoryError,
    DaemonError,
    DaemonUnreachable,
    DuplicateTurn,
    InvalidInput,
    NotFound,
)
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.client import DaemonClient, find_daemon
from agent_memory.interfaces.discovery import daemon_file, publish, serving_url
from agent_memory.interfaces.serve import settled, thread_switching
from agent_memory.interfaces.token import load_or_create_token
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.storage.lock import OwnerLock

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample_conversation.jsonl"
QUERY = "what was the 10k race time?"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    data_dir: Path
    config: Path
    url: str

    def cli(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        return run(capsys, "--data-dir", str(self.data_dir), "--config", str(self.config), *args)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """`agent-memory serve --port 0` in a subprocess, keeping every turn (save.keep_all), with its own cwd."""
    root = tmp_path_factory.mktemp("daemon")
    config = root / "keep_all.toml"
    config.write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    data_dir = root / "mem"
    with (root / "daemon.err").open("w+") as err:
        proc = _serve(data_dir, config, err, root)
        try:
            yield Daemon(proc, data_dir, config, _served_url(proc))
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
            err.seek(0)
            sys.stderr.write(err.read())  # shown by pytest when a test fails


def _serve(data_dir: Path, config: Path, err: IO[str], cwd: Path) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "agent_memory.interfaces.cli",
        "--data-dir",
        str(data_dir),
        "--config",
        str(config),
    ]
    return subprocess.Popen([*command, "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=err, text=True, cwd=cwd)


def _served_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 90)
    line = proc.stdout.readline() if ready else ""
    assert line.startswith("agent-memory: serving"), f"the daemon did not start: {line!r}"
    return line.split(" on ")[1].split()[0]


# ----- through the running daemon ---------------------------------------------------------------------


def test_the_daemon_publishes_where_it_listens(daemon: Daemon) -> None:
    path = daemon_file(daemon.data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    info = json.loads(path.read_text())
    assert info["url"] == daemon.url and info["pid"] == daemon.proc.pid
    assert datetime.fromisoformat(info["started_at"]).tzinfo is not None


def test_commands_go_through_the_daemon(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = daemon.cli(capsys, "ingest", str(SAMPLE))
    assert code == 0 and "ingested 54 turns, 51 kept" in out, err  # all but 3 phatic turns (save.keep_all)
    code, out, _ = daemon.cli(capsys, "stats", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["pid"] == daemon.proc.pid  # answered by the daemon, not opened here
    assert stats["switch_interval_ms"] == 0.5  # serve.switch_interval, in force while it serves
    assert stats["records"]["turns"] == 54
    assert stats["keyword_index"]["state"] in ("building", "ready")  # started with the daemon, before any search
    code, out, _ = daemon.cli(capsys, "search", QUERY, "-k", "2", "--json")
    hits = json.loads(out)
    assert code == 0 and "48:37" in hits[0]["content"] and set(hits[0]["layers"]) >= {"keyword", "semantic"}
    code, out, _ = daemon.cli(capsys, "search", QUERY, "-k", "2")
    assert code == 0 and out.startswith(" 1. [2026-03-22 ") and "48:37" in out and "\n    fused " in out
    code, out, _ = daemon.cli(capsys, "context", QUERY, "--budget", "120", "--explain")
    block, explanation = out.split("</memories>\n", 1)
    assert code == 0 and "48:37" in block and "/120 tokens (chars/4)" in explanation and " budget" in explanation


def test_a_sleep_job_run_through_the_daemon_is_in_its_history(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = daemon.cli(capsys, "decay", "--json")
    run_row = json.loads(out)
    assert code == 0 and run_row["job"] == "decay" and run_row["status"] == "ok" and run_row["counts"]["scored"] > 0
    code, out, _ = daemon.cli(capsys, "jobs", "--job", "decay")
    assert code == 0 and out.startswith(f"#{run_row['run_id']} decay ok at ")
    code, out, _ = daemon.cli(capsys, "doctor")
    assert code == 0 and out.startswith("memories=51 turns=54") and out.strip().endswith("consistent")


def test_export_writes_where_the_cli_was_asked(
    daemon: Daemon, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --out names a file here, not in the daemon's cwd
    code, out, _ = daemon.cli(capsys, "export", "policy", "--out", "policy.jsonl", "--all")
    assert code == 0 and "export ok" in out
    lines = (tmp_path / "policy.jsonl").read_text().splitlines()
    assert len(lines) >= 54 and json.loads(lines[0])["decision_id"] == 1  # a decision for every ingested turn
    assert not (daemon.data_dir.parent / "policy.jsonl").exists()


def test_a_daemon_error_is_shown_with_its_message(
    daemon: Daemon, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    turn = tmp_path / "one.jsonl"
    turn.write_text(json.dumps({"session_id": "dup", "turn_number": 1, "content": "The spare key is under the fern"}))
    assert daemon.cli(capsys, "ingest", str(turn))[0] == 0
    code, _, err = daemon.cli(capsys, "ingest", str(turn), "--no-resume")  # else a stored turn is skipped
    assert code == 2
    assert (
        err
        == "agent-memory: Turn 1 of session 'dup' in namespace 'default' was already processed; nothing was written\n"
    )


async def test_the_client_raises_the_daemons_errors_as_typed_errors(daemon: Daemon) -> None:
    client = await find_daemon(daemon.data_dir)
    assert client is not None and client.url == daemon.url
    async with client:
        with pytest.raises(NotFound, match="No memory with id 'no-such-memory'"):
            await client.get("no-such-memory")
        with pytest.raises(InvalidInput, match="No sleep job named 'nap'"):
            await client.run_job("nap")


# ----- no daemon, or a daemon.json that must not be trusted -------------------------------------------


def test_a_daemon_file_naming_a_dead_process_is_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "mem"
    data_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    body = {"url": f"http://127.0.0.1:{_closed_port()}", "pid": dead.pid, "started_at": "2026-01-01T00:00:00+00:00"}
    daemon_file(data_dir).write_text(json.dumps(body))
    code, out, err = run(capsys, "--data-dir", str(data_dir), "stats", "--json")
    assert code == 0, err
    assert json.loads(out)["pid"] == os.getpid()  # the store was opened here
    assert json.loads(out)["switch_interval_ms"] == round(sys.getswitchinterval() * 1000, 3)  # this process's own


def test_the_switch_interval_holds_while_the_daemon_serves_then_is_put_back() -> None:
    python = sys.getswitchinterval()
    try:
        with thread_switching(timedelta(microseconds=500)):
            assert sys.getswitchinterval() == pytest.approx(0.0005)
        assert sys.getswitchinterval() == python
        with thread_switching(timedelta(0)):  # zero leaves Python's
            assert sys.getswitchinterval() == python
        with thread_switching(timedelta(milliseconds=2)):
            assert sys.getswitchinterval() == pytest.approx(0.002)
            sys.setswitchinterval(0.003)  # the program's own, set while the daemon served, is not undone
        assert sys.getswitchinterval() == pytest.approx(0.003)
    finally:
        sys.setswitchinterval(python)


async def test_the_daemon_freezes_its_heap_once_open_and_again_once_the_keyword_projection_is_built(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = load_config(environ={}, data_dir=str(tmp_path / "mem"), save__keep_all=True)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns([TurnInput("s1", n, f"Ines booked flight {n} to Porto.") for n in range(3)])
        index = manager.records.keyword_index
        assert index is not None and not index.ready and gc.get_freeze_count() == 0
        async with settled(manager) as built:
            at_open = gc.get_freeze_count()
            assert at_open > 1000  # what the process holds: modules, functions, the engines' bindings
            assert built is not None
            await built
            assert index.ready and gc.get_freeze_count() > at_open  # the projection's own objects, frozen too
            found = await manager.retrieve("Porto flight 2", k=1)
            assert [r.memory.content for r in found] == ["Ines booked flight 2 to Porto."]
        assert gc.get_freeze_count() == 0  # handed back to the collector
        assert built.done()
        async with settled(manager, freeze=False) as unfrozen:  # the benchmarks' comparison: nothing frozen
            assert unfrozen is not None
            await unfrozen
            assert index.ready and gc.get_freeze_count() == 0


async def test_a_daemon_file_whose_process_holds_no_lock_is_ignored(tmp_path: Path) -> None:
    data_dir = tmp_path / "mem"
    data_dir.mkdir()
    load_or_create_token(data_dir)
    publish(data_dir, f"http://127.0.0.1:{_closed_port()}")  # names this process, alive, which holds no lock
    assert await find_daemon(data_dir) is None
    lock = OwnerLock(data_dir / "owner.lock")
    lock.acquire()
    try:  # for contrast: with the lock held, the same file is believed, and its silent URL named
        with pytest.raises(DaemonUnreachable, match="127.0.0.1"):
            await find_daemon(data_dir)
    finally:
        lock.release()


def test_a_daemon_that_does_not_answer_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "mem"
    load_or_create_token(data_dir)
    lock = OwnerLock(data_dir / "owner.lock")
    lock.acquire()
    try:
        url = publish(data_dir, f"http://127.0.0.1:{_closed_port()}").url
        code, _, err = run(capsys, "--data-dir", str(data_dir), "search", "anything")
    finally:
        lock.release()
    assert code == 2 and f"No answer from the agent-memory daemon at {url}" in err


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (
            409,
            {"error": {"code": "duplicate_turn", "message": "Turn 1 was already processed"}},
            InvalidInput,
            "^Turn 1",
        ),
        (
            409,
            {
                "error": {
                    "code": "duplicate_turn",
                    "message": "Turn 1 of session 's' in namespace 'n' was already processed",
                    "details": {"namespace": "n", "session_id": "s", "turn_number": 1},
                }
            },
            DuplicateTurn,
            "^Turn 1 of session 's'",
        ),
        (404, {"error": {"code": "not_found", "message": "No memory with id 'x'"}}, NotFound, "^No memory"),
        (401, {"error": {"code": "unauthorized", "message": "A valid bearer token"}}, DaemonError, "http://d.test"),
        (502, "<html>Bad Gateway</html>", DaemonError, "HTTP 502 with no JSON error"),
        (200, [{"rank": "first"}], DaemonError, "unexpected shape"),
    ],
)
async def test_error_answers_map_to_typed_errors(
    status: int, body: Any, error: type[AgentMemoryError], message: str
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    async with DaemonClient("http://d.test", "t", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(error, match=message) as raised:
            await client.retrieve("anything")
    assert type(raised.value) is error
    if "error" in body if isinstance(body, dict) else False:
        assert raised.value.code == body["error"]["code"]  # callers branch on the code, not on the words


async def test_paths_and_times_are_sent_as_the_daemon_needs_them(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        row = {"run_id": 1, "job": "export", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": None}
        return httpx.Response(200, json={**row, "status": "running", "counts": {}, "error": None})

    now = datetime.fromisoformat("2026-05-01T10:00:00+00:00")
    async with DaemonClient("http://d.test", "t", transport=httpx.MockTransport(answer)) as client:
        run_row = await client.run_job("export", now=now, out=Path("policy.jsonl"), labelled_only=False)
    assert run_row.started_at.isoformat() == "2026-01-01T00:00:00+00:00" and run_row.finished_at is None
    assert sent == [
        {"now": "2026-05-01T10:00:00+00:00", "out": str(Path.cwd() / "policy.jsonl"), "labelled_only": False}
    ]


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8765"),
        ("0.0.0.0", "http://127.0.0.1:8765"),
        ("::", "http://[::1]:8765"),
        ("::1", "http://[::1]:8765"),
    ],
)
def test_the_published_url_is_one_a_local_client_can_reach(host: str, url: str) -> None:
    assert serving_url(host, 8765) == url


# ----- last: the daemon stops, and the CLI opens the store itself -------------------------------------


def test_the_same_search_opens_the_store_once_the_daemon_stops(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = daemon.cli(capsys, "search", QUERY, "-k", "1", "--json")
    through_daemon = json.loads(out)
    assert code == 0 and through_daemon
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(30) == 0
    assert not daemon_file(daemon.data_dir).exists()
    code, out, err = daemon.cli(capsys, "search", QUERY, "-k", "1", "--json")
    direct = json.loads(out)
    assert code == 0, err
    assert [h["memory_id"] for h in direct] == [h["memory_id"] for h in through_daemon]
    assert "48:37" in direct[0]["content"]
    code, out, _ = daemon.cli(capsys, "stats", "--json")
    assert code == 0 and json.loads(out)["pid"] == os.getpid()


def test_a_daemon_that_starts_with_points_moved_out_of_an_index_runs_the_index_job(daemon: Daemon) -> None:
    """Points a payload change moved out of a collection's HNSW index (migration 0030 moves every point: see
    sleep/index.py) are looked at when the daemon starts, not at the index job's first interval an hour later. The
    daemon of the tests above has stopped; this one serves the same store."""
    assert daemon.proc.poll() is not None
    store = daemon.data_dir / "memory.db"
    with sqlite3.connect(store) as db:
        db.execute(  # the import above may have left moves of its own: the vector upgrade ran if the daemon idled
            "INSERT INTO vector_index_moves (collection, moved) VALUES ('text', 40000) "
            "ON CONFLICT (collection) DO UPDATE SET moved = excluded.moved"
        )
    with (daemon.data_dir.parent / "again.err").open("w+") as err:
        proc = _serve(daemon.data_dir, daemon.config, err, daemon.data_dir.parent)
        try:
            _served_url(proc)
            deadline = time.monotonic() + 60
            runs: list[tuple[str, str]] = []
            while not runs and time.monotonic() < deadline:
                time.sleep(0.2)
                with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
                    runs = db.execute(
                        "SELECT status, counts FROM job_runs WHERE job = 'index' AND status <> 'running'"
                    ).fetchall()
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            assert proc.stdout is not None
            proc.stdout.close()
    assert runs, "no index job ran in the daemon's first minute"
    status, counts = runs[0]
    text = json.loads(counts)["text"]
    assert status == "ok" and text["moved"] == 40000 and 0 < text["points"] < SleepConfig().index_min_unindexed
    assert text["built"] is False  # every point counted unindexed, still too few to index: an exact scan is as fast
