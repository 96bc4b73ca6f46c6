"""The HTTP API through httpx's ASGI transport over a real MemoryManager, and once through a real daemon process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.http import create_app, error_response
from agent_memory.interfaces.token import load_or_create_token
from agent_memory.manager import MemoryManager

TURN = {"session_id": "s1", "turn_number": 1, "content": "My sister Ana moved to Porto to study marine biology"}


@pytest.fixture
async def client(config: Config, embedder: Embedder) -> AsyncIterator[httpx.AsyncClient]:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        token = load_or_create_token(config.data_dir)
        app = create_app(manager, token=token)
        headers = {"Authorization": f"Bearer {token}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
            yield c


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["message"]
    code: str = body["error"]["code"]
    return code


async def test_health_needs_no_token(client: httpx.AsyncClient) -> None:
    response = await client.get("/health", headers={"Authorization": ""})
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer", "Bearer é".encode()]
)
async def test_v1_routes_need_the_token(client: httpx.AsyncClient, authorization: str | bytes | None) -> None:
    token = client.headers.pop("authorization")
    headers = {} if authorization is None else {"authorization": authorization}
    for method, path in [("GET", "/v1/stats"), ("POST", "/v1/turns"), ("GET", "/v1/jobs"), ("GET", "/v1/memories/x")]:
        response = await client.request(method, path, headers=headers, json=TURN if method == "POST" else None)
        assert response.status_code == 401, (method, path)
        assert error_code(response) == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert (await client.get("/v1/stats", headers={"authorization": token})).status_code == 200  # for contrast


async def test_openapi_schema_is_public_and_lists_the_routes(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json", headers={"Authorization": ""})
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in ("/v1/turns", "/v1/turns/bulk", "/v1/retrieve", "/v1/context", "/v1/jobs/{name}", "/v1/stats"):
        assert path in paths


async def test_a_turn_is_processed_then_retrieved(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/turns", json=TURN)
    assert response.status_code == 200, response.text
    turn = response.json()
    assert set(turn) == {"turn_id", "saved", "memory_id", "reason", "path"}
    assert turn["saved"] is True and turn["memory_id"]
    response = await client.post("/v1/retrieve", json={"query": "Where does Ana live?", "k": 3})
    assert response.status_code == 200, response.text
    results = response.json()
    assert results[0]["memory"]["memory_id"] == turn["memory_id"]
    assert results[0]["memory"]["content"] == TURN["content"]
    assert results[0]["rank"] == 1 and results[0]["score"] > 0
    assert "semantic" in results[0]["layers"] and set(results[0]["layers"]["semantic"]) == {"layer", "rank", "score"}


async def test_bulk_turns_come_back_in_order(client: httpx.AsyncClient) -> None:
    turns = [{**TURN, "turn_number": n, "content": f"Fact number {n}: the boat is called Gaivota {n}"} for n in (1, 2)]
    response = await client.post("/v1/turns/bulk", json={"turns": turns})
    assert response.status_code == 200, response.text
    results = response.json()
    assert len(results) == 2 and all(r["saved"] for r in results)
    memory = (await client.get(f"/v1/memories/{results[1]['memory_id']}")).json()
    assert memory["content"] == turns[1]["content"] and memory["turn_number"] == 2


async def test_one_bad_turn_rejects_the_bulk_and_nothing_is_written(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/turns/bulk", json={"turns": [TURN, {**TURN, "turn_number": 2, "content": " "}]})
    assert response.status_code == 400 and error_code(response) == "empty_content"
    assert (await client.get("/v1/stats")).json()["records"]["turns"] == 0


async def test_context_stays_within_its_budget(client: httpx.AsyncClient) -> None:
    turns = [
        {**TURN, "turn_number": n, "content": f"Ana's diving log, day {n}: saw {n} octopuses near Porto"}
        for n in range(1, 9)
    ]
    assert (await client.post("/v1/turns/bulk", json={"turns": turns})).status_code == 200
    response = await client.post("/v1/context", json={"query": "Ana diving octopuses", "budget_tokens": 60})
    assert response.status_code == 200, response.text
    context = response.json()
    assert 0 < context["tokens"] <= 60 and context["budget"] == 60
    assert context["items"] and "octopuses" in context["text"]
    assert context["excluded"]  # eight turns do not fit in 60 tokens
    assert sum(item["tokens"] for item in context["items"]) <= 60


async def test_get_memory_and_an_unknown_id(client: httpx.AsyncClient) -> None:
    memory_id = (await client.post("/v1/turns", json=TURN)).json()["memory_id"]
    response = await client.get(f"/v1/memories/{memory_id}")
    assert response.status_code == 200
    memory = response.json()
    assert memory["memory_id"] == memory_id and memory["session_id"] == "s1"
    assert memory["tier"] == "hot" and memory["created_at"].endswith("+00:00")
    response = await client.get("/v1/memories/no-such-memory")
    assert response.status_code == 404 and error_code(response) == "not_found"
    assert "no-such-memory" in response.json()["error"]["message"]


async def test_a_duplicate_turn_is_a_conflict(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/turns", json=TURN)).status_code == 200
    response = await client.post("/v1/turns", json={**TURN, "content": "something else"})
    assert response.status_code == 409 and error_code(response) == "duplicate_turn"


async def test_content_over_the_limit_is_rejected(client: httpx.AsyncClient, config: Config) -> None:
    response = await client.post("/v1/turns", json={**TURN, "content": "x" * (config.max_content_bytes + 1)})
    assert response.status_code == 400 and error_code(response) == "content_too_large"


async def test_malformed_json_and_a_wrong_shape(client: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/json"}
    response = await client.post("/v1/turns", content=b'{"session_id": "s1",', headers=headers)
    assert response.status_code == 400 and error_code(response) == "malformed_json"
    assert "Expecting" in response.json()["error"]["message"]  # the parser's own words
    response = await client.post("/v1/turns", json={"session_id": "s1", "content": "no number", "colour": "red"})
    assert response.status_code == 422 and error_code(response) == "invalid_request"
    message = response.json()["error"]["message"]
    assert "turn_number" in message and "colour" in message
    response = await client.post("/v1/turns", json={**TURN, "emotional_context": {"valence": 3}})
    assert response.status_code == 422 and "valence" in response.json()["error"]["message"]


async def test_unknown_paths_use_the_same_error_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/nothing-here")
    assert response.status_code == 404 and error_code(response) == "not_found"
    response = await client.get("/v1/turns")
    assert response.status_code == 405 and error_code(response) == "method_not_allowed"


async def test_run_a_job_and_list_the_history(client: httpx.AsyncClient, tmp_path: Path) -> None:
    assert (await client.post("/v1/turns", json=TURN)).status_code == 200
    response = await client.post("/v1/jobs/decay")
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["job"] == "decay" and run["status"] == "ok" and run["counts"]["scored"] == 1
    assert (await client.post("/v1/jobs/tier", json={"now": "2031-01-01T00:00:00+00:00"})).json()["status"] == "ok"
    history = (await client.get("/v1/jobs", params={"job": "decay"})).json()
    assert [r["run_id"] for r in history] == [run["run_id"]]
    assert [r["job"] for r in (await client.get("/v1/jobs", params={"limit": 5})).json()] == ["tier", "decay"]
    response = await client.post("/v1/jobs/nap")
    assert response.status_code == 400 and error_code(response) == "invalid_input"
    response = await client.post("/v1/jobs/export")
    assert response.status_code == 400 and "out" in response.json()["error"]["message"]
    out = tmp_path / "policy.jsonl"
    response = await client.post("/v1/jobs/export", json={"out": str(out), "labelled_only": False})
    assert response.json()["status"] == "ok" and len(out.read_text().splitlines()) == 1


async def test_a_closed_manager_answers_503(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        app = create_app(manager, token="t")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        response = await c.get("/v1/stats", headers={"Authorization": "Bearer t"})
    assert response.status_code == 503 and error_code(response) == "closed"


def test_an_unexpected_error_is_500_internal_error() -> None:
    response = error_response(RuntimeError("boom"))
    assert response.status_code == 500
    assert json.loads(bytes(response.body)) == {"error": {"code": "internal_error", "message": "boom"}}


def test_the_token_file_is_private_and_stable(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    token = load_or_create_token(data_dir)
    path = data_dir / "api_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 40 and path.read_text().strip() == token
    assert load_or_create_token(data_dir) == token
    assert load_or_create_token(tmp_path / "other") != token


# ----- once through a real daemon process -------------------------------------------------------------


async def test_the_daemon_serves_schedules_and_shuts_down_cleanly(
    config: Config, embedder: Embedder, tmp_path: Path
) -> None:
    env = {**os.environ, "AGENT_MEMORY__SERVE__DECAY_INTERVAL": "PT1S", "AGENT_MEMORY__SAVE__KEEP_ALL": "true"}
    command = [sys.executable, "-m", "agent_memory.interfaces.cli", "--data-dir", str(config.data_dir)]
    with (tmp_path / "daemon.err").open("w+") as err:
        proc = await asyncio.create_subprocess_exec(
            *command, "serve", "--port", "0", env=env, stdout=asyncio.subprocess.PIPE, stderr=err
        )
        try:
            memory_id = await _talk_to(proc)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 20) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            err.seek(0)
            sys.stderr.write(err.read())  # shown by pytest when the test fails
    async with MemoryManager.open(config, embedder=embedder) as manager:
        report = await manager.doctor()
        assert report.consistent and report.pending_outbox == 0, report.disagreements
        assert (await manager.get(memory_id)).content == TURN["content"]


async def _talk_to(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    assert line.startswith("agent-memory: serving"), line
    url = line.split(" on ")[1].split()[0]
    token = Path(line.split("(token in ")[1].rstrip(")\n")).read_text().strip()
    async with httpx.AsyncClient(base_url=url) as c:
        assert (await c.get("/health")).json() == {"status": "ok"}
        assert (await c.post("/v1/turns", json=TURN)).status_code == 401
        c.headers["Authorization"] = f"Bearer {token}"
        turn = (await c.post("/v1/turns", json=TURN)).json()
        assert turn["saved"] is True, turn
        runs = await _decay_runs(c)
        assert runs and all(r["status"] == "ok" for r in runs)
    return str(turn["memory_id"])


async def _decay_runs(c: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The scheduler's finished decay runs (decay_interval is one second), waited for up to 30 s."""
    for _ in range(300):
        runs: list[dict[str, Any]] = (await c.get("/v1/jobs", params={"job": "decay"})).json()
        if finished := [r for r in runs if r["status"] != "running"]:
            return finished
        await asyncio.sleep(0.1)
    return []
