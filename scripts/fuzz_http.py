#!/usr/bin/env python3
"""Fuzz the daemon's HTTP API from its own OpenAPI schema, with schemathesis, in process.

Every operation gets cases from schemathesis' positive and negative strategies (bodies, query and path
parameters, headers); each case is sent twice to `create_app` over a real MemoryManager in a temporary directory,
through httpx's ASGI transport: with the token and without it. The manager is async and owns its event loop, so it
lives on a loop thread of its own and Hypothesis, which is synchronous, hands each request to it. Checks: no 5xx,
no status the schema does not declare, the schema's content type and body shape (schemathesis' own checks), every
error in the `{"error": {"code", "message"}}` shape, no stack trace in any body, and a 401 for every case sent
without the token (but to /health).

Usage: python scripts/fuzz_http.py --cases 10000 [--per-operation 100]
Last line: cases=N 5xx=0 undocumented=0 tracebacks=0
tests/test_http_fuzz.py runs the same fuzz for a bounded number of cases (AGENT_MEMORY_FUZZ_EXAMPLES per operation
and mode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.openapi.checks import UndefinedStatusCode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.http_guard import PUBLIC_PATHS
from agent_memory.manager import MemoryManager

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "fuzz-token"
BASE_URL = "http://fuzz.test"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
TRACEBACK_MARKS = (b"Traceback", b'File "')
T = TypeVar("T")


@dataclass
class Report:
    """What the fuzz found: `problems` names each one with the request that caused it."""

    cases: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    """Answers by operation and status, with the token: how deep the cases reached."""
    problems: list[str] = field(default_factory=list)

    def add(self, kind: str, what: str) -> None:
        self.counts[kind] += 1
        if len(self.problems) < 50:
            self.problems.append(f"{kind}: {what}")

    @property
    def last_line(self) -> str:
        c = self.counts
        return f"cases={self.cases} 5xx={c['5xx']} undocumented={c['undocumented']} tracebacks={c['tracebacks']}"


class Target:
    """The app over a real store on a loop thread of its own; `send` runs a request there from any thread."""

    def __init__(self, manager: MemoryManager, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.app = loop, create_app(manager, token=TOKEN)
        self.client = self.run(_client(self.app))
        self.schema = schemathesis.openapi.from_dict(self.app.openapi())
        self.operations = [result.ok() for result in self.schema.get_all_operations()]
        paths = self.app.openapi()["paths"]
        self.has_inputs = [
            bool({"parameters", "requestBody"} & set(paths[op.path][op.method])) for op in self.operations
        ]
        """Whether an operation takes anything a negative case could break (else it has no negative case)."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def send(self, case: Case, *, token: bool) -> httpx.Response:
        """`case` with the daemon's token, or without it: then an Authorization header the case carries is sent
        as generated unless it holds the token (Hypothesis draws strings from the constants of the code it runs,
        this module's TOKEN among them, so a generated header can be the real one)."""
        kwargs = case.as_transport_kwargs(base_url=BASE_URL)
        generated = kwargs["headers"]
        headers = {k: v for k, v in generated.items() if k.lower() != "authorization" or _kept(v, token=token)}
        if token:
            headers["Authorization"] = f"Bearer {TOKEN}"
        if "json" in kwargs:
            content: bytes | None = json.dumps(kwargs["json"]).encode()
        else:
            data = kwargs.get("data")
            content = data.encode() if isinstance(data, str) else data
        request = self.client.build_request(
            kwargs["method"],
            kwargs["url"],
            params=kwargs.get("params") or None,
            headers=[(k.encode(), str(v).encode()) for k, v in headers.items()],
            content=content,
        )
        return self.run(self.client.send(request))

    def aclose(self) -> None:
        self.run(self.client.aclose())


def _kept(authorization: Any, *, token: bool) -> bool:
    """Whether a case's own Authorization header is sent: never with the token (which takes its place), and
    without it only when it does not hold the token anyway."""
    return not token and TOKEN not in str(authorization)


async def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


