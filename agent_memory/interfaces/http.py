"""The daemon's HTTP API: JSON in and out over one MemoryManager, a bearer token on every route but /health.

Errors are JSON with a stable code, `{"error": {"code": ..., "message": ...}}`; `ERRORS` maps each exception
class to its HTTP status and code (the nearest class in an exception's MRO wins). docs/daemon.md lists them.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_memory.errors import (
    AgentMemoryError,
    ClosedError,
    ConfigError,
    ContentTooLarge,
    DuplicateTurn,
    EmptyContent,
    ImageMemoryUnavailable,
    InvalidEncoding,
    InvalidIdentifier,
    InvalidImage,
    InvalidInput,
    ModelError,
    NotFound,
    StorageError,
)
from agent_memory.manager import MemoryManager
from agent_memory.models import Context, DoctorReport, JobRun, Memory, RetrievalResult, TurnInput, TurnResult
from agent_memory.sleep.jobs import run_job

log = logging.getLogger(__name__)


class Unauthorized(Exception):
    """No bearer token, or not the daemon's."""


ERRORS: dict[type[Exception], tuple[int, str]] = {
    Unauthorized: (401, "unauthorized"),
    InvalidInput: (400, "invalid_input"),
    EmptyContent: (400, "empty_content"),
    ContentTooLarge: (400, "content_too_large"),
    InvalidEncoding: (400, "invalid_encoding"),
    InvalidIdentifier: (400, "invalid_identifier"),
    InvalidImage: (400, "invalid_image"),
    DuplicateTurn: (409, "duplicate_turn"),
    NotFound: (404, "not_found"),
    ClosedError: (503, "closed"),
    StorageError: (500, "storage_error"),
    ImageMemoryUnavailable: (503, "image_memory_unavailable"),
    ModelError: (500, "model_error"),
    ConfigError: (500, "config_error"),
    AgentMemoryError: (500, "internal_error"),
    Exception: (500, "internal_error"),
}


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def error_response(exc: Exception) -> JSONResponse:
    """The one place an exception becomes a response, through `ERRORS`."""
    status, code = next(ERRORS[cls] for cls in type(exc).__mro__ if cls in ERRORS)
    if code == "internal_error":
        log.error("internal error answering a request", exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error_body(code, str(exc) or type(exc).__name__), status_code=status, headers=headers)


# ----- request bodies ---------------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Emotion(_Body):
    valence: float = Field(default=0.0, ge=-1.0, le=1.0)
    arousal: float = Field(default=0.0, ge=0.0, le=1.0)


class TurnBody(_Body):
    session_id: str
    turn_number: int
    content: str
    role: str = "user"
    emotional_context: Emotion | None = None
    at: datetime | None = None
    namespace: str = "default"

    def to_input(self) -> TurnInput:
        emotion = self.emotional_context.model_dump() if self.emotional_context else None
        return TurnInput(self.session_id, self.turn_number, self.content, self.role, emotion, self.at, self.namespace)


class BulkBody(_Body):
    turns: list[TurnBody]


class RetrieveBody(_Body):
    query: str
    k: int | None = Field(default=None, ge=1)
    namespace: str = "default"
    emotional_context: Emotion | None = None
    now: datetime | None = None
    as_of: datetime | None = None


class ContextBody(_Body):
    query: str
    budget_tokens: int = Field(default=2048, ge=1)
    namespace: str = "default"
    emotional_context: Emotion | None = None
    now: datetime | None = None
    as_of: datetime | None = None


class JobBody(_Body):
    now: datetime | None = None
    out: str | None = None
    """export only: the JSONL file to write, on the daemon's machine."""
    labelled_only: bool = True
    """export only: leave out decisions not labelled yet."""


# ----- response shapes --------------------------------------------------------------------------------


def turn_json(result: TurnResult) -> dict[str, Any]:
    return {
        "turn_id": result.turn_id,
        "saved": result.saved,
        "memory_id": result.memory_id,
        "reason": result.reason,
        "path": result.decision.path.value,
    }


def memory_json(memory: Memory) -> dict[str, Any]:
    data: dict[str, Any] = jsonable_encoder(asdict(memory))
    return data


def result_json(result: RetrievalResult) -> dict[str, Any]:
    layers = {name: {"layer": hit.layer, "rank": hit.rank, "score": hit.score} for name, hit in result.layers.items()}
    return {"rank": result.rank, "score": result.score, "layers": layers, "memory": memory_json(result.memory)}


def context_json(context: Context) -> dict[str, Any]:
    items = [{**result_json(item.result), "tokens": item.tokens} for item in context.items]
    excluded = [asdict(e) for e in context.excluded]
    return {
        "text": context.text,
        "tokens": context.tokens,
        "budget": context.budget,
        "counter": context.counter,
        "items": items,
        "excluded": excluded,
    }


def run_json(run: JobRun) -> dict[str, Any]:
    data: dict[str, Any] = jsonable_encoder(asdict(run))
    return data


def doctor_json(report: DoctorReport) -> dict[str, Any]:
    data: dict[str, Any] = jsonable_encoder(asdict(report))
    return {**data, "consistent": report.consistent}


