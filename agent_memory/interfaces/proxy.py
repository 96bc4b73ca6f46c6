"""`agent-memory proxy`: an OpenAI-compatible `/v1/chat/completions` that gives any OpenAI-client agent memory.

Point the agent's base URL at the proxy (and its API key at the daemon's token, data_dir/api_token): for each
request the proxy retrieves what the memory holds for the last user message, puts it in the request as one system
message (the runtime's instruction and the memory fenced as data, runtime/prompt.py) after the agent's own system
messages, forwards the request through litellm to the upstream model, records the user's message and the answer
as two turns, runs the facts' policy step on them, and returns the upstream's answer unchanged, whole or streamed.
The ids of the memories it sent are in the `x-agent-memory-ids` header (the facts' in `x-agent-memory-facts`).

It is a client of the daemon (autostart.py finds it, or starts one): it never opens the engines. Whose memory a
request reads is its `user` field, or the `x-agent-memory-user` header, as a namespace (a value that is not an
identifier is hashed into one); neither: the proxy's --namespace. A conversation is a session: the
`x-agent-memory-session` header, else a hash of the namespace and the conversation's first user message.

Every failure is an OpenAI-style error (`{"error": {"message", "type", "param", "code"}}`), never a traceback:
401 without the daemon's token, 400 for a body that is not a chat request, 503 when the memory cannot be read,
502 (504 on a timeout) when the upstream fails; then nothing is recorded. Once the upstream has answered, the
answer is returned whatever fails after it.

The two turns are recorded behind the answer (`record_first=False`, the default): the answer goes back as soon as
the upstream gives it, and the recording, the save decision and the policy step run after it, in order within a
session (a session's exchanges are recorded one after another, in the order their answers came, with the turn
numbers taken then). A failure there is logged. `drain()` waits for what is still being recorded; `serve_proxy`
drains before it returns, so a stopped proxy has recorded every answer it gave; only a killed one can lose the
exchanges of its last moments (the agent holds them in its own transcript). With `record_first=True`
(`agent-memory proxy --record-first`) each answer waits for its recording, and a failure to record is the
`x-agent-memory-warning` header (logged, when streaming).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeAlias

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent_memory.errors import AgentMemoryError, InvalidInput, LLMError, LLMTimeout
from agent_memory.interfaces.http_guard import token_matches
from agent_memory.llm.chat import ChatModel
from agent_memory.runtime.prompt import inject
from agent_memory.runtime.turns import Behind, MemoryBackend, Reads, TurnNumbers, context_ids, record_exchange
from agent_memory.validation import IDENTIFIER

log = logging.getLogger(__name__)
MEMORY_TOKENS = 1024
PASSED = frozenset(
    {
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "presence_penalty",
        "frequency_penalty", "seed", "response_format", "tools", "tool_choice", "parallel_tool_calls", "n",
        "logit_bias", "logprobs", "top_logprobs", "reasoning_effort", "stream_options",
    }
)  # fmt: skip
"""The request's parameters passed on to the upstream (litellm drops those a provider does not take)."""
USER_HEADER, SESSION_HEADER = "x-agent-memory-user", "x-agent-memory-session"
GIVE_WAY, GIVE_WAY_AT_MOST = timedelta(milliseconds=10), timedelta(milliseconds=250)
"""A recording behind an answer waits 10 ms, then for the reads in flight, at most 250 ms (Reads.give_way)."""
IDS_HEADER, FACTS_HEADER, WARNING_HEADER = "x-agent-memory-ids", "x-agent-memory-facts", "x-agent-memory-warning"


