"""The HTTP API through httpx's ASGI transport over a real MemoryManager, and once through a real daemon process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import DaemonError, InvalidInput
from agent_memory.interfaces.client import DaemonClient
from agent_memory.interfaces.http import ERRORS, HTTP_CODES, REQUEST_CODES, create_app, error_response
from agent_memory.interfaces.http_guard import GUARD_CODES
from agent_memory.interfaces.token import load_or_create_token
from agent_memory.interfaces.wire import ENCODED_ON_THE_LOOP
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.sleep.jobs import run_job
from agent_memory.validation import MAX_PREPARED_TEXTS, MAX_TURNS_PER_CALL

ROOT = Path(__file__).resolve().parents[1]
TURN = {"session_id": "s1", "turn_number": 1, "content": "My sister Ana moved to Porto to study marine biology"}
JSON = {"content-type": "application/json"}


@asynccontextmanager
async def serving(manager: MemoryManager, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of create_app(manager, **options) through httpx's ASGI transport, sending the token."""
    token = load_or_create_token(manager.config.data_dir)
    app = create_app(manager, token=token, **options)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers) as c:
        yield c


@pytest.fixture
async def client(manager: MemoryManager) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(manager) as c:
        yield c


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) - {"details"} == {"code", "message"}, body
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
    assert "/v1/export/policy" in paths


