"""The one place that calls an LLM: litellm's `acompletion`, asked for one JSON object, validated by pydantic.

litellm is imported on first use, in a worker thread: its import takes seconds and most runs never call an LLM.
Its own retries (litellm's and the OpenAI SDK's, two by default) are turned off so `llm.max_retries` is the only
retry policy. `llm.timeout` is handed to litellm and also enforced here with `asyncio.timeout`: litellm's
timeout bounds each connect and each read, not the call, so a server that trickles its answer (a byte now and
then) would hold a caller for as long as it likes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from agent_memory.config import LLMConfig
from agent_memory.errors import ClosedError, LLMBadOutput, LLMCallFailed, LLMError, LLMTimeout

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

QUOTE_CHARS = 200
"""How much of a bad answer an LLMBadOutput message quotes."""

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_OBJECT_AT_LINE_START = re.compile(r"^\{", re.MULTILINE)


class LiteLLMClient:
    """One configured model behind litellm: at most `llm.concurrency` calls in flight, JSON answers only."""

    def __init__(self, config: LLMConfig) -> None:
        self._config = config
        self._slots = asyncio.Semaphore(config.concurrency)
        self._loading = asyncio.Lock()
        self._litellm: Any = None
        self._closed = False

    @property
    def enabled(self) -> bool:
        """False when no model is configured: every decision is then the offline heuristic's."""
        return bool(self._config.model)

    @property
    def model(self) -> str:
        return self._config.model

    async def complete_json(
        self, system: str, user: str, schema: type[M], *, context: Mapping[str, Any] | None = None
    ) -> M:
        """Ask for one JSON object and validate it as `schema` (with pydantic validation `context`).

        A failed call, a timeout and a bad answer are each retried up to `llm.max_retries` times; the last
        attempt's error is raised: LLMCallFailed, LLMTimeout or LLMBadOutput.
        """
        if self._closed:
            raise ClosedError("LiteLLMClient")
        if not self.enabled:
            raise LLMCallFailed("No LLM is configured (llm.model is empty)")
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        attempts = self._config.max_retries + 1
        for attempt in range(1, attempts):
            try:
                return await self._attempt(messages, schema, context, f"attempt {attempt} of {attempts}")
            except LLMError as exc:
                log.warning("%s; retrying", exc)
        return await self._attempt(messages, schema, context, f"attempt {attempts} of {attempts}")

    async def aclose(self) -> None:
        """Close the HTTP clients litellm caches, and drop them from its cache so none is reused closed.

        litellm keeps one process-wide cache, so this closes clients any other litellm user made as well.
        """
        if self._closed:
            return
        self._closed = True
        if self._litellm is not None:
            await self._litellm.close_litellm_async_clients()
            self._litellm.in_memory_llm_clients_cache.flush_cache()

    async def _attempt(
        self, messages: list[dict[str, str]], schema: type[M], context: Mapping[str, Any] | None, attempt: str
    ) -> M:
        answer = await self._call(messages, attempt)
        try:
            return parse_json(answer, schema, context=context)
        except LLMBadOutput as exc:
            raise LLMBadOutput(f"LLM {self.model!r} ({attempt}): {exc}") from exc

    async def _call(self, messages: list[dict[str, str]], attempt: str) -> str | None:
        """One request, timed from when it gets a slot; every failure becomes an LLMError naming the attempt."""
        litellm = await self._module()
        seconds = self._config.timeout.total_seconds()
        async with self._slots:
            try:
                async with asyncio.timeout(seconds):
                    response = await litellm.acompletion(messages=messages, **self._call_options())
            except (TimeoutError, litellm.Timeout) as exc:
                raise LLMTimeout(f"LLM {self.model!r} gave no answer within {seconds:g} s ({attempt})") from exc
            except Exception as exc:  # litellm raises provider, HTTP, connection and its own errors
                raise LLMCallFailed(f"LLM {self.model!r} call failed ({attempt}): {_describe(exc)}") from exc
        return _answer_text(response)

    def _call_options(self) -> dict[str, Any]:
        """The keyword arguments of every `acompletion` call (`messages` aside)."""
        config = self._config
        options: dict[str, Any] = {
            "model": config.model,
            "temperature": config.temperature,
            "timeout": config.timeout.total_seconds(),
            "response_format": {"type": "json_object"},  # OpenAI's JSON mode needs "JSON" in the prompt; ours has it
            "drop_params": True,  # a provider without JSON mode (or temperature) gets the call without it
            "num_retries": 0,  # litellm's retry wrapper
            "max_retries": 0,  # the OpenAI SDK client's own retries (2 by default)
        }
        if config.api_base:
            options["api_base"] = config.api_base
        if config.api_key:
            options["api_key"] = config.api_key
        return options

    async def _module(self) -> Any:
        async with self._loading:
            if self._litellm is None:
                self._litellm = await asyncio.to_thread(_import_litellm)
        return self._litellm


