"""The MCP server (issue #23) through the official SDK's client: every tool in process, errors included, against a
real daemon that the server itself started (autostart.py); then a real stdio subprocess."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from agent_memory.interfaces import autostart
from agent_memory.interfaces.discovery import live_daemon, read_daemon_file
from agent_memory.interfaces.mcp import MemoryTools, build_server
from agent_memory.storage.lock import owner_of


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def stop_daemon(data_dir: Path) -> None:
    autostart.stop_daemon(data_dir)


def wait_dead(data_dir: Path) -> None:
    """Until the killed daemon has let go of the data directory: it is dead before the next call."""
    deadline = time.monotonic() + 10
    while live_daemon(data_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store whose daemon the first MCP call starts; stopped when the module is done."""
    path = tmp_path_factory.mktemp("mcp") / "store"
    yield path
    stop_daemon(path)


@asynccontextmanager
async def connected(data_dir: Path) -> AsyncIterator[Client]:
    """An in-process session (entered in the test's own task: the SDK's task groups must exit where they began)."""
    tools = MemoryTools(data_dir, namespace="proj", agent="agent-a")
    try:
        async with Client(build_server(tools), raise_exceptions=False) as session:
            yield session
    finally:
        await tools.aclose()


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return result.structured_content


async def test_the_tools_are_listed_with_descriptions_and_output_schemas(data_dir: Path) -> None:
    async with connected(data_dir) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        expected = {
            "memory_boot", "memory_recall", "memory_write", "memory_handoff", "memory_get", "memory_list",
            "memory_update", "memory_supersede", "memory_forget", "memory_facts", "memory_remember_fact", "memory_stats",
        }  # fmt: skip
        assert set(tools) == expected
        for tool in tools.values():
            assert tool.description and len(tool.description) > 40
            assert tool.output_schema is not None and tool.output_schema.get("type") == "object"
        assert tools["memory_write"].input_schema["properties"]["type"]["enum"] == [
            "decision", "fact", "finding", "procedure", "preference", "note",
        ]  # fmt: skip


async def test_write_recall_get_update_supersede_forget_and_their_errors(data_dir: Path) -> None:
    async with connected(data_dir) as client:
        written = await call(
            client,
            "memory_write",
            text="We use SQLite in WAL mode as the source of truth; Kuzu and Qdrant are rebuildable projections.",
            type="decision",
            source={"path": "docs/DESIGN.md", "line": 12},
            tags=["storage"],
        )
        memory_id = written["id"]
        assert written["revision"] == 1 and written["kind"] == "decision" and written["namespace"] == "proj"

        recalled = await call(client, "memory_recall", query="which database is the source of truth?", explain=True)
        assert recalled["results"][0]["id"] == memory_id
        assert recalled["results"][0]["kind"] == "decision" and recalled["results"][0]["layers"]
        assert recalled["tokens"] <= recalled["budget_tokens"] == 800

        got = await call(client, "memory_get", id=memory_id)
        assert got["kind"] == "decision" and got["source"] == {"path": "docs/DESIGN.md", "commit": None, "line": 12,
                                                                "url": None}  # fmt: skip
        assert got["stale"] is None and "commit" in got["stale_reason"]

        updated = await call(client, "memory_update", id=memory_id, text=written_text(got) + " (WAL on)",
                             expected_revision=1)  # fmt: skip
        assert updated["revision"] == 2

        stale = await client.call_tool("memory_forget", {"id": memory_id, "expected_revision": 1})
        assert stale.is_error
        assert f"memory {memory_id}: expected 1, current 2" in text_of(stale)

        superseded = await call(
            client, "memory_supersede", id=memory_id, text="Postgres is now the source of truth.", expected_revision=2
        )
        assert superseded["replaced"] == memory_id and superseded["id"] != memory_id
        old = await call(client, "memory_get", id=memory_id)
        assert old["status"] == "superseded" and old["superseded_by"] == superseded["id"]
        assert [h["revision"] for h in old["history"]] == [1, 2]
        new = await call(client, "memory_get", id=superseded["id"])
        assert new["kind"] == "decision"  # the successor keeps the label

        forgotten = await call(client, "memory_forget", id=superseded["id"], expected_revision=1)
        assert forgotten["status"] == "forgotten"
        again = await call(client, "memory_recall", query="which database is the source of truth?")
        assert superseded["id"] not in [r["id"] for r in again["results"]]
        assert memory_id not in [r["id"] for r in again["results"]]


def written_text(got: dict[str, Any]) -> str:
    return str(got["text"])


