"""`agent-memory proxy` and `agent-memory chat` as a user runs them (issue #21): real subprocesses of the CLI, a
real daemon (started by the proxy, as it is when none runs), a local OpenAI-compatible server as the model, and
the official `openai` client in front of the proxy. No network, no key but the ones made up here."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from agent_memory.bench.chat_server import ChatServer, last_user_text, prompt_text
from agent_memory.interfaces.autostart import daemon_client, stop_daemon
from agent_memory.interfaces.token import read_token

MODEL = "openai/upstream-model"
KEY_ENV = "AGENT_MEMORY_TEST_UPSTREAM_KEY"
CLI = [sys.executable, "-c", "from agent_memory.interfaces.cli import main; raise SystemExit(main())"]


def answer(request: dict[str, Any]) -> str:
    """The model: it knows where the user lives only when its prompt says so (the memory the turn was given)."""
    if "where do i live" in last_user_text(request).lower():
        return "You live in Porto." if "Porto" in prompt_text(request) else "I do not know where you live."
    return "Noted."


@pytest.fixture(scope="module")
def upstream() -> Iterator[ChatServer]:
    with ChatServer(answer, name="upstream") as running:
        yield running


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data directory whose daemon, started by the first test's proxy, is stopped when the module ends."""
    root = tmp_path_factory.mktemp("chat") / "mem"
    try:
        yield root
    finally:
        stop_daemon(root)


def environment() -> dict[str, str]:
    return {**os.environ, KEY_ENV: "made-up-upstream-key"}


def start_proxy(store: Path, upstream: ChatServer) -> tuple[subprocess.Popen[str], str]:
    """`agent-memory proxy` on a free port, starting the store's daemon; its base URL, from its stderr."""
    command = [*CLI, "--data-dir", str(store), "proxy", "--upstream", MODEL, "--api-base", upstream.api_base]
    command += ["--api-key-env", KEY_ENV]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=environment(),
    )  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith("agent-memory proxy: http://"):
            threading.Thread(target=process.stderr.read, daemon=True).start()  # a full pipe would stall it
            return process, line.split()[2]
    process.wait(timeout=30)
    raise AssertionError(f"the proxy exited with {process.returncode} before it served: {''.join(seen)}")


async def recorded_turns(store: Path) -> int:
    client = await daemon_client(store, start=False)
    try:
        count: int = (await client.stats())["records"]["turns"]
        return count
    finally:
        await client.aclose()


async def test_the_proxy_command_starts_the_daemon_answers_unchanged_and_records_both_turns(
    store: Path, upstream: ChatServer
) -> None:
    process, base_url = start_proxy(store, upstream)
    try:
        async with openai.AsyncOpenAI(base_url=base_url, api_key=read_token(store), max_retries=0) as client:
            told = await client.chat.completions.with_raw_response.create(
                model="any", messages=[{"role": "user", "content": "I moved to Porto last spring."}], user="ines"
            )
            assert told.parse().choices[0].message.content == "Noted."
            with pytest.raises(openai.AuthenticationError):
                async with openai.AsyncOpenAI(base_url=base_url, api_key="wrong", max_retries=0) as stranger:
                    await stranger.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    finally:
        process.terminate()  # at once: it records what it answered behind the answer first, then exits 0
        assert await asyncio.to_thread(process.wait, 60) == 0
    assert "x-agent-memory-ids" in told.headers
    assert await recorded_turns(store) == 2  # the statement and the answer, recorded behind it
    asked = [r for r in upstream.requests if "Porto" in last_user_text(r)]
    assert asked and asked[-1]["model"] == "upstream-model"  # forwarded through litellm to the given model


async def test_the_chat_command_recalls_what_the_proxy_recorded_and_shows_what_each_turn_used(
    store: Path, upstream: ChatServer
) -> None:
    """Through the daemon the proxy started (the same store), a terminal chat: its memory holds the statement made
    through the proxy, the model is shown it, and each turn's line says what it used."""
    before = await recorded_turns(store)
    command = [*CLI, "--data-dir", str(store), "chat", "--model", MODEL, "--api-base", upstream.api_base]
    command += ["--api-key-env", KEY_ENV, "--session", "terminal", "--namespace", "ines"]
    done = await asyncio.to_thread(
        subprocess.run, command, input="Where do I live?\n\n/quit\nnever read\n", capture_output=True, text=True,
        timeout=120, env=environment(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["You live in Porto."]
    used = [line for line in done.stderr.splitlines() if line.startswith("  [memories ")]
    assert len(used) == 1 and not used[0].startswith("  [memories 0:") and "window " in used[0]
    assert await recorded_turns(store) == before + 2  # the question and the answer; "/quit" ended it


async def test_the_chat_command_names_a_missing_key_variable_and_writes_nothing(
    store: Path, upstream: ChatServer
) -> None:
    before = await recorded_turns(store)
    command = [*CLI, "--data-dir", str(store), "chat", "--model", MODEL, "--api-base", upstream.api_base]
    command += ["--api-key-env", "AGENT_MEMORY_TEST_NO_SUCH_VARIABLE"]
    done = await asyncio.to_thread(
        subprocess.run, command, input="hello\n", capture_output=True, text=True, timeout=120, env=environment()
    )
    assert done.returncode != 0
    assert "AGENT_MEMORY_TEST_NO_SUCH_VARIABLE" in done.stderr and "not set" in done.stderr
    assert "Traceback" not in done.stderr
    assert await recorded_turns(store) == before