class ProxyError(Exception):
    """An OpenAI-style error answer."""

    def __init__(self, status: int, message: str, *, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code

    def response(self) -> JSONResponse:
        body = {"error": {"message": str(self), "type": self.kind, "param": None, "code": self.code}}
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


Prepared: TypeAlias = "asyncio.Task[None] | None"  # the daemon embedding the user's message while the upstream answers


@dataclass(frozen=True, slots=True)
class Asked:
    """A chat request as the proxy reads it."""

    messages: list[dict[str, Any]]
    query: str
    """The last message's text when it is the user's; empty otherwise (a tool result): then no memory is read."""
    namespace: str
    session_id: str
    stream: bool
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoryProxy:
    """The proxy's work over `memory` (a DaemonClient, or anything answering MemoryBackend) and `upstream`."""

    memory: MemoryBackend
    upstream: ChatModel
    token: str
    namespace: str = "default"
    memory_tokens: int = MEMORY_TOKENS
    numbers: TurnNumbers = field(default_factory=TurnNumbers)
    record_first: bool = False
    """Wait for an exchange's recording before answering (its failure is then a header); else record behind."""
    give_way: timedelta = GIVE_WAY
    """How long a recording behind an answer first waits for the next request's read (Reads.give_way)."""
    _behind: Behind = field(default_factory=Behind, init=False, repr=False)
    """The recordings behind the answers, in order within a session."""
    _reads: Reads = field(default_factory=Reads, init=False, repr=False)
    """The memory reads in flight, which the recordings behind the answers give way to."""

    async def completions(self, request: Request) -> Response:
        try:
            if not token_matches(request.headers.get("authorization"), self.token.encode()):
                raise ProxyError(401, UNAUTHORIZED, kind="invalid_request_error", code="invalid_api_key")
            asked = read_request(await request.body(), request.headers, self.namespace)
            messages, headers = await self._with_memory(asked)
            prepared = asyncio.create_task(self._prepare(asked.query)) if asked.query else None
            if asked.stream:
                return await self._streamed(asked, messages, headers, prepared)
            answer = await self._generate(messages, asked.options)
        except ProxyError as exc:
            await _settled(locals().get("prepared"))
            return exc.response()
        except Exception as exc:  # the last resort: an error answer, never a traceback page
            log.exception("the proxy failed on a request")
            await _settled(locals().get("prepared"))
            return ProxyError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error").response()
        if not self.record_first:
            self._record_behind(asked, _content(answer.response), prepared)
            return JSONResponse(answer.response, headers=headers)
        warning = await self._record(asked, _content(answer.response), prepared)
        if warning:
            headers[WARNING_HEADER] = _header_text(warning)
        return JSONResponse(answer.response, headers=headers)

    async def _with_memory(self, asked: Asked) -> tuple[list[dict[str, Any]], dict[str, str]]:
        if not asked.query:
            return asked.messages, {IDS_HEADER: "", FACTS_HEADER: ""}
        try:
            with self._reads.reading():
                context = await self.memory.context(
                    asked.query, budget_tokens=self.memory_tokens, namespace=asked.namespace
                )
        except InvalidInput as exc:
            raise ProxyError(400, str(exc), kind="invalid_request_error", code="invalid_input") from exc
        except AgentMemoryError as exc:
            raise ProxyError(
                503, f"the memory could not be read: {exc}", kind="memory_error", code="memory_unavailable"
            ) from exc
        memory_ids, fact_ids = context_ids(context)
        return inject(asked.messages, context.text), {
            IDS_HEADER: ",".join(memory_ids),
            FACTS_HEADER: ",".join(fact_ids),
        }

    async def _generate(self, messages: list[dict[str, Any]], options: Mapping[str, Any]) -> Any:
        try:
            return await self.upstream.complete(messages, **options)
        except LLMError as exc:
            raise _upstream_error(exc) from exc

    async def _streamed(
        self, asked: Asked, messages: list[dict[str, Any]], headers: dict[str, str], prepared: Prepared
    ) -> Response:
        chunks = self.upstream.stream(messages, **asked.options)
        try:
            first = await anext(chunks)  # a failure before the answer starts is still an error status
        except StopAsyncIteration:
            first = None
        except LLMError as exc:
            raise _upstream_error(exc) from exc
        events = self._events(asked, first, chunks, prepared)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)

    async def _events(
        self, asked: Asked, first: dict[str, Any] | None, chunks: AsyncIterator[dict[str, Any]], prepared: Prepared
    ) -> AsyncIterator[bytes]:
        said: list[str] = []
        try:
            if first is not None:
                said.append(_delta(first))
                yield _event(first)
            async for chunk in chunks:
                said.append(_delta(chunk))
                yield _event(chunk)
        except LLMError as exc:  # the answer broke off: say so in the stream, record nothing
            error = _upstream_error(exc)
            yield _event({"error": {"message": str(error), "type": error.kind, "param": None, "code": error.code}})
            await _settled(prepared)
            return
        if not self.record_first:
            self._record_behind(asked, "".join(said), prepared)
            yield b"data: [DONE]\n\n"
            return
        warning = await self._record(asked, "".join(said), prepared)
        if warning:
            log.warning("%s", warning)
        yield b"data: [DONE]\n\n"

    async def _prepare(self, query: str) -> None:
        """Have the daemon embed the user's message for the write path while the upstream answers (its model thread
        is idle then): the recording that follows finds it ready. Only a speed-up: a failure is logged."""
        try:
            await self.memory.prepare_turns([query])
        except Exception:
            log.debug("the daemon could not embed the message ahead; it does when the turn is recorded", exc_info=True)

    def _record_behind(self, asked: Asked, answer: str, prepared: Prepared) -> None:
        """Record the exchange after the answer has gone: the turn numbers are taken now, in the order the answers
        came, and the session's earlier recording is waited for first, so its turns stay in order."""
        wanted = bool(asked.query and answer.strip())  # a tool round, or an answer with no text: nothing to record
        taken = self.numbers.take(asked.namespace, asked.session_id, 2) if wanted else None
        self._behind.run((asked.namespace, asked.session_id), lambda: self._after(asked, answer, prepared, taken))

    async def _after(self, asked: Asked, answer: str, prepared: Prepared, taken: Sequence[int] | None) -> None:
        await self._reads.give_way(first=self.give_way, most=GIVE_WAY_AT_MOST)
        warning = await self._record(asked, answer, prepared, taken)
        if warning:
            log.warning("session %s: %s", asked.session_id, warning)

    async def drain(self) -> None:
        """Wait until every exchange answered so far is recorded (or its failure logged)."""
        await self._behind.drain()

    async def _record(
        self, asked: Asked, answer: str, prepared: Prepared, taken: Sequence[int] | None = None
    ) -> str | None:
        """Both turns, then the policy step on their facts; what failed, as a warning (the answer stands)."""
        await _settled(prepared)
        if not asked.query or not answer.strip():
            return None  # a tool round or an answer with no text: nothing a person said
        try:
            processed = await record_exchange(
                self.memory, self.numbers, namespace=asked.namespace, session_id=asked.session_id,
                user=asked.query, answer=answer, taken=taken,
            )  # fmt: skip
        except Exception as exc:
            return f"the turns were not recorded: {type(exc).__name__}: {exc}"
        try:
            await self.memory.observe_facts([p.turn_id for p in processed])
        except Exception as exc:
            return f"the turns are recorded, but their facts were not extracted: {type(exc).__name__}: {exc}"
        return None

    async def models(self, request: Request) -> Response:
        if not token_matches(request.headers.get("authorization"), self.token.encode()):
            return ProxyError(401, UNAUTHORIZED, kind="invalid_request_error", code="invalid_api_key").response()
        model = {"id": self.upstream.model, "object": "model", "created": 0, "owned_by": "agent-memory"}
        return JSONResponse({"object": "list", "data": [model]})


