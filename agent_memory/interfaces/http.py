"""The daemon's HTTP API: JSON in and out over one MemoryManager, a bearer token on every route but /health.

Errors are JSON with a stable code, `{"error": {"code": ..., "message": ...}}`; `ERRORS` maps each exception
class to its HTTP status and code (the nearest class in an exception's MRO wins), `HTTP_CODES` the framework's own
refusals (no such route, a body that does not parse), and http_guard.py refuses a request without the token, or
with a body too large or too slow, before the app reads it. docs/daemon.md lists every code; the OpenAPI schema
declares every status each route answers. Request bodies are strict: `"1"` is not a turn number, nor `true`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent_memory.config import ServeConfig
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
    MemoryErased,
    MemoryNotCurrent,
    ModelError,
    NotFound,
    RevisionConflict,
    StorageError,
)
from agent_memory.interfaces.http_facts import fact_routes
from agent_memory.interfaces.http_guard import UNAUTHORIZED, CatchAll, RequestGuard, answers, error_body, errors
from agent_memory.interfaces.http_notes import note_routes
from agent_memory.interfaces.http_revisions import revision_routes
from agent_memory.interfaces.wire import answer, encoded, plain
from agent_memory.manager import MemoryManager
from agent_memory.models import Context, DoctorReport, JobRun, Memory, RetrievalResult, Role, TurnInput, TurnResult
from agent_memory.policy.export import policy_lines
from agent_memory.sleep.jobs import JOBS, run_job
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import (
    IDENTIFIER,
    MAX_BUDGET_TOKENS,
    MAX_K,
    MAX_PREPARED_TEXTS,
    MAX_TURN_NUMBER,
    MAX_TURNS_PER_CALL,
    TIME_RULE,
    check_aware,
)

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
    RevisionConflict: (409, "revision_conflict"),
    MemoryNotCurrent: (409, "not_current"),
    MemoryErased: (404, "erased"),
    NotFound: (404, "not_found"),
    ClosedError: (503, "closed"),
    StorageError: (500, "storage_error"),
    ImageMemoryUnavailable: (503, "image_memory_unavailable"),
    ModelError: (500, "model_error"),
    ConfigError: (500, "config_error"),
    AgentMemoryError: (500, "internal_error"),
    Exception: (500, "internal_error"),
}
REQUEST_CODES = {400: "malformed_json", 422: "invalid_request"}
"""A body that is not JSON, and JSON of the wrong shape (FastAPI's RequestValidationError)."""
HTTP_CODES = {400: "malformed_json", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}
"""The codes of the framework's own refusals (starlette HTTPException): 400 is FastAPI's "There was an error
parsing the body" (bytes that are not UTF-8, JSON nested past Python's recursion limit); any other status would be
`http_error`, which no route is known to answer."""
EXPORT_STREAMED = (
    "The export is not written on the daemon's machine: GET /v1/export/policy?labelled_only=true streams it as "
    "JSONL (agent-memory export policy --out FILE writes it where the command runs)"
)


def error_response(exc: Exception) -> JSONResponse:
    """The one place an exception becomes a response, through `ERRORS`."""
    status, code = next(ERRORS[cls] for cls in type(exc).__mro__ if cls in ERRORS)
    if code == "internal_error":
        log.error("internal error answering a request", exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    details: dict[str, Any] | None = None
    if isinstance(exc, RevisionConflict):
        details = {"memory_id": exc.memory_id, "expected": exc.expected, "current": exc.current}
    elif isinstance(exc, DuplicateTurn):
        details = {"namespace": exc.namespace, "session_id": exc.session_id, "turn_number": exc.turn_number}
    body = error_body(code, str(exc) or type(exc).__name__, details)
    return JSONResponse(body, status_code=status, headers=headers)


# ----- request bodies ---------------------------------------------------------------------------------


def _iso_only(value: object) -> object:
    if isinstance(value, str | datetime):
        return value
    raise ValueError("a time is an ISO-8601 string with an offset")


Time = Annotated[
    datetime, Strict(False), BeforeValidator(_iso_only), AfterValidator(lambda at: check_aware("the time", at))
]
"""An ISO-8601 string (strict mode would refuse any string), aware and within TIME_RULE."""
Identifier = Annotated[str, Field(json_schema_extra={"pattern": IDENTIFIER.pattern})]
"""Checked by the memory (400 invalid_identifier); the pattern tells a client, and the fuzz, what it takes."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Emotion(_Body):
    valence: float = Field(default=0.0, ge=-1.0, le=1.0)
    arousal: float = Field(default=0.0, ge=0.0, le=1.0)


class TurnBody(_Body):
    session_id: Identifier
    turn_number: int = Field(ge=0, le=MAX_TURN_NUMBER)
    content: str
    role: Annotated[str, Field(json_schema_extra={"enum": [role.value for role in Role]})] = "user"
    emotional_context: Emotion | None = None
    at: Time | None = Field(default=None, description=TIME_RULE)
    namespace: Identifier = "default"

    def to_input(self) -> TurnInput:
        emotion = self.emotional_context.model_dump() if self.emotional_context else None
        return TurnInput(self.session_id, self.turn_number, self.content, self.role, emotion, self.at, self.namespace)


class BulkBody(_Body):
    turns: list[TurnBody] = Field(max_length=MAX_TURNS_PER_CALL)
    bulk: bool = False
    """An import (a history brought in, not a conversation under way): what it keeps is embedded by
    `embedding.import_precision`, and made again in float32 while the store is idle (vector_upgrade.py)."""


class PrepareBody(_Body):
    texts: list[str] = Field(max_length=MAX_PREPARED_TEXTS)
    bulk: bool = False
    """Texts of an import's next batch: embedded by `embedding.import_precision`, as its turns will be."""


class RetrieveBody(_Body):
    query: str
    k: int | None = Field(default=None, ge=1, le=MAX_K)
    namespace: Identifier = "default"
    emotional_context: Emotion | None = None
    now: Time | None = None
    as_of: Time | None = None


class ContextBody(_Body):
    query: str
    budget_tokens: int = Field(default=2048, ge=1, le=MAX_BUDGET_TOKENS)
    namespace: Identifier = "default"
    emotional_context: Emotion | None = None
    now: Time | None = None
    as_of: Time | None = None


class JobBody(_Body):
    now: Time | None = None
    out: str | None = Field(default=None, description="Refused (400): GET /v1/export/policy streams the export")
    labelled_only: bool = Field(default=True, description="Export only, which is refused (see `out`)")
    roles: list[Literal["user", "assistant", "system", "tool"]] | None = Field(
        default=None, description="forget only: forget memories of turns in these roles"
    )
    before: Time | None = Field(default=None, description="forget only: ... and of turns said before this")
    phatic: bool | None = Field(default=None, description="forget only: ... and phatic ones")
    namespace: str | None = Field(default=None, description="forget and compress: in this namespace (default: all)")
    dry_run: bool = Field(default=False, description="forget and compress: count, change nothing")
    cap: int | None = Field(
        default=None, ge=1, description="compress only: tokens a memory keeps at most (default sleep.compress_tokens)"
    )


class NDJSONResponse(StreamingResponse):
    media_type = "application/x-ndjson"


# ----- response shapes --------------------------------------------------------------------------------


def turn_json(result: TurnResult) -> dict[str, Any]:
    return {
        "turn_id": result.turn_id,
        "saved": result.saved,
        "memory_id": result.memory_id,
        "reason": result.reason,
        "path": result.decision.path.value,
        "chunks": result.chunks,
    }


def memory_json(memory: Memory) -> dict[str, Any]:
    return cast(dict[str, Any], plain(memory))


def result_json(result: RetrievalResult) -> dict[str, Any]:
    layers = {name: {"layer": hit.layer, "rank": hit.rank, "score": hit.score} for name, hit in result.layers.items()}
    return {"rank": result.rank, "score": result.score, "layers": layers, "memory": memory_json(result.memory)}


def context_json(context: Context) -> dict[str, Any]:
    items = [{**result_json(item.result), "tokens": item.tokens, "reply": plain(item.reply)} for item in context.items]
    return {
        "text": context.text,
        "tokens": context.tokens,
        "budget": context.budget,
        "counter": context.counter,
        "items": items,
        "excluded": plain(context.excluded),
        "facts": plain(context.facts),
    }


def run_json(run: JobRun) -> dict[str, Any]:
    return cast(dict[str, Any], plain(run))


def doctor_json(report: DoctorReport) -> dict[str, Any]:
    data: dict[str, Any] = plain(report)
    return {**data, "consistent": report.consistent}


# ----- the app ----------------------------------------------------------------------------------------


SERVE = ServeConfig()


def create_app(
    manager: MemoryManager,
    *,
    token: str,
    scheduler: Any | None = None,
    max_body_bytes: int = SERVE.max_body_bytes,
    body_timeout: timedelta = SERVE.body_timeout,
) -> FastAPI:
    """The API over `manager`; every /v1 route needs `Authorization: Bearer <token>`, checked before the body is
    read, and a body is refused past `max_body_bytes` or `body_timeout` (http_guard.py). `scheduler` (the
    daemon's APScheduler, if any) is listed by GET /v1/schedule."""
    app = FastAPI(  # no Swagger or ReDoc pages: they load their scripts from a CDN, and nothing here goes online
        title="agent-memory", summary="A local-first memory for AI agents", version="1", docs_url=None, redoc_url=None
    )
    app.add_middleware(CatchAll, on_error=error_response)
    app.add_middleware(RequestGuard, token=token, max_body_bytes=max_body_bytes, body_timeout=body_timeout)
    app.add_exception_handler(AgentMemoryError, _on_error)
    app.add_exception_handler(Unauthorized, _on_error)
    app.add_exception_handler(RequestValidationError, _on_invalid_request)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)

    @app.get("/health", responses=errors(408, 413))
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    bearer = [Depends(BearerToken(token))]  # the guard checked it already; this declares it in the schema
    app.include_router(_routes(manager, scheduler), dependencies=bearer, responses=errors(401, 408, 413, 500, 503))
    app.include_router(_streams(manager), dependencies=bearer)
    for router in (revision_routes(manager), fact_routes(manager), note_routes(manager)):
        app.include_router(router, dependencies=bearer, responses=errors(401, 408, 413, 500, 503))
    return app


BEARER = HTTPBearer(auto_error=False, description="The token in data_dir/api_token")


class BearerToken:
    """The dependency every /v1 route has: the request's bearer token, compared in constant time."""

    def __init__(self, token: str) -> None:
        self.expected = token.encode()

    async def __call__(self, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        given = credentials.credentials.encode() if credentials else b""
        if not hmac.compare_digest(given, self.expected):
            raise Unauthorized(UNAUTHORIZED)


def _routes(manager: MemoryManager, scheduler: Any | None) -> APIRouter:
    v1 = APIRouter(prefix="/v1")

    @v1.post("/turns", response_model=None, responses=answers("object", 400, 409, 422))
    async def process_turn(body: TurnBody) -> Response:
        return answer(turn_json((await manager.process_turns([body.to_input()]))[0]))

    @v1.post("/turns/bulk", response_model=None, responses=answers("array", 400, 409, 422))
    async def process_turns(body: BulkBody) -> Response:
        done = await manager.process_turns([t.to_input() for t in body.turns], bulk=body.bulk)
        return answer([turn_json(r) for r in done])

    @v1.post("/turns/prepare", responses=errors(400, 422))
    async def prepare_turns(body: PrepareBody) -> dict[str, int]:
        """Embed texts about to be sent as turns (the proxy, while its upstream answers); nothing is stored."""
        await manager.prepare_turns(body.texts, bulk=body.bulk)
        return {"texts": len(body.texts)}

    @v1.post("/retrieve", response_model=None, responses=answers("array", 400, 422))
    async def retrieve(body: RetrieveBody) -> Response:
        emotion = body.emotional_context.model_dump() if body.emotional_context else None
        results = await manager.retrieve(
            body.query, emotional_context=emotion, k=body.k, namespace=body.namespace, now=body.now, as_of=body.as_of
        )
        return await encoded(lambda: [result_json(r) for r in results], len(results))

    @v1.post("/context", response_model=None, responses=answers("object", 400, 422))
    async def context(body: ContextBody) -> Response:
        emotion = body.emotional_context.model_dump() if body.emotional_context else None
        packed = await manager.context(
            body.query,
            budget_tokens=body.budget_tokens,
            emotional_context=emotion,
            namespace=body.namespace,
            now=body.now,
            as_of=body.as_of,
        )
        return await encoded(lambda: context_json(packed), len(packed.items))

    @v1.get("/memories/{memory_id}", response_model=None, responses=answers("object", 404, 422))
    async def get_memory(memory_id: str, original: bool = False) -> Response:
        """`original=true`: also the words of its turn as logged (`original`), which a compressed memory cut."""
        return answer(memory_json(await manager.get(memory_id, original=original)))

    @v1.get("/stats")
    async def stats() -> dict[str, Any]:
        return cast(dict[str, Any], jsonable_encoder(await manager.stats()))

    @v1.get("/doctor", responses=errors(422))
    async def doctor(repair: bool = False) -> dict[str, Any]:
        return doctor_json(await manager.doctor(repair=repair))

    @v1.post("/jobs/{name}", responses=errors(400, 404, 422))
    async def run(
        name: Annotated[str, Path(json_schema_extra={"enum": sorted(JOBS)})], body: JobBody | None = None
    ) -> dict[str, Any]:
        return run_json(await run_job(manager, name, now=body.now if body else None, **_job_options(name, body)))

    @v1.get("/jobs", responses=errors(422))
    async def history(job: str | None = None, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[dict[str, Any]]:
        return [run_json(r) for r in await manager.records.job_runs(job or None, limit=limit)]

    @v1.get("/schedule")
    async def schedule() -> list[dict[str, Any]]:
        jobs = scheduler.get_jobs() if scheduler is not None else []
        return [{"job": j.id, "next_run_at": jsonable_encoder(j.next_run_time)} for j in jobs]

    return v1


def _streams(manager: MemoryManager) -> APIRouter:
    """The routes whose answer is not JSON (their errors are)."""
    v1 = APIRouter(prefix="/v1")
    ndjson = {"description": "The export job's lines, a decision each", "content": {NDJSONResponse.media_type: {}}}

    @v1.get(
        "/export/policy",
        response_class=NDJSONResponse,
        responses={200: ndjson, **errors(401, 408, 413, 422, 500, 503, by_ref=True)},
    )
    async def export_policy(labelled_only: bool = True) -> NDJSONResponse:
        """The policy export (docs/policy-export.md) streamed as JSONL: the caller writes it where it wants."""
        await manager.settle()  # as the export job does: the last retrievals' records are in it
        return NDJSONResponse(await _started(export_bytes(manager.records, labelled_only=labelled_only)))

    return v1


def _job_options(name: str, body: JobBody | None) -> dict[str, Any]:
    """Export writes a file, and the HTTP caller does not choose the daemon's paths: it is streamed instead."""
    if name == "export":
        raise InvalidInput(EXPORT_STREAMED)
    if name == "forget" and body is not None:
        return body.model_dump(include={"roles", "before", "phatic", "namespace", "dry_run"})
    if name == "compress" and body is not None:
        return body.model_dump(include={"cap", "namespace", "dry_run"})
    return {}


async def export_bytes(records: SqliteRecords, *, labelled_only: bool) -> AsyncIterator[bytes]:
    """The export job's lines (policy/export.py): save decisions, then retrievals, up to 1,000 lines a chunk."""
    async for _, chunk in policy_lines(records, labelled_only=labelled_only):
        yield "".join(chunk).encode("utf-8")


async def _started(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks` with the first one read now: an error before the first byte is an error answer, not a cut stream."""
    first = await anext(chunks, b"")

    async def all_of_them() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    return all_of_them()


# ----- error handlers ---------------------------------------------------------------------------------


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


async def _on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """A body that is not JSON is 400 malformed_json with the parser's message; JSON of the wrong shape is 422."""
    assert isinstance(exc, RequestValidationError)
    problems = list(exc.errors())
    for error in problems:
        if error.get("type") == "json_invalid":
            detail = (error.get("ctx") or {}).get("error", error.get("msg"))
            return JSONResponse(error_body(REQUEST_CODES[400], f"The body is not valid JSON: {detail}"), 400)
    message = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in problems)
    return JSONResponse(error_body(REQUEST_CODES[422], message or "Invalid request"), 422)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    """The framework's refusals (no such path, wrong method, a body that does not parse) in the same shape as
    every other error, with a code from HTTP_CODES."""
    assert isinstance(exc, StarletteHTTPException)
    code = HTTP_CODES.get(exc.status_code, "http_error")
    cause = exc.__cause__
    detail = f"{exc.detail}: {type(cause).__name__}: {cause}" if cause is not None else str(exc.detail)
    return JSONResponse(error_body(code, detail), exc.status_code, headers=exc.headers)
