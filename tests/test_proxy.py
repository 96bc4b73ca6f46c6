"""The memory proxy (issue #21) through the official `openai` client: the proxy served by uvicorn on a loopback
port, a client of the daemon's real HTTP app over a real MemoryManager (in process, through httpx's ASGI
transport), forwarding through litellm to a real local OpenAI-compatible server (agent_memory/bench/chat_server.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from agent_memory.bench.chat_server import ChatServer, Failure, prompt_text
from agent_memory.interfaces.client import DaemonClient
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.proxy import MemoryProxy, create_proxy_app, namespace_for
from agent_memory.llm.chat import ChatModel
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.runtime.prompt import SYSTEM_INSTRUCTION

TOKEN = "proxy-test-token"
ANSWER = "Biscuit is a beagle, and thunder frightens him."


@pytest.fixture
def upstream() -> Iterator[ChatServer]:
    with ChatServer(lambda request: ANSWER, name="upstream") as running:
        yield running


@contextlib.asynccontextmanager
async def proxy_at(manager: MemoryManager, upstream: ChatServer) -> AsyncIterator[str]:
    """The proxy's base URL while it serves; its daemon is the daemon's app over `manager`."""
    daemon = DaemonClient("http://daemon", TOKEN, transport=httpx.ASGITransport(create_app(manager, token=TOKEN)))
    model = ChatModel("openai/upstream-model", **upstream.model_options())
    app = create_proxy_app(MemoryProxy(daemon, model, TOKEN))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound here, so the port is known at once; connections wait in its backlog
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        await serving
        await daemon.aclose()
        await model.aclose()


async def seed(manager: MemoryManager, text: str, namespace: str = "default") -> str:
    (result,) = await manager.process_turns([TurnInput("old", 0, text, namespace=namespace)])
    await manager.flush()
    assert result.memory_id
    return str(result.memory_id)


async def turns(manager: MemoryManager) -> int:
    count: int = (await manager.stats())["records"]["turns"]
    return count


MESSAGES: list[Any] = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is my dog Biscuit afraid of?"},
]


async def test_a_completion_gets_memory_and_returns_the_upstream_answer_unchanged(
    manager: MemoryManager, upstream: ChatServer
) -> None:
    dog = await seed(manager, "My dog Biscuit is a beagle who hides under the bed when there is thunder.", "alice")
    async with proxy_at(manager, upstream) as base_url, openai.AsyncOpenAI(base_url=base_url, api_key=TOKEN) as client:
        raw = await client.chat.completions.with_raw_response.create(model="any", messages=MESSAGES, user="alice")
        completion = raw.parse()
        other = await client.chat.completions.with_raw_response.create(model="any", messages=MESSAGES, user="bob")
    assert completion.choices[0].message.content == ANSWER
    assert completion.model == "upstream-model"
    assert dog in raw.headers["x-agent-memory-ids"].split(",")
    assert other.headers["x-agent-memory-ids"] == ""  # bob's namespace holds nothing
    sent = upstream.requests[0]["messages"]
    assert sent[0] == MESSAGES[0]  # the agent's own instructions stay first
    assert sent[1]["role"] == "system" and sent[1]["content"].startswith(SYSTEM_INSTRUCTION)
    assert "hides under the bed" in sent[1]["content"] and sent[-1] == MESSAGES[-1]
    assert await turns(manager) == 1 + 2 + 2  # the seed, then both turns of each request
    assert upstream.headers[0]["authorization"] == "Bearer upstream-key"  # the daemon's token is not forwarded


async def test_a_streamed_completion_is_the_upstreams_chunks_and_is_recorded(
    manager: MemoryManager, upstream: ChatServer
) -> None:
    dog = await seed(manager, "My dog Biscuit is a beagle who hides under the bed when there is thunder.")
    async with proxy_at(manager, upstream) as base_url, openai.AsyncOpenAI(base_url=base_url, api_key=TOKEN) as client:
        raw = await client.chat.completions.with_raw_response.create(model="any", messages=MESSAGES, stream=True)
        said = [chunk.choices[0].delta.content or "" async for chunk in raw.parse() if chunk.choices]
    assert "".join(said) == ANSWER and len(said) > 2
    assert dog in raw.headers["x-agent-memory-ids"].split(",")
    assert upstream.requests[0]["stream"] is True
    assert "hides under the bed" in prompt_text(upstream.requests[0])
    assert await turns(manager) == 3


async def test_a_bad_token_is_401_and_bad_json_is_400_in_openais_error_shape(
    manager: MemoryManager, upstream: ChatServer
) -> None:
    async with proxy_at(manager, upstream) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="not-the-token", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError) as refused:
                await client.chat.completions.create(model="any", messages=MESSAGES)
        async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            broken = await http.post("/chat/completions", content=b'{"messages": [', headers={"content-type": "x"})
            shapeless = await http.post("/chat/completions", json={"model": "any", "messages": []})
            nowhere = await http.get("/nowhere")
    assert refused.value.status_code == 401 and "token" in refused.value.message
    assert broken.status_code == 400
    assert (
        broken.json()["error"]["type"] == "invalid_request_error" and broken.json()["error"]["code"] == "invalid_json"
    )
    assert "not JSON" in broken.json()["error"]["message"]
    assert shapeless.status_code == 400 and shapeless.json()["error"]["code"] == "invalid_messages"
    assert nowhere.status_code == 404 and "chat/completions" in nowhere.json()["error"]["message"]
    assert upstream.requests == [] and await turns(manager) == 0


async def test_an_upstream_failure_is_a_502_error_and_nothing_is_recorded(
    manager: MemoryManager, upstream: ChatServer
) -> None:
    upstream.responder = lambda request: Failure(503, "the upstream is overloaded")
    async with (
        proxy_at(manager, upstream) as url,
        openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as client,
    ):
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(model="any", messages=MESSAGES)
        with pytest.raises(openai.APIStatusError) as failed_stream:
            await client.chat.completions.create(model="any", messages=MESSAGES, stream=True)
    for error in (failed.value, failed_stream.value):
        assert error.status_code == 502 and "the upstream is overloaded" in error.message
        assert "upstream-key" not in error.message
    assert await turns(manager) == 0


def test_a_user_that_is_not_an_identifier_is_hashed_into_a_namespace() -> None:
    assert namespace_for("alice") == "alice"
    hashed = namespace_for("Alice Smith <alice@example.com>")
    assert hashed.startswith("user-") and hashed == namespace_for("Alice Smith <alice@example.com>")