UNAUTHORIZED = "A valid API key is required: the agent-memory daemon's token (data_dir/api_token) as the bearer key"


def create_proxy_app(proxy: MemoryProxy) -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "upstream": proxy.upstream.model})

    async def not_found(request: Request, exc: Exception) -> Response:
        message = f"No route {request.method} {request.url.path}: the proxy serves POST /v1/chat/completions"
        return ProxyError(404, message, kind="invalid_request_error", code="not_found").response()

    routes = [
        Route("/v1/chat/completions", proxy.completions, methods=["POST"]),
        Route("/chat/completions", proxy.completions, methods=["POST"]),
        Route("/v1/models", proxy.models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})


async def _settled(prepared: Prepared) -> None:
    """Wait for the request's embedding ahead to end (it never raises), so no task outlives its request."""
    if prepared is not None:
        await prepared


def read_request(body: bytes, headers: Mapping[str, str], default_namespace: str) -> Asked:
    """The chat request in `body`, or a 400 ProxyError that says what is wrong with it."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"The body is not JSON: {exc}", "invalid_json") from None
    if not isinstance(data, dict):
        raise _bad("The body must be a JSON object (an OpenAI chat completions request)", "invalid_request")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise _bad("'messages' must be a non-empty list of message objects", "invalid_messages")
    if not all(isinstance(m.get("role"), str) for m in messages):
        raise _bad("every message needs a 'role'", "invalid_messages")
    last = messages[-1]
    query = _text(last.get("content")).strip() if last["role"] == "user" else ""
    who = headers.get(USER_HEADER) or data.get("user")
    namespace = namespace_for(who) if isinstance(who, str) and who.strip() else default_namespace
    session = headers.get(SESSION_HEADER) or _session(namespace, messages)
    if not IDENTIFIER.match(session):
        raise _bad(f"{SESSION_HEADER} must be an identifier, not {session!r}", "invalid_session")
    options = {k: v for k, v in data.items() if k in PASSED}
    return Asked(messages, query, namespace, session, data.get("stream") is True, options)


def namespace_for(user: str) -> str:
    """The namespace of a request's user: the value itself when it is an identifier, else a stable hash of it."""
    user = user.strip()
    return user if IDENTIFIER.match(user) else "user-" + hashlib.sha256(user.encode()).hexdigest()[:16]


