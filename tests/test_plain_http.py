"""The daemon client's plain-HTTP transport (interfaces/plain_http.py) against small asyncio servers on 127.0.0.1:
sized and chunked bodies, request bodies, timeouts, refused connections and answers cut short, each failure as the
httpx transport error the default transport would raise. The real daemon path is covered by test_cli_daemon.py."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from agent_memory.errors import DaemonUnreachable
from agent_memory.interfaces.client import DaemonClient
from agent_memory.interfaces.plain_http import PlainHttpTransport, transport_for

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def server(handle: Handler) -> AsyncIterator[str]:
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.close()
        await srv.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    return head, await reader.readexactly(length)


def client(url: str, seconds: float = 5.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, transport=PlainHttpTransport(), timeout=seconds)


async def test_a_sized_answer_and_the_request_body_arrive_whole() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, body = await read_request(reader)
        seen.append((head, body))
        answer = json.dumps({"echo": json.loads(body)}).encode()
        writer.write(
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(answer)
        )
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with server(handle) as url, client(url) as http:
        response = await http.post("/v1/x?a=1", json={"q": "é" * 3})
    assert response.status_code == 201 and response.json() == {"echo": {"q": "ééé"}}
    assert response.reason_phrase == "Created" and response.http_version == "HTTP/1.1"
    head = seen[0][0].lower()
    assert head.startswith(b"post /v1/x?a=1 http/1.1\r\n") and b"\r\nconnection: close\r\n" in head
    assert b"\r\nhost: 127.0.0.1:" in head


async def test_a_chunked_answer_is_streamed_in_pieces() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for line in (b'{"n": 1}\n', b'{"n": 2}\n'):
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with server(handle) as url, client(url) as http, http.stream("GET", "/export") as response:
        chunks = [chunk async for chunk in response.aiter_bytes()]
    assert b"".join(chunks) == b'{"n": 1}\n{"n": 2}\n' and len(chunks) >= 2


async def test_an_answer_that_never_comes_is_a_read_timeout() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(10)

    async with server(handle) as url, client(url, seconds=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/health")


async def test_an_answer_cut_short_is_a_protocol_error() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a little")
        await writer.drain()
        writer.close()

    async with server(handle) as url, client(url) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/v1/stats")


async def test_a_refused_connection_is_a_connect_error_and_the_client_names_the_daemon() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    async with client(url) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get("/health")
    async with DaemonClient(url, "t") as daemon:
        with pytest.raises(DaemonUnreachable, match=f"127.0.0.1:{port}"):
            await daemon.health()


def test_only_plain_http_urls_get_it() -> None:
    assert isinstance(transport_for("http://127.0.0.1:8765"), PlainHttpTransport)
    assert transport_for("https://memory.example") is None