# ----- the app ----------------------------------------------------------------------------------------


def create_app(manager: MemoryManager, *, token: str, scheduler: Any | None = None) -> FastAPI:
    """The API over `manager`; every /v1 route needs `Authorization: Bearer <token>`. `scheduler` (the daemon's
    APScheduler, if any) is listed by GET /v1/schedule."""
    app = FastAPI(  # no Swagger or ReDoc pages: they load their scripts from a CDN, and nothing here goes online
        title="agent-memory", summary="A local-first memory for AI agents", version="1", docs_url=None, redoc_url=None
    )
    app.add_middleware(CatchAll)
    app.add_exception_handler(AgentMemoryError, _on_error)
    app.add_exception_handler(Unauthorized, _on_error)
    app.add_exception_handler(RequestValidationError, _on_invalid_request)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(_routes(manager, scheduler), dependencies=[Depends(BearerToken(token))])
    return app


BEARER = HTTPBearer(auto_error=False, description="The token in data_dir/api_token")


class BearerToken:
    """The dependency every /v1 route has: the request's bearer token, compared in constant time."""

    def __init__(self, token: str) -> None:
        self.expected = token.encode()

    async def __call__(self, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        given = credentials.credentials.encode() if credentials else b""
        if not hmac.compare_digest(given, self.expected):
            raise Unauthorized("A valid bearer token is required (Authorization: Bearer <data_dir/api_token>)")


def _routes(manager: MemoryManager, scheduler: Any | None) -> APIRouter:
    v1 = APIRouter(prefix="/v1")

    @v1.post("/turns")
    async def process_turn(body: TurnBody) -> dict[str, Any]:
        return turn_json((await manager.process_turns([body.to_input()]))[0])

    @v1.post("/turns/bulk")
    async def process_turns(body: BulkBody) -> list[dict[str, Any]]:
        return [turn_json(r) for r in await manager.process_turns([t.to_input() for t in body.turns])]

    @v1.post("/retrieve")
    async def retrieve(body: RetrieveBody) -> list[dict[str, Any]]:
        emotion = body.emotional_context.model_dump() if body.emotional_context else None
        results = await manager.retrieve(
            body.query, emotional_context=emotion, k=body.k, namespace=body.namespace, now=body.now, as_of=body.as_of
        )
        return [result_json(r) for r in results]

    @v1.post("/context")
    async def context(body: ContextBody) -> dict[str, Any]:
        emotion = body.emotional_context.model_dump() if body.emotional_context else None
        packed = await manager.context(
            body.query,
            budget_tokens=body.budget_tokens,
            emotional_context=emotion,
            namespace=body.namespace,
            now=body.now,
            as_of=body.as_of,
        )
        return context_json(packed)

    @v1.get("/memories/{memory_id}")
    async def get_memory(memory_id: str) -> dict[str, Any]:
        return memory_json(await manager.get(memory_id))

    @v1.get("/stats")
    async def stats() -> dict[str, Any]:
        data: dict[str, Any] = jsonable_encoder(await manager.stats())
        return data

    @v1.get("/doctor")
    async def doctor(repair: bool = False) -> dict[str, Any]:
        return doctor_json(await manager.doctor(repair=repair))

    @v1.post("/jobs/{name}")
    async def run(name: str, body: JobBody | None = None) -> dict[str, Any]:
        return run_json(await run_job(manager, name, now=body.now if body else None, **_job_options(name, body)))

    @v1.get("/jobs")
    async def history(job: str | None = None, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[dict[str, Any]]:
        return [run_json(r) for r in await manager.records.job_runs(job or None, limit=limit)]

    @v1.get("/schedule")
    async def schedule() -> list[dict[str, Any]]:
        jobs = scheduler.get_jobs() if scheduler is not None else []
        return [{"job": j.id, "next_run_at": jsonable_encoder(j.next_run_time)} for j in jobs]

    return v1


def _job_options(name: str, body: JobBody | None) -> dict[str, Any]:
    if name != "export":
        return {}
    if body is None or not body.out:
        raise InvalidInput('The export job needs {"out": "<path of the JSONL file to write>"}')
    return {"out": Path(body.out).expanduser(), "labelled_only": body.labelled_only}


# ----- error handlers ---------------------------------------------------------------------------------


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


async def _on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """A body that is not JSON is 400 malformed_json with the parser's message; JSON of the wrong shape is 422."""
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for error in errors:
        if error.get("type") == "json_invalid":
            detail = (error.get("ctx") or {}).get("error", error.get("msg"))
            return JSONResponse(error_body("malformed_json", f"The body is not valid JSON: {detail}"), 400)
    message = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)
    return JSONResponse(error_body("invalid_request", message or "Invalid request"), 422)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    """Routing errors (no such path, wrong method) in the same shape as every other error."""
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse(error_body(code, str(exc.detail)), exc.status_code, headers=exc.headers)


class CatchAll:
    """Anything no handler took becomes 500 internal_error (logged), not a bare text page and a raised error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started or scope["type"] != "http":
                raise
            await error_response(exc)(scope, receive, send)