def _import_litellm() -> ModuleType:
    """Import and quiet litellm. The offline switches must be set before the import: it reads them then.

    agent_memory's import already sets LITELLM_LOCAL_MODEL_COST_MAP; LITELLM_OFFLINE_MODE also keeps the
    Anthropic beta-header catalogue and tokenizers from being fetched from GitHub and the Hugging Face Hub.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banner printed on every error
    if not isinstance(getattr(litellm, "telemetry", None), ModuleType):  # now a proxy-only package
        litellm.telemetry = False  # older litellm: its usage-telemetry switch
    return litellm


def _answer_text(response: Any) -> str | None:
    choices = getattr(response, "choices", None) or []
    content = choices[0].message.content if choices else None
    return content if isinstance(content, str) else None


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def parse_json(answer: str | None, schema: type[M], *, context: Mapping[str, Any] | None = None) -> M:
    """The one JSON object in `answer` (fenced or amid prose), validated as `schema`; else LLMBadOutput."""
    if answer is None or not answer.strip():
        raise LLMBadOutput("the answer was empty")
    data = extract_json_object(answer)
    try:
        return schema.model_validate(data, context=dict(context) if context is not None else None)
    except ValidationError as exc:
        raise LLMBadOutput(f"{_field_errors(exc)}; the answer began: {_quote(answer)}") from exc


def extract_json_object(answer: str) -> dict[str, Any]:
    """The first JSON object in `answer`: inside a ```json fence if there is one, else from its first `{`.

    When prose before the object holds a brace too, an object starting a line is tried next.
    """
    fence = _FENCE.search(answer)
    text = fence.group(1) if fence else answer
    starts = [text.find("{"), *(m.start() for m in _OBJECT_AT_LINE_START.finditer(text))]
    if starts[0] < 0:
        raise LLMBadOutput(f"no JSON object in the answer; it began: {_quote(answer)}")
    first_error: json.JSONDecodeError | None = None
    for start in dict.fromkeys(starts):
        try:
            value, _ = json.JSONDecoder().raw_decode(text, start)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, dict):
            return value
    raise LLMBadOutput(f"invalid JSON ({first_error}); the answer began: {_quote(answer)}")


def _field_errors(exc: ValidationError) -> str:
    """'verdicts.0.confidence: Input should be less than or equal to 1 (got 1.7); ...'"""
    return "; ".join(_field_error(err) for err in exc.errors()[:5])


def _field_error(err: ErrorDetails) -> str:
    where = ".".join(str(p) for p in err["loc"])
    if not where:
        return f"answer: {err['msg']}"
    got = "" if err["type"] == "missing" else f" (got {_short(err['input'])})"
    return f"field {where}: {err['msg']}{got}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quote(answer: str) -> str:
    return repr(answer[:QUOTE_CHARS]) + ("..." if len(answer) > QUOTE_CHARS else "")
