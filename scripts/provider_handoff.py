"""A fact told to one provider is recalled and used through another: two local OpenAI-compatible servers stand for
two providers ("alpha", say a local Ollama model, and "beta", say a hosted one), over one agent-memory store.

    python scripts/provider_handoff.py [--data-dir DIR]

1. The runtime (AgentRuntime over a MemoryManager in this process): the user tells alpha where they live and where
   they work; in a new session beta is asked, and beta's server answers from what it was shown (it reads its own
   prompt: no model, no network), so the answer is right only if the memory reached it.
2. The memory proxy: a daemon is started for the store (autostart.py), and two proxies, one per provider, are
   clients of it; an OpenAI-style request through alpha's proxy states a fact, one through beta's asks for it.

Exits 1 when a step does not hold. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from agent_memory.bench.chat_server import ChatServer, last_user_text, prompt_text
from agent_memory.config import load_config
from agent_memory.interfaces.autostart import stop_daemon
from agent_memory.interfaces.cli_proxy import DaemonMemory
from agent_memory.interfaces.proxy import MemoryProxy, create_proxy_app
from agent_memory.interfaces.token import read_token
from agent_memory.llm.chat import ChatModel
from agent_memory.manager import MemoryManager
from agent_memory.runtime.agent import AgentRuntime

FACTS = {"live": "Lisbon", "work": "Initech"}


def alpha(request: dict[str, Any]) -> str:
    return "Noted!"


def beta(request: dict[str, Any]) -> str:
    """Answers from its prompt alone: the place the user lives or works in, if the memory put it there."""
    asked, shown = last_user_text(request), prompt_text(request)
    for verb, value in FACTS.items():
        if verb in asked:
            return f"You {verb} in {value}." if value in shown else f"I do not know where you {verb}."
    return "I do not know."


def check(ok: bool, what: str) -> bool:
    print(("  ok    " if ok else "  FAIL  ") + what)
    return ok


async def through_the_runtime(data_dir: Path, one: ChatServer, two: ChatServer) -> bool:
    print("1. the runtime: told to alpha, asked of beta")
    config = load_config(data_dir=str(data_dir))
    async with MemoryManager.open(config) as memory:
        async with AgentRuntime(memory, "openai/alpha", **one.model_options()) as first:
            told = await first.chat("monday", "I live in Lisbon now, near the river.")
            print(f"  alpha heard it; decisions: {'; '.join(str(d) for d in told.decisions if d.kind == 'fact')}")
        async with AgentRuntime(memory, "openai/beta", **two.model_options()) as second:
            asked = await second.chat("friday", "Where do I live?")
            print(f"  beta answered {asked.answer!r} with facts {list(asked.facts)}")
    return check(asked.answer == "You live in Lisbon.", "beta used what alpha was told") & check(
        all("Where do I live?" not in prompt_text(r) for r in one.requests), "alpha was never asked"
    )


@contextlib.asynccontextmanager
async def proxy_for(memory: DaemonMemory, server: ChatServer, token: str) -> AsyncIterator[tuple[str, MemoryProxy]]:
    model = ChatModel(f"openai/{server.name}", **server.model_options())
    proxy = MemoryProxy(memory, model, token)
    app = create_proxy_app(proxy)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", proxy
    finally:
        uv.should_exit = True
        await serving
        await proxy.drain()
        await model.aclose()


async def ask(url: str, token: str, text: str) -> tuple[str, str]:
    body = {"model": "any", "messages": [{"role": "user", "content": text}], "user": "sam"}
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"})
    answer.raise_for_status()
    return answer.json()["choices"][0]["message"]["content"], answer.headers.get("x-agent-memory-facts", "")


async def through_the_proxy(data_dir: Path, one: ChatServer, two: ChatServer) -> bool:
    print("2. the proxy: a daemon for the store, one proxy per provider")
    memory = DaemonMemory(data_dir, config_path=None, start=True)
    try:
        await memory.connect()
        token = read_token(data_dir)
        async with proxy_for(memory, one, token) as (first, alpha_proxy), proxy_for(memory, two, token) as (second, _):
            await ask(first, token, "I work at Initech.")
            await alpha_proxy.drain()  # the proxy records behind its answers: the user turns to beta after that
            answer, facts = await ask(second, token, "Where do I work?")
            print(f"  beta's proxy answered {answer!r}, facts sent: {facts or '-'}")
    finally:
        await memory.aclose()
        await asyncio.to_thread(stop_daemon, data_dir)
    return check(answer == "You work in Initech.", "beta, through its proxy, used what alpha's proxy recorded")


async def run(data_dir: Path) -> int:
    with ChatServer(alpha, name="alpha") as one, ChatServer(beta, name="beta") as two:
        ok = await through_the_runtime(data_dir / "runtime", one, two)
        ok &= await through_the_proxy(data_dir / "proxy", one, two)
    print("provider handoff: " + ("every step held" if ok else "a step did not hold"))
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, help="where the two stores go (default: a temporary folder)")
    args = parser.parse_args()
    if args.data_dir is not None:
        return asyncio.run(run(args.data_dir))
    with tempfile.TemporaryDirectory(prefix="provider-handoff-") as root:
        return asyncio.run(run(Path(root)))


if __name__ == "__main__":
    sys.exit(main())