def _session(namespace: str, messages: Sequence[Mapping[str, Any]]) -> str:
    first = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return "proxy-" + hashlib.sha256(f"{namespace}\x00{first}".encode()).hexdigest()[:16]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: the text parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _content(response: Mapping[str, Any]) -> str:
    choices = response.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    return content if isinstance(content, str) else ""


def _delta(chunk: Mapping[str, Any]) -> str:
    choices = chunk.get("choices") or [{}]
    content = (choices[0].get("delta") or {}).get("content")
    return content if isinstance(content, str) and choices[0].get("index", 0) == 0 else ""


def _event(data: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _bad(message: str, code: str) -> ProxyError:
    return ProxyError(400, message, kind="invalid_request_error", code=code)


def _upstream_error(exc: LLMError) -> ProxyError:
    if isinstance(exc, LLMTimeout):
        return ProxyError(504, f"the upstream model timed out: {exc}", kind="upstream_error", code="upstream_timeout")
    return ProxyError(502, f"the upstream model failed: {exc}", kind="upstream_error", code="upstream_failed")


def _header_text(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\n", " ")[:500]


async def serve_proxy(proxy: MemoryProxy, *, port: int) -> None:
    """Serve the proxy on 127.0.0.1:`port` (0: a free one) until SIGTERM or SIGINT, then record what it answered
    before it exits; its base URL goes to stderr."""
    import sys

    import uvicorn

    from agent_memory.interfaces.signalled import SignalledServer

    config = uvicorn.Config(create_proxy_app(proxy), host="127.0.0.1", port=port, log_level="warning")
    server = SignalledServer(config)
    original = server.startup

    async def startup(sockets: Any = None) -> None:
        await original(sockets)
        for bound in server.servers:
            for sock in bound.sockets:
                sys.stderr.write(
                    f"agent-memory proxy: http://127.0.0.1:{sock.getsockname()[1]}/v1 -> {proxy.upstream.model}\n"
                )
                sys.stderr.flush()

    server.startup = startup  # type: ignore[method-assign]
    try:
        await server.serve()
    finally:
        await proxy.drain()  # every answer given is recorded before the proxy exits
