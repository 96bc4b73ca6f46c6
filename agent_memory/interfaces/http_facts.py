"""The HTTP routes of versioned facts (issue #20): state one, read what was true (and known) at a time, and read a
fact's history. Included by `create_app` (http.py); a bad key, value or time is 400 `invalid_input` from the
memory, or 422 `invalid_request` for a body of the wrong shape."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.facts import KEY_MAX, SOURCE_MAX, VALUE_MAX
from agent_memory.interfaces.http_guard import answers, errors
from agent_memory.interfaces.wire import answer, plain
from agent_memory.manager import MemoryManager
from agent_memory.models import Fact


class FactBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    subject: str = Field(max_length=KEY_MAX)
    attribute: str = Field(max_length=KEY_MAX)
    value: str = Field(max_length=VALUE_MAX)
    valid_at: datetime | None = Field(default=None, strict=False, description="when it became true (default: now)")
    source: str | None = Field(default=None, max_length=SOURCE_MAX)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    namespace: str = "default"


class ObserveBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    turn_ids: list[str] = Field(max_length=1000)


def _fact(fact: Fact) -> dict[str, Any]:
    return cast(dict[str, Any], plain(fact))


def fact_routes(manager: MemoryManager) -> APIRouter:
    v1 = APIRouter(prefix="/v1")

    @v1.post("/facts", responses=errors(400, 422))
    async def remember(body: FactBody) -> dict[str, Any]:
        """State a fact; the answer is the row that now holds the value."""
        fact = await manager.remember_fact(
            body.subject,
            body.attribute,
            body.value,
            valid_at=body.valid_at,
            source=body.source,
            confidence=body.confidence,
            namespace=body.namespace,
        )
        return _fact(fact)

    @v1.get("/facts", responses=errors(400, 422))
    async def facts(
        subject: str | None = None,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str = "default",
    ) -> list[dict[str, Any]]:
        """The facts true at `as_of` as the store knew them at `known_at` (both default to now)."""
        found = await manager.facts(subject, as_of=as_of, known_at=known_at, namespace=namespace)
        return [_fact(f) for f in found]

    @v1.post("/facts/observe", response_model=None, responses=answers("array", 400, 404, 422))
    async def observe(body: ObserveBody) -> Response:
        """The policy step on the facts these stored turns state (a turn already through it: its decisions)."""
        return answer(plain(await manager.observe_facts(body.turn_ids)))

    @v1.get("/facts/history", responses=errors(400, 422))
    async def history(subject: str, attribute: str, namespace: str = "default") -> list[dict[str, Any]]:
        """Every value of (subject, attribute), with the interval it was true in."""
        return [_fact(f) for f in await manager.fact_history(subject, attribute, namespace=namespace)]

    return v1