@contextmanager
def target(data_dir: Path, embedder: Embedder) -> Iterator[Target]:
    """A Target over a fresh store in `data_dir` (save.keep_all, so turns are stored and searched)."""
    environ = {"AGENT_MEMORY__SAVE__KEEP_ALL": "true"}
    config = load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(data_dir))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-loop", daemon=True)
    thread.start()
    opened = MemoryManager.open(config, embedder=embedder)
    try:
        manager = asyncio.run_coroutine_threadsafe(opened.__aenter__(), loop).result(timeout=120)
        fuzzed = Target(manager, loop)
        try:
            yield fuzzed
        finally:
            fuzzed.aclose()
            asyncio.run_coroutine_threadsafe(opened.__aexit__(None, None, None), loop).result(timeout=120)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def check(fuzzed: Target, case: Case, report: Report, *, strict: bool) -> None:
    """Send `case` with and without the token and check both answers; `strict` raises at the first problem (so
    Hypothesis shrinks it), else each is counted in `report`."""
    report.cases += 1
    for token in (True, False):
        response = fuzzed.send(case, token=token)
        if token:
            report.statuses[f"{case.method} {case.path} {response.status_code}"] += 1
        what = f"{case.method} {case.formatted_path} token={token} -> {response.status_code} {response.text[:300]!r}"
        before = sum(report.counts.values())
        _check_answer(case, response, report, what, token=token)
        if strict and sum(report.counts.values()) > before:
            raise AssertionError("\n".join(report.problems[-3:]) + f"\n{case.as_curl_command()}")


def _check_answer(case: Case, response: httpx.Response, report: Report, what: str, *, token: bool) -> None:
    if response.status_code >= 500:
        report.add("5xx", what)
    if any(mark in response.content for mark in TRACEBACK_MARKS):
        report.add("tracebacks", what)
    if not token and case.path not in PUBLIC_PATHS and response.status_code != 401:
        report.add("unguarded", what)
    if response.status_code >= 400 and not _error_shaped(response):
        report.add("error_shape", what)
    try:
        case.validate_response(response, checks=CHECKS)
    except FailureGroup as group:
        for failure in group.exceptions:
            kind = "undocumented" if isinstance(failure, UndefinedStatusCode) else "schema"
            if kind != "schema" or response.status_code < 500:  # a 5xx is counted once, above
                report.add(kind, f"{failure.title}: {what}")


def _error_shaped(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) and set(body) == {"error"} else None
    return (
        isinstance(error, dict)
        and {"code", "message"} <= set(error) <= {"code", "message", "details"}
        and all(isinstance(error[k], str) and error[k] for k in ("code", "message"))
        and isinstance(error.get("details", {}), dict)
    )


def fuzz_operation(
    fuzzed: Target, index: int, mode: GenerationMode, report: Report, *, examples: int, strict: bool
) -> None:
    """Up to `examples` cases of operation `index` in `mode` (fewer when its inputs have fewer shapes)."""
    operation = fuzzed.operations[index]

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=strict,
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def one(case: Case) -> None:
        check(fuzzed, case, report, strict=strict)

    one()


def fuzz(fuzzed: Target, *, cases: int, per_operation: int) -> Report:
    """Rounds over every operation, positive and negative, until `cases` cases have been sent."""
    report = Report()
    while report.cases < cases:
        before = report.cases
        for index in range(len(fuzzed.operations)):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                left = cases - report.cases
                if left > 0 and (mode is GenerationMode.POSITIVE or fuzzed.has_inputs[index]):
                    fuzz_operation(fuzzed, index, mode, report, examples=min(per_operation, left), strict=False)
        if report.cases == before:
            break
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--per-operation", type=int, default=100, help="cases per operation and mode in a round")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz-http-") as data_dir:
        embedder = make_embedder(load_config(ROOT / "config" / "default.toml", environ={}))
        with target(Path(data_dir), embedder) as fuzzed:
            report = fuzz(fuzzed, cases=args.cases, per_operation=args.per_operation)
    for problem in report.problems:
        print(problem)
    for answer, n in sorted(report.statuses.items()):
        print(f"{n:6d}  {answer}")
    others = {kind: n for kind, n in report.counts.items() if kind not in ("5xx", "undocumented", "tracebacks")}
    print(f"other problems: {others or 'none'}; {time.monotonic() - started:.0f} s")
    print(report.last_line)
    return 0 if not report.counts else 1


if __name__ == "__main__":
    sys.exit(main())
