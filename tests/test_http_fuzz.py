"""The HTTP API fuzzed from its own OpenAPI schema with schemathesis (issue 19), in process over a real store.

The harness is scripts/fuzz_http.py's: every operation, positive and negative cases, each sent with the token and
without it; no 5xx, no status the schema does not declare, the declared content type and body shape, every error
in the `{"error": {"code", "message"}}` shape, no stack trace in a body, 401 without the token. CI runs
AGENT_MEMORY_FUZZ_EXAMPLES cases per operation and mode (30 by default); by hand, `AGENT_MEMORY_FUZZ_EXAMPLES=500`
or `python scripts/fuzz_http.py --cases 10000`. A failing case is shrunk by Hypothesis and printed with its curl.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from schemathesis import GenerationMode

from agent_memory.embeddings.text import Embedder

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("AGENT_MEMORY_FUZZ_EXAMPLES", "30"))


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_http", ROOT / "scripts" / "fuzz_http.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz_http = _harness()
"""Loaded from its file (scripts/ is no package): a Target, as `fuzzed` below, is typed Any here."""


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[Any]:
    with fuzz_http.target(tmp_path_factory.mktemp("fuzz"), embedder) as target:
        yield target


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_every_route_holds_up_to_fuzzed_requests(fuzzed: Any, mode: GenerationMode) -> None:
    report = fuzz_http.Report()
    fuzzable = [i for i in range(len(fuzzed.operations)) if mode is GenerationMode.POSITIVE or fuzzed.has_inputs[i]]
    for index in fuzzable:
        fuzz_http.fuzz_operation(fuzzed, index, mode, report, examples=EXAMPLES, strict=True)
    assert not report.counts, report.problems
    routes = {f"{fuzzed.operations[i].method.upper()} {fuzzed.operations[i].path}" for i in fuzzable}
    assert {answer.rsplit(" ", 1)[0] for answer in report.statuses} == routes  # every route was reached
    if mode is GenerationMode.POSITIVE:  # and cases of the right shape got past validation to the memory
        wanted = {"POST /v1/turns 200", "POST /v1/retrieve 200", "POST /v1/context 200"}
        answered = {route: n for route, n in report.statuses.items() if route.rsplit(" ", 1)[0] in routes_of(wanted)}
        assert wanted <= set(report.statuses), answered  # what those routes answered instead, when one never gave 200


def routes_of(answers: set[str]) -> set[str]:
    return {answer.rsplit(" ", 1)[0] for answer in answers}


def test_the_checks_catch_what_they_look_for(fuzzed: Any) -> None:
    """A 500 with a traceback, a status the schema does not declare and a bare error: each is counted."""
    operation = next(op for op in fuzzed.operations if op.path == "/v1/stats")
    case = operation.Case()
    request = httpx.Request("GET", f"{fuzz_http.BASE_URL}/v1/stats")
    answers = {
        "5xx": httpx.Response(500, text='Traceback (most recent call last):\n  File "x.py"', request=request),
        "undocumented": httpx.Response(418, json={"error": {"code": "teapot", "message": "no"}}, request=request),
        "error_shape": httpx.Response(404, json={"detail": "Not Found"}, request=request),
    }
    for kind, response in answers.items():
        response.elapsed = timedelta(0)  # as a sent request's answer has it
        report = fuzz_http.Report()
        fuzz_http._check_answer(case, response, report, kind, token=True)
        assert report.counts[kind] == 1, (kind, report.counts)
        assert kind != "5xx" or report.counts["tracebacks"] == 1
    report = fuzz_http.Report()
    ok = httpx.Response(200, json={"records": {}}, request=request)
    ok.elapsed = timedelta(0)
    fuzz_http._check_answer(case, ok, report, "without the token", token=False)
    assert report.counts == {"unguarded": 1}


def test_a_case_sent_without_the_token_never_carries_it(fuzzed: Any) -> None:
    """Hypothesis draws strings from the constants of the code it runs, the harness's TOKEN among them: a negative
    case once carried `Authorization: Bearer fuzz-token`, so "without the token" sent the token, the body was read,
    and the 400 it got was counted as an unguarded route. Such a header is dropped; any other is sent as generated."""
    operation = next(op for op in fuzzed.operations if op.path == "/v1/memories/{memory_id}/update")
    for authorization, sent in ((f"Bearer {fuzz_http.TOKEN}", None), ("Bearer not-the-token", "Bearer not-the-token")):
        headers = {"Authorization": authorization}
        case = operation.Case(path_parameters={"memory_id": "0"}, headers=headers, body=b"\x00")
        answer = fuzzed.send(case, token=False)
        assert answer.request.headers.get("authorization") == sent
        assert (answer.status_code, answer.json()["error"]["code"]) == (401, "unauthorized"), answer.text
    with_token = fuzzed.send(case, token=True)  # the same bad body with the token is read, and refused for what it is
    assert (with_token.status_code, with_token.json()["error"]["code"]) == (400, "malformed_json")
