"""The HTTP routes of notes (issue #23): write one, write a handoff, list them, read one with its source checked,
and the boot context. Included by `create_app` (http.py); they are what `agent-memory mcp` calls. A bad kind, tag,
source, cursor or budget is 400 `invalid_input` saying which; a body of the wrong shape is 422 `invalid_request`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.interfaces.http_guard import answers, errors
from agent_memory.interfaces.wire import answer, plain
from agent_memory.manager import MemoryManager
from agent_memory.note_models import (
    MAX_NOTE_STEPS,
    MAX_SOURCE_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    WRITABLE_KINDS,
    Boot,
    Note,
    NotePage,
)


class SourceBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    path: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)
    commit: str | None = Field(default=None, max_length=64)
    line: int | None = None
    url: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)


class NoteBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    kind: str = "note"
    source: SourceBody | None = None
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    agent: str | None = Field(default=None, max_length=MAX_TAG_CHARS)
    namespace: str = "default"
    session_id: str | None = None
    turn_number: int | None = None


class HandoffBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    done: str
    next_steps: list[str] = Field(max_length=MAX_NOTE_STEPS)
    warnings: list[str] = Field(default_factory=list, max_length=MAX_NOTE_STEPS)
    agent: str | None = Field(default=None, max_length=MAX_TAG_CHARS)
    namespace: str = "default"


class RecallBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str
    k: int = 8
    namespace: str = "default"


class BootBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    task: str = ""
    budget_tokens: int = 600
    namespace: str = "default"


def note_json(note: Note) -> dict[str, Any]:
    return cast(dict[str, Any], plain(note))


def page_json(page: NotePage) -> dict[str, Any]:
    return {"notes": [note_json(n) for n in page.notes], "next_cursor": page.next_cursor}


def boot_json(boot: Boot) -> dict[str, Any]:
    return cast(dict[str, Any], plain(boot))


def note_routes(manager: MemoryManager) -> APIRouter:
    from agent_memory.interfaces.http import result_json  # http.py includes these routes: imported once it is loaded

    v1 = APIRouter(prefix="/v1")

    @v1.post("/notes", response_model=None, responses=answers("object", 400, 409, 422))
    async def write(body: NoteBody) -> Response:
        """Keep one note; the answer is the note with its memory's id and revision."""
        source = body.source.model_dump(exclude_none=True) if body.source else None
        note = await manager.notes.write(
            body.text,
            kind=body.kind,
            source=source,
            tags=body.tags,
            namespace=body.namespace,
            agent=body.agent,
            session_id=body.session_id,
            turn_number=body.turn_number,
            kinds=(*WRITABLE_KINDS, "worklog"),  # a worklog is the Stop hook's (cli_hooks.py); a handoff has its route
        )
        return answer(note_json(note))

    @v1.post("/handoffs", responses=errors(400, 422))
    async def handoff(body: HandoffBody) -> dict[str, Any]:
        """Keep a handoff: what was done, the next steps, the warnings."""
        note = await manager.notes.handoff(
            body.done, body.next_steps, body.warnings, namespace=body.namespace, agent=body.agent
        )
        return note_json(note)

    @v1.get("/notes", responses=errors(400, 422))
    async def listing(
        kind: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
        cursor: str | None = None,
        namespace: str = "default",
    ) -> dict[str, Any]:
        """The active notes, newest first; `next_cursor` continues."""
        page = await manager.notes.list_notes(namespace=namespace, kind=kind, since=since, limit=limit, cursor=cursor)
        return page_json(page)

    @v1.get("/notes/counts", responses=errors(400, 422))
    async def counts(namespace: str = "default") -> dict[str, int]:
        """How many active notes of each kind the namespace holds."""
        return await manager.notes.counts(namespace)

    @v1.get("/notes/{memory_id}", responses=errors(400, 404, 422))
    async def read(memory_id: str, check_source: bool = True) -> dict[str, Any]:
        """One note with its label; with `check_source`, whether its source file changed since its commit."""
        return note_json(await manager.notes.get(memory_id, check_source=check_source))

    @v1.post("/notes/recall", response_model=None, responses=answers("object", 400, 422))
    async def recall(body: RecallBody) -> Response:
        """The retrieval for `query`, each result with its note's label (null for a memory of a turn)."""
        found = await manager.notes.recall(body.query, k=body.k, namespace=body.namespace)
        return answer(
            {
                "results": [
                    {**result_json(result), "note": plain(meta.as_dict()) if meta else None} for result, meta in found
                ]
            }
        )

    @v1.post("/boot", response_model=None, responses=answers("object", 400, 422))
    async def boot(body: BootBody) -> Response:
        """The boot context for `task`, inside `budget_tokens` (cl100k_base)."""
        booted = await manager.notes.boot(body.task, budget_tokens=body.budget_tokens, namespace=body.namespace)
        return answer(boot_json(booted))

    return v1
