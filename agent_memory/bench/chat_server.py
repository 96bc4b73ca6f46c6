"""A local OpenAI-compatible `/v1/chat/completions` server standing for a provider, with no network and no model.

The provider handoff demo (scripts/provider_handoff.py), the runtime benchmark and the runtime and proxy tests each
start one or two: litellm really sends HTTP here, whole or streamed (server-sent events, as OpenAI streams). What it
answers is a `responder` (the parsed request -> the answer's text, or a `Failure`), replaceable at any time; every
request is kept, so a caller can check what the "provider" was shown (the memory block, the system instruction).
The design is tests/llm_server.py's, shipped in the package because the demo and the benchmark need it too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})


@dataclass(frozen=True, slots=True)
class Failure:
    """Answer with this HTTP status and an OpenAI-style error (a provider that fails)."""

    status: int = 500
    message: str = "the test provider failed"


Responder = Callable[[dict[str, Any]], "str | Failure"]


def echo(request: dict[str, Any]) -> str:
    """Answers with the last user message, quoted: enough to tell that the answer is this server's."""
    return f"{request.get('model', 'model')} heard: {last_user_text(request)}"


def last_user_text(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    return message_text(users[-1]) if users else ""


def prompt_text(request: dict[str, Any]) -> str:
    """Every message's text, one per line: what the model was shown."""
    return "\n".join(message_text(m) for m in request.get("messages", []))


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class ChatServer:
    """A ThreadingHTTPServer on 127.0.0.1 (a free port) in a daemon thread; `with ChatServer(...) as server:`."""

    def __init__(self, responder: Responder = echo, *, name: str = "provider") -> None:
        self.responder = responder
        self.name = name
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def model_options(self) -> dict[str, Any]:
        """The litellm options that reach this server: its api_base and a key it does not check."""
        return {"api_base": self.api_base, "api_key": f"{self.name}-key"}

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def answer(self, request: dict[str, Any], headers: dict[str, str]) -> str | Failure:
        with self._lock:
            self.requests.append(request)
            self.headers.append(headers)
        return self.responder(request)


def _handler_for(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY: the headers and the body leave in two writes, and on a kept-alive connection Nagle held the
        # body until the client's delayed ACK, 40 ms later: an upstream that "answers at once" took 44 ms a call.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path not in CHAT_PATHS:
                self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                return
            request = json.loads(body)
            reply = server.answer(request, {k.lower(): v for k, v in self.headers.items()})
            if isinstance(reply, Failure):
                self._json(reply.status, {"error": {"message": reply.message, "type": "server_error", "code": None}})
            elif request.get("stream"):
                self._stream(request, reply)
            else:
                self._json(200, completion(request, reply))

        def _json(self, status: int, data: dict[str, Any]) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _stream(self, request: dict[str, Any], text: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for chunk in chunks(request, text):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a demo or a test shows its own output."""

    return Handler


def completion(request: dict[str, Any], text: str) -> dict[str, Any]:
    """A `chat.completion` object as OpenAI sends it (usage counted in words, roughly)."""
    prompt = len(prompt_text(request).split())
    return {
        "id": f"chatcmpl-local-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "local-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": len(text.split()), "total_tokens": prompt},
    }


def chunks(request: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """The answer as `chat.completion.chunk` objects, a few words each, then a closing one with finish_reason."""
    words = text.split(" ")
    parts = [" ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "") for i in range(0, len(words), 3)]
    base: dict[str, Any] = {"id": f"chatcmpl-local-{time.monotonic_ns()}", "object": "chat.completion.chunk"}
    base |= {"created": int(time.time()), "model": request.get("model", "local-model")}
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    out += [{**base, "choices": [{"index": 0, "delta": {"content": part}}]} for part in parts]
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out
