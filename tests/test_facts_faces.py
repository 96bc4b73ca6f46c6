"""Versioned facts over HTTP, through the Python client and on the command line (issue #20)."""

from __future__ import annotations

import json

import httpx
import pytest

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import InvalidInput
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.client import DaemonClient
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.token import load_or_create_token
from agent_memory.manager import MemoryManager


async def test_facts_over_http_and_the_client(manager: MemoryManager) -> None:
    token = load_or_create_token(manager.config.data_dir)
    app = create_app(manager, token=token)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers) as c:
        said = {"subject": "Ana", "attribute": "lives in", "value": "Lisbon", "valid_at": "2025-01-01T00:00:00+00:00"}
        first = await c.post("/v1/facts", json=said)
        assert first.status_code == 200 and first.json()["value"] == "Lisbon"
        moved = await c.post("/v1/facts", json={**said, "value": "Porto", "valid_at": "2025-09-01T00:00:00Z"})
        assert moved.status_code == 200
        now = (await c.get("/v1/facts", params={"subject": "ana"})).json()
        assert [f["value"] for f in now] == ["Porto"]
        then = (await c.get("/v1/facts", params={"subject": "ana", "as_of": "2025-05-01T00:00:00+00:00"})).json()
        assert [f["value"] for f in then] == ["Lisbon"]
        history = (await c.get("/v1/facts/history", params={"subject": "ana", "attribute": "lives in"})).json()
        assert [(f["value"], f["invalid_at"]) for f in history] == [
            ("Lisbon", "2025-09-01T00:00:00+00:00"),
            ("Porto", None),
        ]
        naive = await c.post("/v1/facts", json={**said, "valid_at": "2025-01-01T00:00:00"})
        assert naive.status_code in (400, 422) and naive.json()["error"]["code"] in ("invalid_input", "invalid_request")
        blank = await c.post("/v1/facts", json={**said, "subject": "  "})
        assert blank.status_code == 400 and blank.json()["error"]["code"] == "invalid_input"
        typed = await c.post("/v1/facts", json={**said, "confidence": "high"})
        assert typed.status_code == 422
    async with DaemonClient("http://test", token, transport=httpx.ASGITransport(app=app)) as d:
        assert [f.value for f in await d.fact_history("ana", "lives in")] == ["Lisbon", "Porto"]
        assert (await d.remember_fact("Ana", "lives in", "porto", source="turn-9")).observation_count == 2
        assert [f.value for f in await d.facts("ana", namespace="default")] == ["Porto"]
        with pytest.raises(InvalidInput):
            await d.remember_fact("Ana", "lives in", "")


def test_the_cli_remembers_and_answers_facts(
    config: Config, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--data-dir", str(config.data_dir)]
    assert main([*store, "remember", "Ana", "lives in", "Lisbon", "--at", "2025-01-01T00:00:00+00:00"]) == 0
    assert main([*store, "remember", "Ana", "lives in", "Porto", "--at", "2025-09-01T00:00:00+00:00"]) == 0
    capsys.readouterr()
    assert main([*store, "facts", "--subject", "ana", "--as-of", "2025-05-01T00:00:00+00:00"]) == 0
    assert capsys.readouterr().out.startswith("ana | lives in | Lisbon  (from 2025-01-01, until 2025-09-01)")
    assert main([*store, "history", "ana", "lives in", "--json"]) == 0
    assert [f["value"] for f in json.loads(capsys.readouterr().out)] == ["Lisbon", "Porto"]
    assert main([*store, "remember", "Ana", " ", "Porto"]) == 2
    assert "attribute must be non-empty text" in capsys.readouterr().err
