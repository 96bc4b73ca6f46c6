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
async def proxy_at(manager: MemoryManager, upstream: ChatServer, **options: Any) -> AsyncIterator[str]:
    """The proxy's base URL while it serves; its daemon is the daemon's app over `manager`. On leaving, it has
    recorded every answer it gave (drain, as serve_proxy does)."""
    async with serving_proxy(manager, upstream, **options) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def serving_proxy(
    manager: MemoryManager, upstream: ChatServer, **options: Any
) -> AsyncIterator[tuple[str, MemoryProxy]]:
    daemon = DaemonClient("http://daemon", TOKEN, transport=httpx.ASGITransport(create_app(manager, token=TOKEN)))
    model = ChatModel("openai/upstream-model", **upstream.model_options())
    proxy = MemoryProxy(daemon, model, TOKEN, **options)
    app = create_proxy_app(proxy)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound here, so the port is known at once; connections wait in its backlog
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", proxy
    finally:
        server.should_exit = True
        await serving
        await proxy.drain()
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


async def session_turns(manager: MemoryManager, session_id: str) -> list[tuple[int, str, str]]:
    """The session's turns in turn order: number, role and the words the log holds."""
    rows = await manager.records._fetch(
        "SELECT turn_id, turn_number, role FROM turns WHERE session_id = ? ORDER BY turn_number", (session_id,)
    )
    return [(int(n), str(role), (await manager.read_turn(turn_id)).content) for turn_id, n, role in rows]


async def test_a_sessions_exchanges_recorded_behind_the_answers_keep_their_order(
    manager: MemoryManager, upstream: ChatServer
) -> None:
    """Recorded behind the answer (the default): four questions of one conversation, sent back to back, come back
    answered; once the proxy has drained, the session holds each question and its answer, in the order asked."""
    upstream.responder = lambda request: f"You said: {prompt_text(request).splitlines()[-1][-30:]}"
    headers = {"x-agent-memory-session": "one-conversation"}
    asked = [f"Question number {n}: what did I plant in bed {n}?" for n in range(4)]
    async with serving_proxy(manager, upstream) as (url, proxy):
        async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, default_headers=headers) as client:
            answers = []
            for question in asked:
                messages = [{"role": "user", "content": question}]
                completion = await client.chat.completions.create(model="any", messages=messages)
                answers.append(completion.choices[0].message.content)
        await proxy.drain()
        assert not proxy._behind  # nothing is left waiting once drained
    recorded = await session_turns(manager, "one-conversation")
    assert [(role, text) for _, role, text in recorded] == [
        pair
        for question, answer in zip(asked, answers, strict=True)
        for pair in (("user", question), ("assistant", answer))
    ]
    assert [n for n, _, _ in recorded] == sorted(n for n, _, _ in recorded)


async def test_with_record_first_a_failed_recording_is_the_warning_header_and_behind_it_is_logged(
    manager: MemoryManager, upstream: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The answer stands either way. An answer over max_turn_bytes (8 MiB) cannot be recorded: with record_first
    the response says so in x-agent-memory-warning; recorded behind the answer, the failure is logged."""
    huge = "thunder " * (9 * 1024 * 1024 // 8)  # 9 MiB
    upstream.responder = lambda request: huge
    for record_first in (True, False):
        async with serving_proxy(manager, upstream, record_first=record_first) as (url, proxy):
            async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as client:
                raw = await client.chat.completions.with_raw_response.create(model="any", messages=MESSAGES)
            await proxy.drain()
        assert raw.parse().choices[0].message.content == huge
        if record_first:
            assert "the turns were not recorded" in raw.headers["x-agent-memory-warning"]
        else:
            assert "x-agent-memory-warning" not in raw.headers
            assert any("the turns were not recorded" in r.getMessage() for r in caplog.records)
    assert await turns(manager) == 0
