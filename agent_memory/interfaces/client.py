"""`DaemonClient`: the daemon's HTTP API (docs/daemon.md) from another process, answering in the types
`MemoryManager` answers in, so that a caller formats one thing however it got it. `find_daemon` finds the daemon
that owns a data directory, if one does (interfaces/discovery.py).

An error answer, `{"error": {"code", "message"}}`, is raised again here as the class the daemon's error belongs to
(the nearest one that takes a message: `duplicate_turn` is an `InvalidInput`), with the daemon's message; a code
that no class fits is a `DaemonError`, and a daemon that does not answer is `DaemonUnreachable`, naming its URL.

`export_policy` fetches the policy export as the JSONL stream the daemon sends and writes it here: the daemon
writes no file an HTTP caller names.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from agent_memory.errors import (
    AgentMemoryError,
    ConfigError,
    DaemonError,
    DaemonUnreachable,
    DuplicateTurn,
    ImageMemoryUnavailable,
    InvalidEncoding,
    InvalidInput,
    ModelError,
    NotFound,
    RevisionConflict,
    StorageError,
)
from agent_memory.interfaces.client_notes import NotesClient
from agent_memory.interfaces.discovery import live_daemon
from agent_memory.interfaces.lazy_adapter import Decoder, LazyAdapter
from agent_memory.interfaces.plain_http import transport_for
from agent_memory.interfaces.token import read_token
from agent_memory.models import (
    Context,
    DoctorReport,
    EmotionalContext,
    Fact,
    FactDecision,
    JobRun,
    Memory,
    RetrievalResult,
    Revision,
    TurnInput,
)

T = TypeVar("T")
HEALTH_TIMEOUT = 2.0
REQUEST_TIMEOUT = httpx.Timeout(10.0, read=None)
"""No read timeout: a large batch of turns or a sleep job takes what it takes (the daemon bounds a job by
sleep.job_timeout); connecting and sending still give up after 10 s."""

ERROR_CLASSES: dict[str, type[AgentMemoryError]] = {
    "invalid_input": InvalidInput,
    "empty_content": InvalidInput,
    "content_too_large": InvalidInput,
    "invalid_encoding": InvalidInput,
    "invalid_identifier": InvalidInput,
    "invalid_image": InvalidInput,
    "duplicate_turn": InvalidInput,
    "not_current": InvalidInput,
    "malformed_json": InvalidInput,
    "invalid_request": InvalidInput,
    "not_found": NotFound,
    "erased": NotFound,
    "storage_error": StorageError,
    "model_error": ModelError,
    "image_memory_unavailable": ImageMemoryUnavailable,
    "config_error": ConfigError,
}
"""The daemon's error codes (interfaces/http.py ERRORS) back to classes; any other code is a DaemonError."""


async def find_daemon(data_dir: Path) -> DaemonClient | None:
    """A client of the daemon that owns `data_dir`, or None when none does (no daemon.json, or a stale one).

    Raises DaemonUnreachable when a live daemon owns it but GET /health gets no answer within 2 s: the store cannot
    be opened here instead, since that daemon holds its lock."""
    info = live_daemon(data_dir)
    if info is None:
        return None
    client = DaemonClient(info.url, read_token(data_dir))
    try:
        await client.health()
    except BaseException:
        await client.aclose()
        raise
    return client


