"""`DaemonClient.notes`: the daemon's note routes (http_notes.py), in the calls and types of `MemoryManager.notes`
(notes.py), so that a face formats one thing however it reached the store. Errors are the client's (client.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from agent_memory.interfaces.lazy_adapter import LazyAdapter
from agent_memory.models import Memory, RetrievalResult
from agent_memory.note_models import Boot, Note, NoteMeta, NotePage, meta_from_json

if TYPE_CHECKING:
    from agent_memory.interfaces.client import DaemonClient

_MEMORY = LazyAdapter(Memory)
_BOOT = LazyAdapter(Boot)
_RESULT: LazyAdapter[list[RetrievalResult]] = LazyAdapter(list[RetrievalResult])
_ANY: LazyAdapter[Any] = LazyAdapter(object)
"""For answers a `prepare` function builds (a Note's memory is decoded by `_MEMORY`)."""


class NotesClient:
    def __init__(self, client: DaemonClient) -> None:
        self._client = client

    async def write(
        self,
        text: str,
        *,
        kind: str = "note",
        source: Mapping[str, Any] | None = None,
        tags: Sequence[str] = (),
        namespace: str = "default",
        agent: str | None = None,
        session_id: str | None = None,
        turn_number: int | None = None,
    ) -> Note:
        """POST /v1/notes. With `session_id` and `turn_number` (an import's key) a repeat is refused as a
        duplicate turn (InvalidInput, code duplicate_turn)."""
        body: dict[str, Any] = {"text": text, "kind": kind, "tags": list(tags), "namespace": namespace}
        optional = {"source": dict(source) if source else None, "agent": agent, "session_id": session_id}
        body |= {k: v for k, v in (*optional.items(), ("turn_number", turn_number)) if v is not None}
        return self._note(await self._client._call("POST", "/v1/notes", json=body))

    async def handoff(
        self,
        done: str,
        next_steps: Sequence[str],
        warnings: Sequence[str] = (),
        *,
        namespace: str = "default",
        agent: str | None = None,
    ) -> Note:
        body = {"done": done, "next_steps": list(next_steps), "warnings": list(warnings), "namespace": namespace}
        if agent:
            body["agent"] = agent
        return self._note(await self._client._call("POST", "/v1/handoffs", json=body))

    async def get(self, memory_id: str, *, check_source: bool = True) -> Note:
        path = f"/v1/notes/{quote(memory_id, safe='')}"
        params = {"check_source": "true" if check_source else "false"}
        return self._note(await self._client._call("GET", path, params=params))

    async def list_notes(
        self,
        *,
        namespace: str = "default",
        kind: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> NotePage:
        params: dict[str, Any] = {"namespace": namespace, "limit": limit}
        given = {"kind": kind, "since": since.isoformat() if since else None, "cursor": cursor}
        params |= {k: v for k, v in given.items() if v is not None}
        data = await self._client._call("GET", "/v1/notes", params=params)
        page = self._client._decode(
            _ANY, data, lambda d: NotePage([self._note(n) for n in d["notes"]], d["next_cursor"])
        )
        return cast(NotePage, page)

    async def recall(
        self, query: str, *, k: int = 8, namespace: str = "default"
    ) -> list[tuple[RetrievalResult, NoteMeta | None]]:
        """POST /v1/notes/recall: the retrieval, each result with its note's label (None for a turn's memory)."""
        data = await self._client._call(
            "POST", "/v1/notes/recall", json={"query": query, "k": k, "namespace": namespace}
        )

        def prepare(d: Any) -> list[tuple[RetrievalResult, NoteMeta | None]]:
            results = _RESULT.validate_python(d["results"])
            labels = [meta_from_json(item["note"]) if item["note"] else None for item in d["results"]]
            return list(zip(results, labels, strict=True))

        return cast(list[tuple[RetrievalResult, NoteMeta | None]], self._client._decode(_ANY, data, prepare))

    async def counts(self, namespace: str = "default") -> dict[str, int]:
        data = await self._client._call("GET", "/v1/notes/counts", params={"namespace": namespace})
        return cast(dict[str, int], self._client._decode(_ANY, data, lambda d: {str(k): int(v) for k, v in d.items()}))

    async def boot(self, task: str = "", *, budget_tokens: int = 600, namespace: str = "default") -> Boot:
        body = {"task": task, "budget_tokens": budget_tokens, "namespace": namespace}
        return self._client._decode(_BOOT, await self._client._call("POST", "/v1/boot", json=body))

    def _note(self, data: Any) -> Note:
        def prepare(d: Any) -> Note:
            stale = d.get("stale")
            return Note(
                _MEMORY.validate_python(d["memory"]),
                meta_from_json(d["meta"]),
                datetime.fromisoformat(d["written_at"]),
                stale if isinstance(stale, bool) else None,
                d.get("stale_reason"),
            )

        return cast(Note, self._client._decode(_ANY, data, prepare))
