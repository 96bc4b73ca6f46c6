"""The HTTP routes of revisions (issue #20): update a memory in place, supersede it, forget and restore it, read its
history, and erase (with its proof). A change
names the revision it read; a stale one is 409 `revision_conflict` with `details: {memory_id, expected, current}`,
and a change to a superseded or merged memory is 409 `not_current`. Included by `create_app` (http.py)."""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.eraser import REASON_MAX
from agent_memory.interfaces.http_guard import errors
from agent_memory.interfaces.wire import plain
from agent_memory.manager import MemoryManager
from agent_memory.models import Memory
from agent_memory.revisions import LABEL_MAX, MAX_REVISION

ERASE_IDS_MAX = 10_000


class ChangeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    content: str
    expected_revision: int = Field(ge=1, le=MAX_REVISION, description="the revision the caller read (get, history)")
    agent: str | None = Field(default=None, max_length=LABEL_MAX)
    reason: str | None = Field(default=None, max_length=LABEL_MAX)


class ForgetBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    expected_revision: int = Field(ge=1, le=MAX_REVISION, description="the revision the caller read (get, history)")
    agent: str | None = Field(default=None, max_length=LABEL_MAX)
    reason: str | None = Field(default=None, max_length=LABEL_MAX)


class EraseBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str = Field(min_length=1, max_length=REASON_MAX, description="why the words must go (kept; no quotes)")
    memory_ids: list[str] = Field(default_factory=list, max_length=ERASE_IDS_MAX)
    turn_ids: list[str] = Field(default_factory=list, max_length=ERASE_IDS_MAX)
    session_id: str | None = None
    namespace: str = "default"
    whole_namespace: bool = False
    dry_run: bool = Field(default=False, description="say what would go; change nothing")


class RestoreBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    agent: str | None = Field(default=None, max_length=LABEL_MAX)
    reason: str | None = Field(default=None, max_length=LABEL_MAX)


def _memory(memory: Memory) -> dict[str, Any]:
    return cast(dict[str, Any], plain(memory))


def revision_routes(manager: MemoryManager) -> APIRouter:
    v1 = APIRouter(prefix="/v1")

    @v1.post("/memories/{memory_id}/update", responses=errors(400, 404, 409, 422))
    async def update(memory_id: str, body: ChangeBody) -> dict[str, Any]:
        """Change the memory's words in place; the answer is the memory at its new revision."""
        changed = await manager.update(
            memory_id, body.content, expected_revision=body.expected_revision, agent=body.agent, reason=body.reason
        )
        return _memory(changed)

    @v1.post("/memories/{memory_id}/supersede", responses=errors(400, 404, 409, 422))
    async def supersede(memory_id: str, body: ChangeBody) -> dict[str, Any]:
        """Replace the memory by a new one saying `content`; the answer is the new memory."""
        new = await manager.supersede(
            memory_id, body.content, expected_revision=body.expected_revision, agent=body.agent, reason=body.reason
        )
        return _memory(new)

    @v1.post("/memories/{memory_id}/forget", responses=errors(400, 404, 409, 422))
    async def forget(memory_id: str, body: ForgetBody) -> dict[str, Any]:
        """Take the memory out of every recall path (the log keeps its words); the answer is the memory, forgotten."""
        gone = await manager.forget(
            memory_id, expected_revision=body.expected_revision, agent=body.agent, reason=body.reason
        )
        return _memory(gone)

    @v1.post("/memories/{memory_id}/restore", responses=errors(400, 404, 422))
    async def restore(memory_id: str, body: RestoreBody | None = None) -> dict[str, Any]:
        """Bring a forgotten memory back into recall (400 invalid_input when it is not forgotten)."""
        back = await manager.restore(
            memory_id, agent=body.agent if body else None, reason=body.reason if body else None
        )
        return _memory(back)

    @v1.post("/erase", responses=errors(400, 404, 422))
    async def erase(body: EraseBody) -> dict[str, Any]:
        """Remove every byte of the named content from every file of the data directory; the answer is what went
        and the proof (a scan of every file: files, bytes, hits; hits must be 0). With `dry_run`, what would go."""
        selection: dict[str, Any] = {
            "memory_ids": body.memory_ids, "turn_ids": body.turn_ids, "session_id": body.session_id,
            "namespace": body.namespace, "whole_namespace": body.whole_namespace,
        }  # fmt: skip
        if body.dry_run:
            return {"dry_run": True, **(await manager.erase_plan(**selection)).as_dict()}
        return (await manager.erase(reason=body.reason, **selection)).as_dict()

    @v1.get("/memories/{memory_id}/history", responses=errors(404, 422))
    async def history(memory_id: str) -> list[dict[str, Any]]:
        """Every earlier revision of the memory, oldest first."""
        return cast(list[dict[str, Any]], plain(await manager.history(memory_id)))

    return v1