async def test_a_turn_is_processed_then_retrieved(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/turns", json=TURN)
    assert response.status_code == 200, response.text
    turn = response.json()
    assert set(turn) == {"turn_id", "saved", "memory_id", "reason", "path", "chunks"} and turn["chunks"] == 0
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


async def test_a_bulk_import_is_embedded_by_the_import_model_and_says_so_in_stats(
    client: httpx.AsyncClient, manager: MemoryManager
) -> None:
    """`"bulk": true` marks an import: kept as int8 vectors, counted by stats until the upgrade makes them float32."""
    turns = [
        {**TURN, "turn_number": n, "content": f"Import {n}: the ferry to Vigo leaves at {n + 6} am"} for n in (1, 2)
    ]
    assert (await client.post("/v1/turns/bulk", json={"turns": turns, "bulk": True})).status_code == 200
    assert (await client.post("/v1/turns/bulk", json={"turns": [{**TURN, "turn_number": 3}]})).status_code == 200
    assert (await client.get("/v1/stats")).json()["vectors_to_upgrade"] == 2
    models = await manager.records._fetch("SELECT turn_number, embedding_model FROM memories ORDER BY turn_number")
    assert [tuple(r) for r in models] == [
        (1, "all-MiniLM-L6-v2-int8"),
        (2, "all-MiniLM-L6-v2-int8"),
        (3, "all-MiniLM-L6-v2"),
    ]
    response = await client.post("/v1/turns/bulk", json={"turns": [{**TURN, "turn_number": 4}], "bulk": "yes please"})
    assert response.status_code == 422 and "bulk" in response.text  # a flag, not any string
    assert (await manager.vector_upgrade.catch_up()) == 2
    assert (await client.get("/v1/stats")).json()["vectors_to_upgrade"] == 0


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
    details = response.json()["error"]["details"]
    assert details == {"namespace": "default", "session_id": TURN["session_id"], "turn_number": TURN["turn_number"]}


async def test_a_large_answer_is_encoded_whole(manager: MemoryManager, client: httpx.AsyncClient) -> None:
    """A context or a retrieval of more than ENCODED_ON_THE_LOOP memories is turned into JSON on a worker thread
    (interfaces/wire.py): the same answer as on the loop, every memory in it."""
    turns = [
        {"session_id": f"s{n // 50}", "turn_number": n % 50, "content": f"Heron {n} by the lock"} for n in range(260)
    ]
    assert (await client.post("/v1/turns/bulk", json={"turns": turns})).status_code == 200
    wide = await client.post("/v1/context", json={"query": "a heron by the lock", "budget_tokens": 1_000_000})
    assert wide.status_code == 200 and len(wide.json()["items"]) == len(turns) > ENCODED_ON_THE_LOOP
    assert {item["memory"]["content"] for item in wide.json()["items"]} == {t["content"] for t in turns}
    manager.configure_retrieval(manager.config.retrieval.model_copy(update={"candidate_limit": 500}))
    found = await client.post("/v1/retrieve", json={"query": "a heron by the lock", "k": 1000})
    assert found.status_code == 200 and [r["rank"] for r in found.json()] == list(range(1, len(turns) + 1))
    narrow = await client.post("/v1/retrieve", json={"query": "a heron by the lock", "k": 5})
    assert [set(r) for r in narrow.json()] == [set(r) for r in found.json()[:5]]  # one shape either side


async def test_texts_prepared_ahead_are_embedded_and_nothing_is_stored(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/turns/prepare", json={"texts": [TURN["content"]]})
    assert response.status_code == 200 and response.json() == {"texts": 1}
    assert (await client.get("/v1/stats")).json()["records"]["turns"] == 0  # nothing was written
    assert (await client.post("/v1/turns", json=TURN)).status_code == 200
    broken = '{"texts": ["a lone \\ud800 surrogate"]}'
    response = await client.post("/v1/turns/prepare", content=broken, headers=JSON)
    assert response.status_code == 400 and error_code(response) == "invalid_encoding"
    response = await client.post("/v1/turns/prepare", json={"texts": ["x"] * (MAX_PREPARED_TEXTS + 1)})
    assert response.status_code == 422 and "1024" in response.text
    over = [{"session_id": "s", "turn_number": n, "content": "x"} for n in range(MAX_TURNS_PER_CALL + 1)]
    response = await client.post("/v1/turns/bulk", json={"turns": over})
    assert response.status_code == 422 and "turns" in response.text and "1024" in response.text
    response = await client.post("/v1/turns/prepare", json={"texts": ["an import's next turn"], "bulk": True})
    assert response.status_code == 200 and response.json() == {"texts": 1}
    response = await client.post("/v1/turns/prepare", json={"texts": ["x"], "bulk": "yes"})
    assert response.status_code == 422 and "bulk" in response.text


async def test_content_over_the_limit_is_rejected(client: httpx.AsyncClient, config: Config) -> None:
    response = await client.post("/v1/turns", json={**TURN, "content": "x" * (config.max_turn_bytes + 1)})
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
    assert response.status_code == 400 and "GET /v1/export/policy" in response.json()["error"]["message"]


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


# ----- the export is streamed; the daemon writes no file a caller names (issue 19, defect 1) ----------


async def test_the_export_is_streamed_and_no_file_is_written_where_a_caller_says(
    client: httpx.AsyncClient, manager: MemoryManager, tmp_path: Path
) -> None:
    turns = [{**TURN, "turn_number": n, "content": f"Ana's boat number {n} is moored in Porto"} for n in (1, 2, 3)]
    assert (await client.post("/v1/turns/bulk", json={"turns": turns})).status_code == 200
    assert (await client.post("/v1/retrieve", json={"query": "Ana's boat"})).status_code == 200
    data_dir = manager.config.data_dir
    protected = {
        path: path.read_bytes() for path in (data_dir / "logs" / "segment-00000001.jsonl", data_dir / "api_token")
    }
    nowhere = tmp_path / "nonexistent" / "dir" / "policy.jsonl"
    for out in (*protected, nowhere):
        response = await client.post("/v1/jobs/export", json={"out": str(out), "labelled_only": False})
        assert response.status_code == 400 and error_code(response) == "invalid_input"
        assert "GET /v1/export/policy" in response.json()["error"]["message"]
    assert {path: path.read_bytes() for path in protected} == protected and not nowhere.parent.parent.exists()

    response = await client.get("/v1/export/policy", params={"labelled_only": "false"})
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    assert [json.loads(line)["kind"] for line in response.text.splitlines()] == ["save"] * 3 + ["retrieval"]
    written = tmp_path / "by_the_job.jsonl"
    assert (await run_job(manager, "export", out=written, labelled_only=False)).status == "ok"
    assert response.content == written.read_bytes()  # the export job's own lines, byte for byte
    labelled = await client.get("/v1/export/policy")  # labelled_only by default, and nothing is labelled yet
    assert labelled.status_code == 200 and labelled.content == b""


async def test_the_client_writes_the_streamed_export_where_it_runs(manager: MemoryManager, tmp_path: Path) -> None:
    await manager.process_turns([TurnInput("s1", n, f"Fact {n}: the spare key is under the fern") for n in (1, 2)])
    token = load_or_create_token(manager.config.data_dir)
    transport = httpx.ASGITransport(app=create_app(manager, token=token))
    out = tmp_path / "here" / "policy.jsonl"
    async with DaemonClient("http://daemon.test", token, transport=transport) as daemon:
        counts = await daemon.export_policy(out, labelled_only=False)
    assert counts == {"save": 2, "retrieval": 0, "out": str(out), "labelled_only": False}
    assert [json.loads(line)["kind"] for line in out.read_text().splitlines()] == ["save", "save"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in out.parent.iterdir()] == ["policy.jsonl"]  # no partial file left beside it


async def test_an_export_cut_short_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "policy.jsonl"
    out.write_text("the last export\n")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=b'{"kind": "save"}\n{"kind": "sa', headers={"content-type": "application/x-ndjson"}
        )

    async with DaemonClient("http://d.test", "t", transport=httpx.MockTransport(answer)) as daemon:
        with pytest.raises(DaemonError, match="not a decision"):
            await daemon.export_policy(out)
    assert out.read_text() == "the last export\n" and [p.name for p in tmp_path.iterdir()] == ["policy.jsonl"]


# ----- the token before the body, and the body capped in size and time (issue 19, defect 2) -----------


async def test_the_token_is_checked_before_the_body_is_read(client: httpx.AsyncClient) -> None:
    client.headers.pop("authorization")
    response = await client.post("/v1/turns", content=b"{", headers=JSON)
    assert response.status_code == 401 and error_code(response) == "unauthorized"  # not 400 malformed_json
    assert response.headers["www-authenticate"] == "Bearer"
    sent, body = _counted(chunks=100)
    response = await client.post("/v1/turns", content=body, headers={**JSON, "content-length": str(200 * 10**6)})
    assert response.status_code == 401 and sent == []  # not one byte of the 200 MB was read


async def test_a_body_over_the_cap_is_413(manager: MemoryManager) -> None:
    async with serving(manager, max_body_bytes=1024) as client:
        exactly = json.dumps(TURN).encode().ljust(1024)  # JSON may end in spaces: at the cap, it is taken
        assert (await client.post("/v1/turns", content=exactly, headers=JSON)).status_code == 200
        response = await client.post("/v1/turns", content=exactly + b" ", headers=JSON)
        assert response.status_code == 413 and error_code(response) == "body_too_large"
        assert "1025 bytes" in response.json()["error"]["message"]
        sent, body = _counted(chunks=100)
        response = await client.post("/v1/turns", content=body, headers={**JSON, "content-length": "51200"})
        assert response.status_code == 413 and sent == []  # refused by its Content-Length, unread
        sent, body = _counted(chunks=100)  # no Content-Length: counted as it arrives, cut off past the cap
        response = await client.post("/v1/turns", content=body, headers=JSON)
        assert response.status_code == 413 and error_code(response) == "body_too_large" and len(sent) == 3
        assert "transfer-encoding" in response.request.headers and response.headers["connection"] == "close"


def _counted(*, chunks: int, size: int = 512) -> tuple[list[int], AsyncIterator[bytes]]:
    """A streamed body of `chunks` chunks, and the list of those the server has pulled so far."""
    sent: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for n in range(chunks):
            sent.append(n)
            yield b" " * size

    return sent, body()


async def test_a_slow_body_is_408_and_the_connection_is_closed(manager: MemoryManager) -> None:
    """Through a real uvicorn server on loopback: the headers promise 1,000 bytes and 10 arrive."""
    token = load_or_create_token(manager.config.data_dir)
    app = create_app(manager, token=token, body_timeout=timedelta(seconds=0.5))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        head = "POST /v1/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        answer, took = await _exchange(port, f"{head}Authorization: Bearer {token}\r\nContent-Length: 1000\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"code":"body_timeout"' in answer, answer
        assert 0.45 <= took < 3.0  # answered once body_timeout passed, then closed (the read reached EOF)
        answer, took = await _exchange(port, f"{head}Content-Length: 200000000\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 401 ") and b'"code":"unauthorized"' in answer and took < 0.45
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def _exchange(port: int, head: str) -> tuple[bytes, float]:
    """Send `head` and 10 bytes of body, then read until the server closes: the answer and how long it took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    try:
        writer.write(head.encode() + b'{"session_')
        await writer.drain()
        started = loop.time()
        answer = await asyncio.wait_for(reader.read(), 5)
        return answer, loop.time() - started
    finally:
        writer.close()


# ----- values of the right type but out of range (issue 19, defect 5) ----------------------------------

LATE, EARLY = "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"  # years 10000 and 0 once in UTC


async def test_values_out_of_range_are_422_naming_the_field(client: httpx.AsyncClient) -> None:
    for path, body, field in [
        ("/v1/turns", {**TURN, "turn_number": 2**63}, "turn_number"),
        ("/v1/turns", {**TURN, "turn_number": 10**30}, "turn_number"),
        ("/v1/turns", {**TURN, "at": LATE}, "at"),
        ("/v1/turns", {**TURN, "at": EARLY}, "at"),
        ("/v1/turns/bulk", {"turns": [{**TURN, "at": LATE}]}, "at"),
        ("/v1/retrieve", {"query": "Ana", "k": 2**63}, "k"),
        ("/v1/retrieve", {"query": "Ana", "now": LATE}, "now"),
        ("/v1/retrieve", {"query": "Ana", "as_of": EARLY}, "as_of"),
        ("/v1/context", {"query": "Ana", "budget_tokens": 824110703331073845100544}, "budget_tokens"),
        ("/v1/context", {"query": "Ana", "now": EARLY}, "now"),
        ("/v1/jobs/decay", {"now": LATE}, "now"),
    ]:
        response = await client.post(path, json=body)
        assert response.status_code == 422 and error_code(response) == "invalid_request", (path, body, response.text)
        assert field in response.json()["error"]["message"], (path, body, response.text)
    assert (await client.get("/v1/stats")).json()["records"]["turns"] == 0


async def test_values_at_the_limits_are_taken(client: httpx.AsyncClient) -> None:
    turn = {**TURN, "turn_number": 2**53 - 1, "at": "8999-12-31T23:59:59+00:00"}
    assert (await client.post("/v1/turns", json=turn)).status_code == 200
    assert (
        await client.post("/v1/retrieve", json={"query": "Ana", "k": 1000, "now": "1000-01-01T00:00:00Z"})
    ).status_code == 200
    assert (await client.post("/v1/context", json={"query": "Ana", "budget_tokens": 1_000_000})).status_code == 200


async def test_the_library_refuses_values_out_of_range_by_name(manager: MemoryManager) -> None:
    late = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=23, minutes=59)))
    calls: list[tuple[Callable[[], Awaitable[Any]], str]] = [
        (
            lambda: manager.process_turns([TurnInput("s", 2**63, "hello there")]),
            "turn_number must be a non-negative integer, at most 9007199254740991; got 9223372036854775808",
        ),
        (
            lambda: manager.process_turns([TurnInput("s", 1, "hello there", at=late)]),
            "at 9999-12-31T23:59:59-23:59 is out of range: a timezone-aware time from 1000-01-01 to 8999-12-31 (UTC)",
        ),
        (
            lambda: manager.retrieve("hello", k=2**63),
            "k must be a positive integer, at most 1000; got 9223372036854775808",
        ),
        (lambda: manager.retrieve("hello", now=late), "now 9999-12-31T23:59:59-23:59 is out of range"),
        (lambda: manager.retrieve("hello", as_of=datetime(2026, 1, 1)), "as_of must be a timezone-aware datetime"),
        (
            lambda: manager.context("hello", budget_tokens=824110703331073845100544),
            "budget_tokens must be a positive integer, at most 1000000; got 824110703331073845100544",
        ),
        (lambda: manager.context("hello", as_of=early), "as_of 0001-01-01T00:00:00+23:59 is out of range"),
        (lambda: manager.recall("hello", budget_tokens=0), "budget_tokens must be a positive integer"),
    ]
    for call, message in calls:
        with pytest.raises(InvalidInput, match=re.escape(message)):
            await call()
    assert (await manager.stats())["records"]["turns"] == 0


# ----- strict bodies, no undocumented code or status (issue 19, defect 8) ------------------------------


async def test_request_bodies_are_strict(client: httpx.AsyncClient) -> None:
    for path, body in [
        ("/v1/turns", {**TURN, "turn_number": "1"}),
        ("/v1/turns", {**TURN, "turn_number": True}),
        ("/v1/turns", {**TURN, "turn_number": 1.0}),
        ("/v1/turns", {**TURN, "content": 7}),
        ("/v1/turns", {**TURN, "at": 1_700_000_000}),
        ("/v1/turns", {**TURN, "emotional_context": {"valence": "0.5"}}),
        ("/v1/retrieve", {"query": "Ana", "k": "3"}),
        ("/v1/context", {"query": "Ana", "budget_tokens": True}),
        ("/v1/jobs/decay", {"labelled_only": "no"}),
    ]:
        response = await client.post(path, json=body)
        assert response.status_code == 422 and error_code(response) == "invalid_request", (path, body)
    assert (await client.post("/v1/turns", json={**TURN, "at": "2025-05-01T10:00:00Z"})).status_code == 200


async def test_a_body_that_does_not_parse_is_malformed_json(client: httpx.AsyncClient) -> None:
    for content in (b'{"session_id": "\xff"}', b"[" * 100_000):  # not UTF-8; nested past the recursion limit
        response = await client.post("/v1/turns", content=content, headers=JSON)
        assert response.status_code == 400 and error_code(response) == "malformed_json", response.text


async def test_every_route_declares_every_status_it_answers(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    assert set(spec["components"]["schemas"]["ErrorBody"]["properties"]) == {"error"}
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            needed = {"200", "408", "413"} | ({"401", "500", "503"} if path.startswith("/v1/") else set())
            needed |= {"422"} if operation.get("parameters") or "requestBody" in operation else set()
            needed |= {"400"} if "requestBody" in operation else set()
            assert needed <= set(operation["responses"]), (method, path, needed - set(operation["responses"]))
            for status, response in operation["responses"].items():
                assert status == "200" or response["content"] == error, (method, path, status)


def test_every_error_code_is_in_the_docs_table() -> None:
    table = re.findall(r"^\| (\d{3}|other) \| `(\w+)` \|", (ROOT / "docs" / "daemon.md").read_text(), re.M)
    produced = {*ERRORS.values(), *HTTP_CODES.items(), *GUARD_CODES.items(), *REQUEST_CODES.items()}
    assert {(str(status), code) for status, code in produced} <= set(table)
    assert ("other", "http_error") in table  # HTTP_CODES' fallback, for a status none of them names
