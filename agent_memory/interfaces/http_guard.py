"""The HTTP API's error shape (`error_body`, and `errors()` declaring it in the OpenAPI schema) and its outer
layers, as ASGI middleware: what is refused before the app sees a request, and what becomes of an error nothing
else answered.

`RequestGuard` checks the bearer token from the headers alone, before one byte of the body is read (401
`unauthorized`, constant time), then reads the body itself, counting it as it arrives: a Content-Length over
`max_body_bytes` is 413 `body_too_large` at once, unread; a streamed body is cut off with 413 when it passes the
cap; a body not all arrived within `body_timeout` of the headers is 408 `body_timeout`. Both close the
connection. Only then does the app get the request, its body replayed from memory. `CatchAll` turns an
exception no handler took into the error response `on_error` makes of it (500 `internal_error`, logged).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PUBLIC_PATHS = frozenset({"/health", "/openapi.json"})
"""The paths that need no token; every other one does, a path no route serves included."""
GUARD_CODES = {401: "unauthorized", 408: "body_timeout", 413: "body_too_large"}
"""The codes the guard answers with, before the app is called."""
UNAUTHORIZED = "A valid bearer token is required (Authorization: Bearer <data_dir/api_token>)"


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one error shape; `details` only where an error has fields a client acts on (a revision conflict's two
    revisions, a duplicate turn's key). A lone surrogate in the message (a client's value quoted back) is escaped: the body is UTF-8 and
    could not hold it."""
    shown = message.encode("utf-8", "backslashreplace").decode("utf-8")
    error: dict[str, Any] = {"code": code, "message": shown}
    return {"error": error | {"details": details}} if details else {"error": error}


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] | None = None
    """Only on some errors: revision_conflict has {memory_id, expected, current}, duplicate_turn {namespace,
    session_id, turn_number}."""


class ErrorBody(BaseModel):
    """Every error answer: `{"error": {"code", "message"}}`."""

    error: ErrorDetail


WHY = {
    400: "Input the memory rejected, or a body that is not JSON (malformed_json, invalid_input, ...)",
    401: "No bearer token, or not this daemon's (unauthorized)",
    404: "No such memory, or no such route (not_found)",
    408: "The body did not all arrive within serve.body_timeout (body_timeout)",
    409: "This turn was already processed (duplicate_turn), or the memory changed since it was read "
    "(revision_conflict, with details.expected and details.current) or was replaced (not_current)",
    413: "The body is over serve.max_body_bytes (body_too_large)",
    422: "JSON of the wrong shape, or a value out of range (invalid_request)",
    500: "An engine or model failed, or an unexpected error (storage_error, model_error, internal_error)",
    503: "The store is closing (closed)",
}


def errors(*statuses: int, by_ref: bool = False) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of these error statuses, each with the error body's schema. `by_ref` names the
    schema as JSON for a route whose own answer is not (FastAPI would give the error its media type)."""
    if by_ref:
        content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        return {status: {"description": WHY[status], "content": content} for status in statuses}
    return {status: {"model": ErrorBody, "description": WHY[status]} for status in statuses}


SHAPES: dict[str, dict[str, Any]] = {
    "object": {"type": "object", "additionalProperties": True},
    "array": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
}


def answers(shape: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of a route that answers with a Response of its own (wire.answer): its 200 as a JSON
    object or array, which FastAPI cannot infer from the annotation, then these error statuses."""
    ok = {"description": "Successful Response", "content": {"application/json": {"schema": SHAPES[shape]}}}
    return {200: ok, **errors(*statuses)}


def token_matches(authorization: str | None, expected: bytes) -> bool:
    """Whether an Authorization header value is `Bearer <expected>`, compared in constant time."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.encode("latin-1"), expected)  # the header's own bytes (Headers: latin-1)


class _TooLarge(Exception):
    pass


class _Gone(Exception):
    """The client disconnected before its body was all sent."""


class RequestGuard:
    """The token first, then the body, capped in size and time; see the module's docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        max_body_bytes: int,
        body_timeout: timedelta,
        public: Collection[str] = PUBLIC_PATHS,
    ) -> None:
        self.app, self.expected, self.public = app, token.encode(), frozenset(public)
        self.max_body_bytes, self.body_timeout = max_body_bytes, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["path"] not in self.public and not token_matches(headers.get("authorization"), self.expected):
            closing = _may_have_body(headers)
            await _refuse(scope, send, 401, UNAUTHORIZED, close=closing, bearer=True)
            return
        length = _content_length(headers)
        if length is not None and length > self.max_body_bytes:
            message = f"The request body is {length} bytes, over serve.max_body_bytes ({self.max_body_bytes} bytes)"
            await _refuse(scope, send, 413, message, close=True)
            return
        try:
            async with asyncio.timeout(self.body_timeout.total_seconds()):
                body = await self._read(receive)
        except TimeoutError:
            seconds = self.body_timeout.total_seconds()
            message = f"The request body did not all arrive within serve.body_timeout ({seconds:g} s)"
            await _refuse(scope, send, 408, message, close=True)
            return
        except _TooLarge:
            message = f"The request body passed serve.max_body_bytes ({self.max_body_bytes} bytes) and was cut off"
            await _refuse(scope, send, 413, message, close=True)
            return
        except _Gone:
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _content_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


def _may_have_body(headers: Headers) -> bool:
    return "transfer-encoding" in headers or (_content_length(headers) or 0) > 0


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body, already read, as one message; then the client's own messages (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _refuse(scope: Scope, send: Send, status: int, message: str, *, close: bool, bearer: bool = False) -> None:
    """An error answer sent before the app was called. `close` ends the connection after it (a body that was not
    read, or not all of it, cannot be skipped on a kept-alive connection)."""
    headers = {"WWW-Authenticate": "Bearer"} if bearer else {}
    if close:
        headers["Connection"] = "close"
    response = JSONResponse(error_body(GUARD_CODES[status], message), status_code=status, headers=headers)

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, nothing, send)


class CatchAll:
    """Anything no handler took becomes `on_error(exc)` (a 500 internal_error, logged), not a bare text page and a
    raised error; once the answer has started, the error is raised for the server to close the connection."""

    def __init__(self, app: ASGIApp, *, on_error: Callable[[Exception], Response]) -> None:
        self.app, self.on_error = app, on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started or scope["type"] != "http":
                raise
            await self.on_error(exc)(scope, receive, send)
