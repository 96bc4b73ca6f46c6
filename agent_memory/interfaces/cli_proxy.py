"""`agent-memory proxy` (the OpenAI-compatible memory proxy, interfaces/proxy.py) and `agent-memory chat` (a
terminal chat with memory, runtime/agent.py).

Light at import, as every CLI module: litellm, the engines and the server are imported when a command runs. A
model's key is never an argument (a command line is visible to every user of the machine): litellm reads the
provider's own variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...), or `--api-key-env NAME` names the variable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agent_memory.config import Config
from agent_memory.errors import ConfigError, DaemonUnreachable
from agent_memory.models import Context, FactDecision, TurnInput

if TYPE_CHECKING:
    from agent_memory.interfaces.client import DaemonClient
    from agent_memory.runtime.agent import ChatTurn
    from agent_memory.runtime.turns import MemoryBackend, Processed


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """litellm's connection options from the command line: --api-base, and the key from --api-key-env's variable."""
    options: dict[str, Any] = {}
    if args.api_base:
        options["api_base"] = args.api_base
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ConfigError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
        options["api_key"] = key
    return options


class DaemonMemory:
    """The daemon of `data_dir` for the proxy, found (or started) again when it died: a read that could not reach
    it is sent once more to the new one. A write whose answer was lost is not (it may have been applied)."""

    def __init__(self, data_dir: Path, *, config_path: Path | None, start: bool) -> None:
        self.data_dir, self.config_path, self.start = data_dir, config_path, start
        self._client: DaemonClient | None = None

    async def connect(self) -> DaemonClient:
        from agent_memory.interfaces.autostart import daemon_client

        if self._client is None:
            self._client = await daemon_client(self.data_dir, start=self.start, config_path=self.config_path)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def context(self, query: str, *, budget_tokens: int = 2048, namespace: str = "default") -> Context:
        try:
            return await (await self.connect()).context(query, budget_tokens=budget_tokens, namespace=namespace)
        except DaemonUnreachable:
            await self.aclose()
            return await (await self.connect()).context(query, budget_tokens=budget_tokens, namespace=namespace)

    async def process_turns(self, turns: Sequence[TurnInput], *, bulk: bool = False) -> Sequence[Processed]:
        return await (await self.connect()).process_turns(turns, bulk=bulk)

    async def prepare_turns(self, texts: Sequence[str], *, bulk: bool = False) -> None:
        await (await self.connect()).prepare_turns(texts, bulk=bulk)

    async def observe_facts(self, turn_ids: Sequence[str]) -> list[FactDecision]:
        return await (await self.connect()).observe_facts(turn_ids)  # once per turn: safe to send again, too


async def cmd_proxy(config: Config, args: argparse.Namespace) -> int:
    from agent_memory.interfaces.proxy import MemoryProxy, serve_proxy
    from agent_memory.interfaces.token import read_token
    from agent_memory.llm.chat import ChatModel
    from agent_memory.validation import check_identifier

    check_identifier("namespace", args.namespace)
    upstream = ChatModel(args.upstream, **model_options(args))
    memory = DaemonMemory(config.data_dir, config_path=args.config, start=not args.no_start)
    try:
        await memory.connect()  # the daemon first: its token must exist
        proxy = MemoryProxy(
            memory, upstream, read_token(config.data_dir), namespace=args.namespace, record_first=args.record_first
        )
        proxy.memory_tokens = args.memory_tokens
        await serve_proxy(proxy, port=args.port)
    finally:
        await memory.aclose()
        await upstream.aclose()
    return 0


async def cmd_chat(config: Config, args: argparse.Namespace) -> int:
    from agent_memory.interfaces.routing import open_store
    from agent_memory.runtime.agent import AgentRuntime
    from agent_memory.runtime.messages import WindowConfig
    from agent_memory.validation import check_identifier

    check_identifier("namespace", args.namespace)
    session = args.session or "chat-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    window = WindowConfig(limit_tokens=args.window_tokens)
    async with open_store(config) as store:
        memory = cast("MemoryBackend", store)  # a MemoryManager or a DaemonClient: both answer observe_facts too
        runtime = AgentRuntime(memory, args.model, window, memory_tokens=args.memory_tokens, **model_options(args))
        async with runtime:
            _say(f"agent-memory chat: {args.model}, session {session}, namespace {args.namespace} (/quit or ^D ends)")
            while (line := await asyncio.to_thread(_read_line)) is not None:
                if not line.strip():
                    continue
                if line.strip() in {"/quit", "/exit"}:
                    break
                turn = await runtime.chat(session, line.strip(), namespace=args.namespace)
                sys.stdout.write(turn.answer + "\n")
                sys.stdout.flush()
                _say(used_line(turn))
    return 0


def used_line(turn: ChatTurn) -> str:
    """One line of what the turn used: memories, facts, the window's fit, the policy's fact actions, time."""
    after = turn.window_after
    evicted = f"summarised {len(after.summarised)}, filtered {len(after.filtered)}, dropped {len(after.dropped)}"
    facts = "; ".join(turn.facts) or "none"
    actions = ", ".join(f"{d.action} {d.subject}" for d in turn.decisions if d.kind == "fact")
    spent = sum(t.total_seconds() for t in turn.timings.values()) * 1000
    parts = [
        f"memories {len(turn.memory_ids)}: {', '.join(turn.memory_ids) or '-'}",
        f"facts: {facts}",
        f"window {turn.tokens.window}/{after.limit} tok ({evicted})",
    ]
    parts += [f"new facts: {actions}"] if actions else []
    parts += [f"{spent:.0f} ms"] + [f"warning: {w}" for w in turn.warnings]
    return "  [" + " | ".join(parts) + "]"


def _read_line() -> str | None:
    if sys.stdin.isatty():
        sys.stderr.write("> ")
        sys.stderr.flush()
    line = sys.stdin.readline()
    return line if line else None


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
