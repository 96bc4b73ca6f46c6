"""`agent-memory demo --agents` (and scripts/handoff_demo.py): two coding agents hand work over through one store.

Two real MCP client sessions, over stdio, to two `agent-memory mcp` processes on one project store (a throwaway
git repository's `.agent_memory`); the first call starts the daemon both share. Agent A writes a decision and a
handoff; agent B boots and receives both and refines the decision; A, still holding revision 1, tries to forget
it and is refused (expected 1, current 2); B supersedes it; the old revision stays inspectable; after the daemon
is stopped and the agents reconnect, nothing is lost. No model calls, no network.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from agent_memory.interfaces.autostart import stop_daemon

Say = Callable[[str], None]


def _server(root: Path, agent: str) -> StdioServerParameters:
    command = "from agent_memory.interfaces.cli import main; raise SystemExit(main())"
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", command, "--data-dir", str(root / ".agent_memory"), "mcp", "--agent", agent],
        cwd=str(root),
    )


async def _call(session: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(name, arguments)
    if result.is_error:
        raise RuntimeError(f"{name} failed: {_text(result)}")
    assert result.structured_content is not None
    return dict(result.structured_content)


def _text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def run_agents_demo(root: Path | None = None, *, say: Say = print) -> int:
    """Run the handoff story in `root` (a new temporary project when None); 0 when every step held."""
    if root is not None:
        return await _story(root, say)
    with tempfile.TemporaryDirectory(prefix="agent-memory-agents-") as tmp:
        return await _story(Path(tmp), say)


async def _story(root: Path, say: Say) -> int:
    (root / ".git").mkdir(parents=True, exist_ok=True)  # a project: its store is <root>/.agent_memory
    data_dir = root / ".agent_memory"
    started = time.monotonic()
    try:
        async with Client(_server(root, "agent-a")) as a, Client(_server(root, "agent-b")) as b:
            say(f"two MCP servers on {data_dir} (the first call starts the daemon they share)")
            decision = await _call(
                a, "memory_write", type="decision",
                text="The export job streams rows in batches of 500; it never loads a table whole.",
                source={"path": "src/export.py", "line": 40},
            )  # fmt: skip
            say(f"A  memory_write decision -> {decision['id']} revision {decision['revision']}")
            say(f"   (first call, daemon started: {time.monotonic() - started:.1f} s)")
            handoff = await _call(
                a, "memory_handoff", done="Rewrote the export job to stream.",
                next_steps=["add a progress bar", "benchmark 1M rows"], warnings=["the old export test loads 2 GB"],
            )  # fmt: skip
            say(f"A  memory_handoff -> {handoff['id']}")

            boot = await _call(b, "memory_boot", task="benchmark the export job", budget_tokens=600)
            got = {item["id"] for item in boot["items"]}
            ok = decision["id"] in got and boot["handoff_id"] == handoff["id"]
            say(f"B  memory_boot ({boot['tokens']} of {boot['budget_tokens']} tokens): handoff and decision "
                f"{'received' if ok else 'MISSING'}")  # fmt: skip
            for line in boot["text"].splitlines():
                say(f"   | {line}")
            refined = await _call(
                b, "memory_update", id=decision["id"], expected_revision=1,
                text="The export job streams rows in batches of 500 (measured best); it never loads a table whole.",
            )  # fmt: skip
            say(f"B  memory_update -> revision {refined['revision']}")

            stale = await a.call_tool("memory_forget", {"id": decision["id"], "expected_revision": 1})
            refused = stale.is_error and "expected 1, current 2" in _text(stale)
            say(f"A  memory_forget with revision 1 -> {'refused' if refused else 'NOT REFUSED'}: {_text(stale)}")

            new = await _call(
                b, "memory_supersede", id=decision["id"], expected_revision=2,
                text="The export job streams rows in batches of 2,000: 500 was slower at 1M rows.",
            )  # fmt: skip
            say(f"B  memory_supersede -> {new['id']} replaces {new['replaced']}")
            old = await _call(a, "memory_get", id=decision["id"])
            kept = old["status"] == "superseded" and [h["revision"] for h in old["history"]] == [1, 2]
            say(f"A  memory_get old -> {old['status']}, superseded by {old['superseded_by']}, "
                f"revisions {[h['revision'] for h in old['history']]} kept")  # fmt: skip
        await asyncio.to_thread(stop_daemon, data_dir)  # it waits: off the loop
        say("daemon stopped; reconnecting")
        async with Client(_server(root, "agent-c")) as c:
            after = await _call(c, "memory_boot", task="export job", budget_tokens=600)
            still = await _call(c, "memory_get", id=decision["id"])
            survived = new["id"] in {i["id"] for i in after["items"]} and still["status"] == "superseded"
            survived = survived and after["handoff_id"] == handoff["id"] and decision["id"] not in after["text"]
            say(
                f"C  memory_boot after restart -> new decision and handoff {'there' if survived else 'MISSING'}, "
                "the superseded one left out"
            )
    finally:
        await asyncio.to_thread(stop_daemon, data_dir)  # it waits: off the loop
    passed = ok and refused and kept and survived
    say("handoff demo: every step held" if passed else "handoff demo: a step FAILED")
    return 0 if passed else 1


def main() -> int:
    return asyncio.run(run_agents_demo())
