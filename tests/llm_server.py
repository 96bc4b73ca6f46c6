"""A real OpenAI-compatible chat-completions server on 127.0.0.1, for testing the LLM client through litellm.

Nothing is patched: litellm really sends HTTP here. What the server answers is decided by a replaceable
`responder` (parsed request JSON -> `Reply`); the ready-made ones below cover a good model, each kind of bad
output, a slow model and a failing one. Every request is recorded, and so is the most in flight at once.

A test module uses it with `pytest_plugins = ["llm_server"]` (for the fixture) and imports the responders it
needs; that import comes first, so pytest is told not to rewrite this module: PYTEST_DONT_REWRITE.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent_memory.config import LLMConfig

CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_TURN_INDEX = re.compile(r'<turn index="(\d+)"')


@dataclass(frozen=True)
class Reply:
    """What the server does with one request: answer `content`, or send `raw_body` as is, after `delay` seconds.

    `hang_up` closes the connection without any answer, the way a crashed server looks to the client;
    `trickle` sends the body 16 bytes at a time with that many seconds between, so no single read is slow.
    """

    content: str | None = None
    status: int = 200
    delay: float = 0.0
    raw_body: str | None = None
    hang_up: bool = False
    trickle: float = 0.0


Responder = Callable[[dict[str, Any]], Reply]


class ChatCompletionsServer:
    """A ThreadingHTTPServer in a daemon thread; `responder` may be replaced at any time by the test."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), name="llm-server", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Wake every delayed reply (its client is gone by now), stop serving, close the listening socket."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def llm_config(self, **overrides: Any) -> LLMConfig:
        """An LLMConfig pointing litellm's openai/ route at this server, with a short timeout and no retries."""
        fields: dict[str, Any] = {
            "model": "openai/test-model",
            "api_base": f"http://127.0.0.1:{self.port}/v1",
            "api_key": "test-key",
            "timeout": timedelta(seconds=2),
            "max_retries": 0,
        }
        return LLMConfig(**(fields | overrides))

    def wait(self, seconds: float) -> bool:
        """Sleep, unless the server is stopping: then return True at once."""
        return self._stopping.wait(seconds)

    def answer(self, request: dict[str, Any], headers: dict[str, str]) -> Reply:
        """Record the request, count it in flight while the responder decides and the delay runs."""
        with self._lock:
            self.requests.append(request)
            self.headers.append(headers)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            reply = self.responder(request)
            self.wait(reply.delay)
            return reply
        finally:
            with self._lock:
                self._in_flight -= 1


def _handler_for(server: ChatCompletionsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path not in CHAT_PATHS:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            reply = server.answer(request, {k.lower(): v for k, v in self.headers.items()})
            if reply.hang_up:
                self.close_connection = True
                return
            body = reply.raw_body if reply.raw_body is not None else _body(request, reply)
            self._send(reply.status, body, reply.trickle)

        def _send(self, status: int, body: str, trickle: float = 0.0) -> None:
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                size = 16 if trickle else max(len(data), 1)
                for start in range(0, len(data), size):
                    self.wfile.write(data[start : start + size])
                    self.wfile.flush()
                    if trickle and server.wait(trickle):
                        return
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout test): nobody is left to answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest would show every request line on stderr."""

    return Handler


def _body(request: dict[str, Any], reply: Reply) -> str:
    """A `chat.completion` object as OpenAI sends it, or an OpenAI-style error for a non-200 status."""
    if reply.status != 200:
        return json.dumps({"error": {"message": "test server error", "type": "server_error", "code": None}})
    message = {"role": "assistant", "content": reply.content}
    return json.dumps(
        {
            "id": f"chatcmpl-test-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "test-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }
    )


def start_server(responder: Responder) -> ChatCompletionsServer:
    server = ChatCompletionsServer(responder)
    server.start()
    return server


@pytest.fixture
def llm_server() -> Iterator[ChatCompletionsServer]:
    """A running server that answers well until the test sets another responder."""
    server = start_server(good)
    try:
        yield server
    finally:
        server.stop()


# Ready-made responders.


def user_message(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "user")


def turn_indices(request: dict[str, Any]) -> list[int]:
    """The turn indices the prompt asks verdicts for, read from its <turn index="N"> fences."""
    return [int(i) for i in _TURN_INDEX.findall(user_message(request))]


def verdicts(indices: list[int], **overrides: Any) -> dict[str, Any]:
    """Valid verdicts for `indices` (valence and arousal included), with `overrides` set in every one."""
    one = {
        "save": True,
        "confidence": 0.9,
        "memory_type": "semantic",
        "importance": 0.6,
        "reason": "states a fact about the user",
        "valence": 0.2,
        "arousal": 0.3,
    }
    return {"verdicts": [{"index": i, **one, **overrides} for i in indices]}


def good(request: dict[str, Any]) -> Reply:
    return Reply(json.dumps(verdicts(turn_indices(request))))


def fenced(request: dict[str, Any]) -> Reply:
    """The JSON inside a ```json fence, with prose before and after, as chatty models answer."""
    body = json.dumps(verdicts(turn_indices(request)), indent=2)
    return Reply(f"Sure! Here are the verdicts:\n```json\n{body}\n```\nLet me know if you need anything else.")


def without_emotion(request: dict[str, Any]) -> Reply:
    answer = verdicts(turn_indices(request))
    for verdict in answer["verdicts"]:
        del verdict["valence"], verdict["arousal"]
    return Reply(json.dumps(answer))


def prose(request: dict[str, Any]) -> Reply:
    return Reply("I think the first turn is worth remembering, but I am not sure about the others.")


def truncated(request: dict[str, Any]) -> Reply:
    return Reply(json.dumps(verdicts(turn_indices(request)))[:40])


def wrong_type(request: dict[str, Any]) -> Reply:
    return Reply(json.dumps(verdicts(turn_indices(request), save="perhaps")))


def out_of_range(request: dict[str, Any]) -> Reply:
    return Reply(json.dumps(verdicts(turn_indices(request), confidence=1.7)))


def missing_index(request: dict[str, Any]) -> Reply:
    """Drops the verdict of turn 1."""
    return Reply(json.dumps(verdicts([i for i in turn_indices(request) if i != 1])))


def duplicate_index(request: dict[str, Any]) -> Reply:
    return Reply(json.dumps(verdicts([0, *turn_indices(request)])))


def empty_content(request: dict[str, Any]) -> Reply:
    return Reply(None)


def slow(delay: float, then: Responder = good) -> Responder:
    """Answers as `then` does, but only after `delay` seconds (past the client's timeout, in the timeout tests)."""

    def responder(request: dict[str, Any]) -> Reply:
        return replace(then(request), delay=delay)

    return responder


def trickling(pause: float, then: Responder = good) -> Responder:
    """Answers as `then` does, 16 bytes at a time with `pause` seconds between: slow overall, no read slow."""

    def responder(request: dict[str, Any]) -> Reply:
        return replace(then(request), trickle=pause)

    return responder


def failing(request: dict[str, Any]) -> Reply:
    return Reply(status=500)


def hang_up(request: dict[str, Any]) -> Reply:
    return Reply(hang_up=True)


def fails_first(times: int, first: Responder = failing, then: Responder = good) -> Responder:
    """`first` for the first `times` requests, `then` after: a flaky model that a retry gets past."""
    lock, seen = threading.Lock(), [0]

    def responder(request: dict[str, Any]) -> Reply:
        with lock:
            seen[0] += 1
            count = seen[0]
        return first(request) if count <= times else then(request)

    return responder
