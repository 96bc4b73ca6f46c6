"""The Claude Code hooks (`agent-memory hook session-start|stop`): quiet and fast when anything is missing (a real
subprocess, timed), the boot context and a worklog note when a daemon is live, and the transcript reading."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_memory.interfaces.cli_hooks import hook_payload
from agent_memory.interfaces.client import find_daemon
from agent_memory.interfaces.discovery import live_daemon, read_daemon_file
from agent_memory.interfaces.transcript import last_exchange, tail_lines, worklog_text

EXE = str(Path(sys.executable).parent / "agent-memory")
CAP = 2.5  # the hook's 2 s, and the time to start an interpreter on a busy machine


def _hook(
    event: str, data_dir: Path, payload: object, *extra: str, cwd: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    text = payload if isinstance(payload, str) else json.dumps(payload)
    done = subprocess.run(
        [EXE, "hook", event, "--data-dir", str(data_dir), *extra],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )
    return done, time.monotonic() - started


def _line(kind: str, content: object, **extra: object) -> str:
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}, **extra})


TRANSCRIPT = [
    json.dumps({"type": "summary", "summary": "earlier"}),
    _line("user", "Fix the flaky test in test_http.py"),
    _line("assistant", [{"type": "thinking", "thinking": "hmm"}, {"type": "tool_use", "id": "t1", "name": "Read"}]),
    _line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "file text"}]),
    "{not json",
    _line(
        "assistant",
        [{"type": "text", "text": "The test waited on a fixed sleep;"}, {"type": "text", "text": "now it polls."}],
    ),
    _line("user", "<local-command-stdout>ok</local-command-stdout>"),
    _line("user", "Caveat: internal", isMeta=True),
    _line("assistant", "side", isSidechain=True),
]


def test_the_last_exchange_is_the_typed_prompt_and_the_text_after_it() -> None:
    assert last_exchange(TRANSCRIPT) == (
        "Fix the flaky test in test_http.py",
        "The test waited on a fixed sleep;\nnow it polls.",
    )
    assert last_exchange(TRANSCRIPT[:2]) == ("Fix the flaky test in test_http.py", "")
    assert last_exchange([_line("user", [{"type": "text", "text": "Block prompt"}])]) == ("Block prompt", "")
    assert last_exchange(["", "[]", "{}", _line("assistant", "only an answer")]) is None


def test_worklog_is_short_and_says_both_sides() -> None:
    text = worklog_text("Fix it " * 100, "Done:\n\n  " + "changed a file " * 100)
    assert len(text) <= 600
    ask, did = text.split("\n")
    assert ask.startswith("User asked: Fix it Fix it") and ask.endswith("…")
    assert did.startswith("Agent did: Done: changed a file")
    assert worklog_text("Hi", "") == "User asked: Hi\nAgent did: (no text)"


def test_tail_lines_drops_the_line_cut_by_the_window(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("first line\nsecond\nthird\n")
    assert tail_lines(path) == ["first line", "second", "third"]
    assert tail_lines(path, max_bytes=10) == ["third"]


@pytest.mark.parametrize("raw", [b"", b"   ", b"not json", b"[1]", b'"x"', b"\xff\xfe", b'{"cwd": 3'])
def test_any_hook_input_is_taken(raw: bytes) -> None:
    assert hook_payload(raw) == {}


def test_no_daemon_and_no_start_is_quiet_and_fast(tmp_path: Path) -> None:
    data_dir = tmp_path / "mem"
    payload = {"session_id": "s", "cwd": str(tmp_path), "hook_event_name": "SessionStart", "source": "startup"}
    for event, body in (
        ("session-start", payload),
        ("session-start", "{garbage"),
        ("stop", {"transcript_path": "/nope"}),
    ):
        done, took = _hook(event, data_dir, body, "--no-start", cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), (event, body)
        assert took < CAP, f"{event} took {took:.2f} s"
    broken = [EXE, "hook", "session-start", "--no-start", "--config", str(tmp_path / "missing.toml")]  # cannot load
    done = subprocess.run(broken, input="{}", capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not data_dir.exists()  # nothing started, nothing made


def test_a_hook_whose_stdin_never_ends_still_returns_within_its_cap(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.Popen(
        [EXE, "hook", "session-start", "--no-start", "--data-dir", str(tmp_path / "mem")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b'{"session_id": ')  # and never closed
        proc.stdin.flush()
        code = proc.wait(timeout=10)
        took = time.monotonic() - started
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert code == 0 and took < CAP, f"exit {code} after {took:.2f} s"
    assert out == err == b""


@pytest.fixture(scope="module")
def spawned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, float]]:
    """The daemon that `hook session-start` starts when none runs (and how long the hook took), stopped after."""
    root = tmp_path_factory.mktemp("hooks")
    data_dir = root / "mem"
    done, took = _hook("session-start", data_dir, {"cwd": str(root)}, cwd=root)
    try:
        deadline = time.monotonic() + 90
        while live_daemon(data_dir) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert live_daemon(data_dir) is not None, (data_dir / "daemon.log").read_text(errors="replace")
        assert (done.returncode, done.stdout) == (0, ""), done.stderr
        yield data_dir, took
    finally:
        info = read_daemon_file(data_dir)
        if info is not None:
            os.kill(info.pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while live_daemon(data_dir) is not None and time.monotonic() < deadline:
                time.sleep(0.2)


def test_with_no_daemon_session_start_starts_one_and_does_not_wait(spawned: tuple[Path, float]) -> None:
    _, took = spawned
    assert took < CAP, f"the hook took {took:.2f} s"


async def _write_note(data_dir: Path, text: str) -> None:
    client = await find_daemon(data_dir)
    assert client is not None
    async with client:
        await client.notes.write(text, kind="decision", namespace="default")


async def _worklogs(data_dir: Path) -> list[str]:
    client = await find_daemon(data_dir)
    assert client is not None
    async with client:
        page = await client.notes.list_notes(namespace="default", kind="worklog")
    return [note.memory.content for note in page.notes]


def test_session_start_answers_with_the_boot_context(spawned: tuple[Path, float], tmp_path: Path) -> None:
    data_dir, _ = spawned
    asyncio.run(_write_note(data_dir, "We keep one daemon per data directory; the MCP server is its client."))
    payload = {"session_id": "s", "cwd": str(tmp_path), "hook_event_name": "SessionStart", "source": "startup"}
    done, took = _hook("session-start", data_dir, payload, cwd=tmp_path)
    assert done.returncode == 0 and took < CAP, (done.stderr, took)
    answer = json.loads(done.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "one daemon per data directory" in answer["hookSpecificOutput"]["additionalContext"]


def test_stop_writes_one_worklog_note(spawned: tuple[Path, float], tmp_path: Path) -> None:
    data_dir, _ = spawned
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("\n".join(TRANSCRIPT) + "\n")
    payload = {"session_id": "s", "transcript_path": str(transcript), "cwd": str(tmp_path), "hook_event_name": "Stop"}
    done, took = _hook("stop", data_dir, payload, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "") and took < CAP, (done.stderr, took)
    [note] = asyncio.run(_worklogs(data_dir))
    assert note.startswith("User asked: Fix the flaky test in test_http.py\nAgent did: The test waited")