async def test_bad_arguments_are_errors_that_say_what_was_wrong(data_dir: Path) -> None:
    async with connected(data_dir) as client:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("memory_write", {"text": "x", "type": "memo"}, "type"),
            ("memory_write", {"text": "   ", "type": "note"}, "empty"),
            ("memory_write", {"text": "x", "type": "note", "source": {"commit": "zz"}}, "source.commit"),
            ("memory_write", {"text": "x", "type": "note", "tags": ["a"] * 17}, "tags"),
            ("memory_get", {"id": "no-such-memory"}, "no-such-memory"),
            ("memory_update", {"id": "no-such-memory", "text": "y", "expected_revision": 1}, "no-such-memory"),
            ("memory_recall", {"query": "x", "k": 0}, "k"),
            ("memory_list", {"cursor": "garbage"}, "cursor"),
            ("memory_list", {"type": "memo"}, "kind"),
            ("memory_boot", {"budget_tokens": 10}, "budget_tokens"),
            ("memory_facts", {"as_of": "yesterday"}, "as_of"),
            ("memory_handoff", {"done": "x", "next_steps": []}, "next_steps"),
        ]
        for name, arguments, named in cases:
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert named in text_of(result), (name, text_of(result))
        assert (await call(client, "memory_stats"))["namespace"] == "proj"  # the server is still up


async def test_handoff_then_boot_list_facts_and_stats(data_dir: Path) -> None:
    async with connected(data_dir) as client:
        decision = await call(client, "memory_write", text="Retries use exponential backoff capped at 30 s.",
                              type="decision")  # fmt: skip
        await call(client, "memory_write", text="The retry test is flaky on CI when the clock jumps.", type="finding")
        handoff = await call(
            client,
            "memory_handoff",
            done="Moved the retry logic into one module.",
            next_steps=["add jitter to the backoff"],
            warnings=["the flaky retry test"],
        )
        boot = await call(client, "memory_boot", task="add jitter to the retry backoff", budget_tokens=400)
        assert boot["handoff_id"] == handoff["id"] and boot["tokens"] <= 400
        assert decision["id"] in [item["id"] for item in boot["items"]]
        assert "Moved the retry logic" in boot["text"]

        listed = await call(client, "memory_list", type="handoff")
        assert [n["id"] for n in listed["notes"]] == [handoff["id"]]
        first = await call(client, "memory_list", limit=1)
        second = await call(client, "memory_list", limit=1, cursor=first["next_cursor"])
        assert first["notes"][0]["id"] != second["notes"][0]["id"]

        fact = await call(client, "memory_remember_fact", subject="api", attribute="port", value="8080")
        assert fact["value"] == "8080"
        facts = await call(client, "memory_facts", subject="api")
        assert [(f["attribute"], f["value"]) for f in facts["facts"]] == [("port", "8080")]
        stats = await call(client, "memory_stats")
        assert stats["notes"]["handoff"] == 1 and stats["notes"]["decision"] >= 1


async def test_the_daemon_killed_between_calls_is_started_again(data_dir: Path) -> None:
    async with connected(data_dir) as client:
        await call(client, "memory_write", text="Before the crash: the cache key includes the tenant.", type="fact")
        info = read_daemon_file(data_dir)
        assert info is not None
        os.kill(info.pid, signal.SIGKILL)
        await asyncio.to_thread(wait_dead, data_dir)
        written = await call(client, "memory_write", text="After the crash: writes still land.", type="fact")
        assert read_daemon_file(data_dir) is not None and read_daemon_file(data_dir).pid != info.pid  # type: ignore[union-attr]
        got = await call(client, "memory_get", id=written["id"])
        assert got["text"] == "After the crash: writes still land."
        recalled = await call(client, "memory_recall", query="does the cache key include the tenant?")
        assert "tenant" in recalled["results"][0]["text"]


async def test_a_stdio_subprocess_session_shares_the_daemon(data_dir: Path, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent_memory.interfaces.cli", "--data-dir", str(data_dir), "mcp", "--namespace", "proj"],
        cwd=str(tmp_path),
    )
    async with Client(params) as session:
        written = await call(session, "memory_write", text="Written over stdio: the build uses uv.", type="procedure")
        recalled = await call(session, "memory_recall", query="what does the build use?")
        assert recalled["results"][0]["id"] == written["id"]
    info = live_daemon(data_dir)
    assert info is not None  # the daemon outlives the MCP server that talked to it


def test_stopping_a_daemon_another_process_started_waits_until_it_lets_go_of_the_store(tmp_path: Path) -> None:
    """The daemon removes daemon.json first and releases the owner lock last, once its engines have closed. A
    daemon this process did not start is not reaped here, so stop_daemon must wait on the lock itself: the store
    opens at once after it returns (the MCP benchmark opened it in process right after, and found it locked)."""
    data_dir = tmp_path / "store"
    spawn = f"from pathlib import Path; from agent_memory.interfaces.autostart import spawn_daemon; spawn_daemon(Path({str(data_dir)!r}))"
    subprocess.run([sys.executable, "-c", spawn], check=True, timeout=60)  # its parent is gone when it serves
    deadline = time.monotonic() + 60
    while live_daemon(data_dir) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = owner_of(data_dir)
    assert pid is not None and live_daemon(data_dir) is not None
    assert autostart.stop_daemon(data_dir) is True
    assert owner_of(data_dir) is None and read_daemon_file(data_dir) is None
