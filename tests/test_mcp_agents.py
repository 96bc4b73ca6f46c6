"""One owner, many agents (issue #23): two `agent-memory mcp` processes over stdio on one store, started at once with
no daemon running, write 200 notes each at the same time: one daemon is started, nothing is lost or doubled."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from test_mcp import call, stop_daemon

from agent_memory.interfaces.discovery import live_daemon
from agent_memory.interfaces.mcp import MemoryTools, build_server

WRITES = 200


def server(data_dir: Path, cwd: Path, agent: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agent_memory.interfaces.cli",
            "--data-dir",
            str(data_dir),
            "mcp",
            "--namespace",
            "shared",
            "--agent",
            agent,
        ],  # fmt: skip
        cwd=str(cwd),
    )


async def write_all(params: StdioServerParameters, agent: str) -> list[dict[str, Any]]:
    async with Client(params) as session:
        return [
            await call(session, "memory_write", text=f"Note {i} from {agent}: module {i} owns its cache.", type="fact")
            for i in range(WRITES)
        ]


async def test_two_mcp_processes_writing_at_once_lose_and_double_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    try:
        a, b = await asyncio.gather(
            write_all(server(data_dir, tmp_path, "agent-a"), "agent-a"),
            write_all(server(data_dir, tmp_path, "agent-b"), "agent-b"),
        )
        ids = [w["id"] for w in a + b]
        assert len(ids) == len(set(ids)) == 2 * WRITES
        info = live_daemon(data_dir)
        assert info is not None
        tools = MemoryTools(data_dir, namespace="shared", start=False)
        try:
            async with Client(build_server(tools)) as session:
                listed: list[dict[str, Any]] = []
                cursor = None
                while True:
                    page = await call(session, "memory_list", limit=200, **({"cursor": cursor} if cursor else {}))
                    listed += page["notes"]
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
        finally:
            await tools.aclose()
        assert sorted(n["id"] for n in listed) == sorted(ids)
        texts = sorted(n["text"] for n in listed)
        expected = sorted(f"Note {i} from {who}: module {i} owns its cache." for who in ("agent-a", "agent-b")
                          for i in range(WRITES))  # fmt: skip
        assert texts == expected
        assert live_daemon(data_dir) == info  # one daemon served both
    finally:
        stop_daemon(data_dir)


async def test_the_handoff_demo_holds_every_step(tmp_path: Path) -> None:
    """`agent-memory demo --agents`: two MCP stdio sessions on one project store hand a decision over, a stale
    forget is refused, a supersede keeps the old revision, and a restarted daemon loses nothing."""
    from agent_memory.interfaces.demo_agents import run_agents_demo

    said: list[str] = []
    assert await run_agents_demo(tmp_path, say=said.append) == 0
    story = "\n".join(said)
    assert "handoff and decision received" in story and "expected 1, current 2" in story
    assert "revisions [1, 2] kept" in story and "the superseded one left out" in story
    assert story.endswith("handoff demo: every step held")
    assert live_daemon(tmp_path / ".agent_memory") is None  # the demo stops the daemon it started