class DaemonClient:
    """One daemon's API over httpx; close it (`async with`, or `aclose`). `transport` is a seam for tests."""

    def __init__(self, url: str, token: str, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url
        headers = {"Authorization": f"Bearer {token}"}
        transport = transport or transport_for(url)  # plain HTTP without httpcore, h2 or TLS (plain_http.py)
        self._http = httpx.AsyncClient(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT, transport=transport)
        self.notes = NotesClient(self)
        """The note routes, as `MemoryManager.notes` (client_notes.py)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> None:
        """GET /health, given HEALTH_TIMEOUT (2 s) to answer: a daemon that owns the store answers at once."""
        await self._call("GET", "/health", timeout=HEALTH_TIMEOUT)

    async def process_turns(self, turns: Sequence[TurnInput], *, bulk: bool = False) -> list[TurnReceipt]:
        """POST /v1/turns/bulk: one batch, in order; one bad turn rejects all of them. `bulk`: an import."""
        body: dict[str, Any] = {"turns": [turn_body(t) for t in turns]} | ({"bulk": True} if bulk else {})
        answer = await self._call("POST", "/v1/turns/bulk", json=body)
        return self._decode(_RECEIPTS, answer)

    async def retrieve(
        self,
        query: str,
        *,
        k: int | None = None,
        namespace: str = "default",
        emotional_context: EmotionalContext | None = None,
        now: datetime | None = None,
        as_of: datetime | None = None,
    ) -> list[RetrievalResult]:
        body = _jsonable(
            query=query, k=k, namespace=namespace, emotional_context=emotional_context, now=now, as_of=as_of
        )
        return self._decode(_RESULTS, await self._call("POST", "/v1/retrieve", json=body), _results)

    async def context(
        self,
        query: str,
        *,
        budget_tokens: int = 2048,
        namespace: str = "default",
        emotional_context: EmotionalContext | None = None,
        now: datetime | None = None,
        as_of: datetime | None = None,
    ) -> Context:
        body = _jsonable(
            query=query,
            budget_tokens=budget_tokens,
            namespace=namespace,
            emotional_context=emotional_context,
            now=now,
            as_of=as_of,
        )
        return self._decode(_CONTEXT, await self._call("POST", "/v1/context", json=body), _context)

    async def get(self, memory_id: str, *, original: bool = False) -> Memory:
        """GET /v1/memories/{id}; with `original`, `Memory.original` holds its turn's words as logged."""
        path = f"/v1/memories/{quote(memory_id, safe='')}"
        return self._decode(_MEMORY, await self._call("GET", path, params={"original": original} if original else None))

    async def update(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory:
        """POST /v1/memories/{id}/update: the memory at its new revision; RevisionConflict when it moved on."""
        return await self._change("update", memory_id, content, expected_revision, agent, reason)

    async def supersede(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory:
        """POST /v1/memories/{id}/supersede: the memory that replaces it."""
        return await self._change("supersede", memory_id, content, expected_revision, agent, reason)

    async def forget(
        self, memory_id: str, *, expected_revision: int, agent: str | None = None, reason: str | None = None
    ) -> Memory:
        body = {"expected_revision": expected_revision, "agent": agent, "reason": reason}
        path = f"/v1/memories/{quote(memory_id, safe='')}/forget"
        return self._decode(_MEMORY, await self._call("POST", path, json=body))

    async def restore(self, memory_id: str, *, agent: str | None = None, reason: str | None = None) -> Memory:
        path = f"/v1/memories/{quote(memory_id, safe='')}/restore"
        return self._decode(_MEMORY, await self._call("POST", path, json={"agent": agent, "reason": reason}))

    async def remember_fact(
        self,
        subject: str,
        attribute: str,
        value: str,
        *,
        valid_at: datetime | None = None,
        source: str | None = None,
        confidence: float = 1.0,
        namespace: str = "default",
    ) -> Fact:
        body: dict[str, Any] = {"subject": subject, "attribute": attribute, "value": value, "source": source}
        body |= {
            "valid_at": valid_at.isoformat() if valid_at else None,
            "confidence": confidence,
            "namespace": namespace,
        }
        return self._decode(_FACT, await self._call("POST", "/v1/facts", json=body))

    async def facts(
        self,
        subject: str | None = None,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str = "default",
    ) -> list[Fact]:
        params = {"subject": subject, "as_of": as_of, "known_at": known_at, "namespace": namespace}
        shown = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in params.items() if v is not None}
        return self._decode(_FACTS, await self._call("GET", "/v1/facts", params=shown))

    async def prepare_turns(self, texts: Sequence[str], *, bulk: bool = False) -> None:
        """POST /v1/turns/prepare: the daemon embeds texts about to be sent as turns (`bulk`: an import's next
        batch, by the import's model); nothing is stored."""
        await self._call("POST", "/v1/turns/prepare", json={"texts": list(texts), "bulk": bulk})

    async def observe_facts(self, turn_ids: Sequence[str]) -> list[FactDecision]:
        """POST /v1/facts/observe: the policy step on the facts these stored turns state."""
        answer = await self._call("POST", "/v1/facts/observe", json={"turn_ids": list(turn_ids)})
        return self._decode(_DECISIONS, answer)

    async def fact_history(self, subject: str, attribute: str, *, namespace: str = "default") -> list[Fact]:
        params = {"subject": subject, "attribute": attribute, "namespace": namespace}
        return self._decode(_FACTS, await self._call("GET", "/v1/facts/history", params=params))

    async def _change(
        self, kind: str, memory_id: str, content: str, expected: int, agent: str | None, reason: str | None
    ) -> Memory:
        body = {"content": content, "expected_revision": expected, "agent": agent, "reason": reason}
        path = f"/v1/memories/{quote(memory_id, safe='')}/{kind}"
        return self._decode(_MEMORY, await self._call("POST", path, json=body))

    async def erase(
        self,
        *,
        reason: str,
        memory_ids: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        session_id: str | None = None,
        namespace: str = "default",
        whole_namespace: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """POST /v1/erase: what went and the proof scan (or, with `dry_run`, what would go)."""
        body = {
            "reason": reason, "memory_ids": list(memory_ids), "turn_ids": list(turn_ids), "session_id": session_id,
            "namespace": namespace, "whole_namespace": whole_namespace, "dry_run": dry_run,
        }  # fmt: skip
        return self._decode(_STATS, await self._call("POST", "/v1/erase", json=body))

    async def history(self, memory_id: str) -> list[Revision]:
        path = f"/v1/memories/{quote(memory_id, safe='')}/history"
        return self._decode(_REVISIONS, await self._call("GET", path))

    async def stats(self) -> dict[str, Any]:
        return self._decode(_STATS, await self._call("GET", "/v1/stats"))

    async def run_job(self, name: str, *, now: datetime | None = None, **options: Any) -> JobRun:
        """POST /v1/jobs/{name}. A Path option is sent absolute: the daemon's cwd is not ours. The daemon refuses
        the export job (it would write a file): `export_policy` streams the export instead."""
        answer = await self._call("POST", f"/v1/jobs/{quote(name, safe='')}", json=_jsonable(now=now, **options))
        return self._decode(_RUN, answer)

    async def job_runs(self, job: str | None = None, *, limit: int = 50) -> list[JobRun]:
        params: dict[str, Any] = {"limit": limit} if job is None else {"limit": limit, "job": job}
        return self._decode(_RUNS, await self._call("GET", "/v1/jobs", params=params))

    async def doctor(self, *, repair: bool = False) -> DoctorReport:
        return self._decode(_DOCTOR, await self._call("GET", "/v1/doctor", params={"repair": repair}))

    async def export_policy(self, out: Path, *, labelled_only: bool = True) -> dict[str, Any]:
        """GET /v1/export/policy streamed into `out` on this machine, through a temporary file beside it (mode 0600)
        renamed into place once the last line has arrived: a reader never sees half a file, and a stream cut short
        leaves `out` as it was. Returns the counts the export job reports (save and retrieval lines)."""
        lines = _ExportFile(await asyncio.to_thread(_AtomicFile, out))
        params = {"labelled_only": "true" if labelled_only else "false"}
        try:
            async with self._http.stream("GET", "/v1/export/policy", params=params) as response:
                if response.is_error:
                    await response.aread()
                    raise self._error(response)
                async for chunk in response.aiter_bytes():
                    await asyncio.to_thread(lines.write, chunk)
            counts = lines.finish(self.url)
            await asyncio.to_thread(lines.file.commit)
        except httpx.TransportError as exc:
            await asyncio.to_thread(lines.file.discard)
            raise DaemonUnreachable(self.url, str(exc) or type(exc).__name__) from exc
        except BaseException:
            await asyncio.to_thread(lines.file.discard)
            raise
        return {**counts, "out": str(lines.file.out), "labelled_only": labelled_only}

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.url, str(exc) or type(exc).__name__) from exc
        if response.is_error:
            raise self._error(response)
        try:
            return response.json()
        except ValueError:
            raise self._unexpected(response) from None

    def _error(self, response: httpx.Response) -> AgentMemoryError:
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            return self._unexpected(response)
        details = error.get("details") or {}
        raised: AgentMemoryError
        if code == "revision_conflict" and {"memory_id", "expected", "current"} <= set(details):
            raised = RevisionConflict(str(details["memory_id"]), int(details["expected"]), int(details["current"]))
        elif code == "duplicate_turn" and {"namespace", "session_id", "turn_number"} <= set(details):
            raised = DuplicateTurn(str(details["namespace"]), str(details["session_id"]), int(details["turn_number"]))
        elif (cls := ERROR_CLASSES.get(code)) is None:
            return DaemonError(f"The daemon at {self.url} answered {code}: {message}", url=self.url, code=code)
        else:
            raised = cls(message)
        raised.code = code  # what the caller branches on, never the message's words
        return raised

    def _unexpected(self, response: httpx.Response) -> DaemonError:
        start = response.text[:200]
        message = f"The daemon at {self.url} answered HTTP {response.status_code} with no JSON error: {start!r}"
        return DaemonError(message, url=self.url, code="unexpected_answer")

    def _decode(self, adapter: Decoder[T], data: Any, prepare: Callable[[Any], Any] | None = None) -> T:
        try:
            return adapter.validate_python(prepare(data) if prepare else data)
        except (ValidationError, KeyError, TypeError, AttributeError) as exc:
            message = f"The daemon at {self.url} answered in an unexpected shape: {exc}"
            raise DaemonError(message, url=self.url, code="unexpected_answer") from exc


# ----- requests and answers ---------------------------------------------------------------------------


class _AtomicFile:
    """A temporary file beside `out` (mkstemp: mode 0600), renamed over `out` by `commit` (blocking calls)."""

    def __init__(self, out: Path) -> None:
        self.out = out = out.expanduser().absolute()
        out.parent.mkdir(parents=True, exist_ok=True)  # as the export job does
        fd, self.partial = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
        self.fh = os.fdopen(fd, "wb")

    def commit(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.partial, self.out)

    def discard(self) -> None:
        self.fh.close()
        Path(self.partial).unlink(missing_ok=True)


class _ExportFile:
    """The export's bytes written as they arrive, each whole line counted by its `kind`."""

    def __init__(self, file: _AtomicFile) -> None:
        self.file, self.tail = file, b""
        self.counts = {"save": 0, "retrieval": 0}
        self.bad: bytes | None = None

    def write(self, chunk: bytes) -> None:
        self.file.fh.write(chunk)
        *lines, self.tail = (self.tail + chunk).split(b"\n")
        for line in lines:
            try:
                kind = json.loads(line)["kind"]
                self.counts[kind] += 1
            except (ValueError, KeyError, TypeError):
                self.bad = self.bad or line[:200]

    def finish(self, url: str) -> dict[str, int]:
        """The counts, or DaemonError when a line was not a decision or the last one did not end."""
        if self.bad is not None or self.tail:
            shown = self.bad if self.bad is not None else self.tail[:200]
            message = f"The daemon at {url} sent an export line that is not a decision: {shown!r}"
            raise DaemonError(message, url=url, code="unexpected_answer")
        return dict(self.counts)


@dataclass(frozen=True, slots=True)
class TurnReceipt:
    """What the daemon says of one processed turn (the shape of POST /v1/turns); `saved` as in TurnResult."""

    turn_id: str
    saved: bool
    memory_id: str | None
    reason: str
    path: str
    chunks: int = 0
    """A long turn: how many chunk memories it became (TurnResult.chunks)."""


def turn_body(turn: TurnInput) -> dict[str, Any]:
    """A turn as POST /v1/turns takes it. The API takes no images: a turn with images is refused here, unsent."""
    if turn.images:
        raise InvalidInput(
            f"Turn {turn.turn_number} of session {turn.session_id!r} has images, which the daemon's HTTP API does "
            "not take; stop the daemon to ingest it directly"
        )
    content = turn.content
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEncoding(str(exc)) from None
    fields = {"session_id": turn.session_id, "turn_number": turn.turn_number, "content": content, "role": turn.role}
    return _jsonable(**fields, emotional_context=turn.emotional_context, at=turn.at, namespace=turn.namespace)


def _jsonable(**fields: Any) -> dict[str, Any]:
    """A JSON body: None left out (the daemon's default), times in ISO-8601, paths absolute."""
    return {name: _json_value(value) for name, value in fields.items() if value is not None}


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value.expanduser().absolute())
    if isinstance(value, EmotionalContext):
        return value.as_dict()
    return value


def _results(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_result(item) for item in data]


def _result(data: dict[str, Any]) -> dict[str, Any]:
    """A result as the API writes it, with each layer's name put back into its LayerHit."""
    layers = {name: {"layer": name, **hit} for name, hit in data["layers"].items()}
    return {"memory": data["memory"], "score": data["score"], "rank": data["rank"], "layers": layers}


def _context(data: dict[str, Any]) -> dict[str, Any]:
    items = [{"result": _result(item), "tokens": item["tokens"], "reply": item.get("reply")} for item in data["items"]]
    return {**data, "items": items}


_RECEIPTS = LazyAdapter(list[TurnReceipt])
_RESULTS = LazyAdapter(list[RetrievalResult])
_CONTEXT = LazyAdapter(Context)
_MEMORY = LazyAdapter(Memory)
_REVISIONS = LazyAdapter(list[Revision])
_FACT = LazyAdapter(Fact)
_FACTS = LazyAdapter(list[Fact])
_DECISIONS = LazyAdapter(list[FactDecision])
_STATS = LazyAdapter(dict[str, Any])
_RUN = LazyAdapter(JobRun)
_RUNS = LazyAdapter(list[JobRun])
_DOCTOR = LazyAdapter(DoctorReport)
