"""`PlainHttpTransport`: HTTP/1.1 without TLS over asyncio streams (h11), the transport `DaemonClient` talks through.

The daemon serves plain HTTP, almost always on 127.0.0.1, so its client needs neither TLS nor a connection pool.
httpx's default transport builds both for every client: httpcore (which imports h2 whenever it is installed), anyio
for the pool's locks, and an SSL context that loads certifi's CA bundle. That is about 0.1 s of the 0.5 s a one-shot
CLI command through a running daemon may take (issue #23). This transport opens one connection per request and
closes it with the response (`Connection: close`; on loopback a connection costs a fraction of a millisecond).

The request's timeouts apply as httpx's own would (connect, write, read; None waits without limit), and every
failure is raised as httpx's transport error of the same kind (`ConnectError`, `ReadTimeout`, `RemoteProtocolError`,
...), so a caller catching `httpx.TransportError` sees what it saw with the default transport.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

READ_SIZE = 64 * 1024


def transport_for(url: str) -> httpx.AsyncBaseTransport | None:
    """This transport for an `http://` URL; None (httpx's default, with TLS) for any other."""
    return PlainHttpTransport() if url.startswith("http://") else None


class PlainHttpTransport(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"Only plain http:// is served here, not {request.url}", request=request)
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        connection = await _Connection.open(request, timeouts.get("connect"))
        try:
            await connection.send_request(timeouts.get("write"))
            head = await connection.response_head(timeouts.get("read"))
        except BaseException:
            await connection.aclose()
            raise
        return httpx.Response(
            head.status_code,
            headers=head.headers,
            stream=_Body(connection, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )


class _Connection:
    """One request and its response on one TCP connection, through an h11 state machine."""

    def __init__(self, request: httpx.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.request, self._reader, self._writer = request, reader, writer
        self._h11 = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, request: httpx.Request, within: float | None) -> _Connection:
        host, port = request.url.host, request.url.port or 80
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), within)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"Connecting to {host}:{port} took over {within} s", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return cls(request, reader, writer)

    async def send_request(self, within: float | None) -> None:
        request = self.request
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"connection"] + [(b"Connection", b"close")]
        await self._send(h11.Request(method=request.method, target=request.url.raw_path, headers=headers), within)
        assert isinstance(request.stream, httpx.AsyncByteStream)
        async for chunk in request.stream:
            await self._send(h11.Data(data=chunk), within)
        await self._send(h11.EndOfMessage(), within)

    async def response_head(self, within: float | None) -> h11.Response:
        while True:
            event = await self.next_event(within)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):  # a 1xx is skipped, anything else is wrong
                raise httpx.RemoteProtocolError(f"Expected a response, got {event!r}", request=self.request)

    async def next_event(self, within: float | None) -> Any:
        """The next h11 event of the response, reading from the socket as h11 needs more bytes."""
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=self.request) from exc
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await asyncio.wait_for(self._reader.read(READ_SIZE), within)
            except TimeoutError as exc:
                raise httpx.ReadTimeout(f"No answer within {within} s", request=self.request) from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=self.request) from exc
            self._h11.receive_data(data)  # b"": the server closed the connection

    async def _send(self, event: Any, within: float | None) -> None:
        try:
            data = self._h11.send(event)
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc), request=self.request) from exc
        if not data:
            return
        try:
            self._writer.write(data)
            await asyncio.wait_for(self._writer.drain(), within)
        except TimeoutError as exc:
            raise httpx.WriteTimeout(f"Sending took over {within} s", request=self.request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=self.request) from exc

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


class _Body(httpx.AsyncByteStream):
    """The response body as it arrives (chunked or sized: h11 decodes both); closing it closes the connection."""

    def __init__(self, connection: _Connection, timeout: float | None) -> None:
        self._connection, self._timeout = connection, timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._connection.next_event(self._timeout)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def aclose(self) -> None:
        await self._connection.aclose()
