"""The forgetting policies (issue #20, section 3): a sleep job and a CLI command, soft and reversible."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.models import MemoryStatus
from agent_memory.sleep.jobs import run_job

OLD, NEW = datetime(2024, 3, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)


async def seed(manager: MemoryManager) -> dict[str, str]:
    turns = {
        "old": ("user", OLD, "The plumber fixed the kitchen sink on Tuesday."),
        "assistant": ("assistant", NEW, "You could try the ramen place near the station."),
        "fresh": ("user", NEW, "Ines starts her new job at the port on Monday."),
    }
    ids = {}
    for n, (key, (role, at, text)) in enumerate(turns.items()):
        result = await manager.process_turn("s1", n, text, role=role, at=at)
        assert result.memory_id is not None
        ids[key] = result.memory_id
    return ids


async def test_the_policies_forget_by_role_and_age_and_nothing_else(manager: MemoryManager) -> None:
    ids = await seed(manager)
    dry = await run_job(manager, "forget", roles=["assistant"], before=datetime(2025, 1, 1, tzinfo=UTC), dry_run=True)
    assert dry.status == "ok" and dry.counts == {"by_role": 1, "older": 1, "phatic": 0, "forgotten": 0, "dry_run": True}
    assert {(await manager.get(i)).status for i in ids.values()} == {MemoryStatus.ACTIVE}
    run = await run_job(manager, "forget", roles=["assistant"], before=datetime(2025, 1, 1, tzinfo=UTC))
    assert run.counts["forgotten"] == 2
    assert (await manager.get(ids["old"])).status is MemoryStatus.FORGOTTEN
    assert (await manager.get(ids["assistant"])).status is MemoryStatus.FORGOTTEN
    assert (await manager.get(ids["fresh"])).status is MemoryStatus.ACTIVE
    (kept,) = await manager.history(ids["old"])
    assert kept.change == "forget" and kept.agent == "policy:forget" and "before 2025-01-01" in (kept.reason or "")
    found = [r.memory.memory_id for r in await manager.retrieve("kitchen sink plumber", k=5)]
    assert ids["old"] not in found
    assert (await manager.restore(ids["old"])).status is MemoryStatus.ACTIVE
    assert (await manager.doctor()).consistent


async def test_the_policies_are_off_by_default_and_checked(manager: MemoryManager) -> None:
    await seed(manager)
    run = await run_job(manager, "forget")
    assert run.counts["forgotten"] == 0 and run.counts["by_role"] == 0
    bad = await run_job(manager, "forget", roles=["narrator"])
    assert bad.status == "failed" and "Unknown role 'narrator'" in (bad.error or "")


async def test_configured_policies_run_in_the_sleep_job(config: Config, embedder: Embedder) -> None:
    sleep = config.sleep.model_copy(update={"forget_roles": ("assistant",)})
    async with MemoryManager.open(config.model_copy(update={"sleep": sleep}), embedder=embedder) as manager:
        ids = await seed(manager)
        assert (await run_job(manager, "forget")).counts["forgotten"] == 1
        assert (await manager.get(ids["assistant"])).status is MemoryStatus.FORGOTTEN


def test_forget_on_the_command_line(config: Config, embedder: Embedder, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--data-dir", str(config.data_dir)]
    turns = config.data_dir.parent / "turns.jsonl"
    turns.write_text(
        json.dumps(
            {"session_id": "s1", "turn_number": 0, "content": "You might enjoy the Tejo ferry.", "role": "assistant"}
        )
        + "\n",
        encoding="utf-8",
    )
    assert main([*store, "--config", str(_keep_all(config)), "ingest", str(turns)]) == 0
    assert main([*store, "forget", "--role", "assistant", "--dry-run", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{") :])["counts"]["by_role"] == 1
    assert main([*store, "forget"]) == 2
    assert "needs a MEMORY_ID, or a policy" in capsys.readouterr().err
    assert main([*store, "forget", "some-id"]) == 2
    assert "--expected-revision" in capsys.readouterr().err


def _keep_all(config: Config) -> object:
    path = config.data_dir.parent / "keep.toml"
    path.write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    return path


async def test_the_policies_through_http(manager: MemoryManager) -> None:
    import httpx

    from agent_memory.interfaces.http import create_app
    from agent_memory.interfaces.token import load_or_create_token

    ids = await seed(manager)
    token = load_or_create_token(manager.config.data_dir)
    transport = httpx.ASGITransport(app=create_app(manager, token=token))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
        answer = await c.post("/v1/jobs/forget", json={"roles": ["assistant"], "namespace": "default"})
        assert answer.status_code == 200 and answer.json()["counts"]["forgotten"] == 1
        bad = await c.post("/v1/jobs/forget", json={"before": "2025-01-01T00:00:00"})  # no timezone
        assert bad.status_code == 422
        unknown = await c.post("/v1/jobs/forget", json={"roles": ["narrator"]})
        assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_request"
        for role in ("user", "assistant", "system", "tool"):  # every role the memory knows is taken
            assert (await c.post("/v1/jobs/forget", json={"roles": [role], "dry_run": True})).status_code == 200
    assert (await manager.get(ids["assistant"])).status is MemoryStatus.FORGOTTEN
