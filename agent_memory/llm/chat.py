"""`ChatModel`: one free-form chat completion (whole or streamed) through litellm, for the runtime and the proxy.

llm/client.py asks a model for validated JSON; this asks it for an answer to show a person. The same rules hold:
litellm is imported on first use, off the event loop and offline (client.py's loader, so litellm is set up in one
place); litellm's and the OpenAI SDK's own retries are off, since a turn that failed must fail visibly rather
than be sent again behind the caller's back; and the whole call is bounded by `timeout` with `asyncio.timeout`
(litellm's bounds each read, so a server that trickles its answer could hold a caller for ever).

Credentials come from the arguments (or the provider's usual environment variables, which litellm reads) and
never reach a log or an error message: every error text is scrubbed of the key before it is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agent_memory.errors import LLMCallFailed, LLMTimeout
from agent_memory.llm.client import _import_litellm

DEFAULT_TIMEOUT = timedelta(seconds=120)
"""A local model on a CPU answers a long prompt in tens of seconds; past two minutes the turn fails."""
SECRET_OPTIONS = ("api_key", "azure_ad_token", "aws_secret_access_key", "aws_session_token", "vertex_credentials")


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    """One answer: its text, the token counts the provider reported (None when it reported none), and the
    response as the provider's OpenAI-shaped JSON (what the proxy hands back unchanged)."""

    content: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    response: Mapping[str, Any] = field(default_factory=dict)


class ChatModel:
    """Any litellm model string ("ollama/llama3.1", "openai/gpt-4o", "anthropic/claude-...", "openai/x" with an
    `api_base` for a local OpenAI-compatible server); `options` (api_base, api_key, temperature, ...) are passed to
    every call."""

    def __init__(self, model: str, *, timeout: timedelta = DEFAULT_TIMEOUT, **options: Any) -> None:
        self.model = model
        self.timeout = timeout
        self._options = dict(options)
        self._secrets = [str(options[k]) for k in SECRET_OPTIONS if options.get(k)]
        self._loading = asyncio.Lock()
        self._litellm: Any = None

    def __repr__(self) -> str:  # never the key
        return f"ChatModel({self.model!r}, api_base={self._options.get('api_base')!r})"

    async def complete(self, messages: Sequence[Mapping[str, Any]], **extra: Any) -> ChatAnswer:
        """The model's answer to `messages`; LLMCallFailed or LLMTimeout (a message without the key) when it fails."""
        litellm = await self._module()
        seconds = self.timeout.total_seconds()
        try:
            async with asyncio.timeout(seconds):
                response = await litellm.acompletion(messages=list(messages), **self._call_options(extra))
        except (TimeoutError, litellm.Timeout) as exc:
            raise LLMTimeout(f"{self.model!r} gave no answer within {seconds:g} s") from None if self._secrets else exc
        except Exception as exc:  # provider, HTTP, connection and litellm's own errors
            raise self._failed(exc) from None if self._secrets else exc
        return self._answer(response)

    async def stream(self, messages: Sequence[Mapping[str, Any]], **extra: Any) -> AsyncIterator[dict[str, Any]]:
        """The answer as OpenAI `chat.completion.chunk` dicts, as they arrive; the whole stream is bounded by the
        timeout. Failures as for `complete`, raised where they happen (before the first chunk or between two)."""
        litellm = await self._module()
        seconds = self.timeout.total_seconds()
        deadline = asyncio.get_running_loop().time() + seconds
        try:
            async with asyncio.timeout_at(deadline):
                chunks = await litellm.acompletion(messages=list(messages), stream=True, **self._call_options(extra))
            while True:
                async with asyncio.timeout_at(deadline):
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
                yield _dump(chunk)
        except (TimeoutError, litellm.Timeout) as exc:
            raise LLMTimeout(f"{self.model!r} gave no answer within {seconds:g} s") from None if self._secrets else exc
        except Exception as exc:
            raise self._failed(exc) from None if self._secrets else exc

    async def aclose(self) -> None:
        """Close the HTTP clients litellm caches (a process-wide cache: other litellm users' clients too)."""
        if self._litellm is not None:
            await self._litellm.close_litellm_async_clients()
            self._litellm.in_memory_llm_clients_cache.flush_cache()

    def scrub(self, text: str) -> str:
        """`text` with every credential this model was given replaced by ***."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _call_options(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **self._options,
            **extra,
            "model": self.model,
            "timeout": self.timeout.total_seconds(),
            "drop_params": True,  # a provider without a parameter (seed, temperature) gets the call without it
            "num_retries": 0,  # litellm's retry wrapper
            "max_retries": 0,  # the OpenAI SDK client's own retries (2 by default)
        }

    def _failed(self, exc: BaseException) -> LLMCallFailed:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return LLMCallFailed(f"{self.model!r} call failed: {self.scrub(text)[:300]}")

    def _answer(self, response: Any) -> ChatAnswer:
        data = _dump(response)
        choices = data.get("choices") or [{}]
        content = (choices[0].get("message") or {}).get("content")
        usage = data.get("usage") or {}
        return ChatAnswer(
            content if isinstance(content, str) else "",
            str(data.get("model") or self.model),
            _count(usage.get("prompt_tokens")),
            _count(usage.get("completion_tokens")),
            data,
        )

    async def _module(self) -> Any:
        async with self._loading:
            if self._litellm is None:
                self._litellm = await asyncio.to_thread(_import_litellm)
        return self._litellm


def _dump(response: Any) -> dict[str, Any]:
    """A litellm response (a pydantic model) as plain JSON data."""
    if isinstance(response, Mapping):
        return dict(response)
    dumped: dict[str, Any] = response.model_dump(mode="json", exclude_none=True)
    return dumped


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
