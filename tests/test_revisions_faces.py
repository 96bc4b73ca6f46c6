"""Revisions over HTTP, through the Python client and on the command line (issue #20, part 1)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import InvalidInput, RevisionConflict
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.client import DaemonClient
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.token import load_or_create_token
from agent_memory.manager import MemoryManager
from agent_memory.models import MemoryStatus

TEXT = "The standup moved to 9:30 in room Tejo."


async def test_update_supersede_and_history_over_http(manager: MemoryManager) -> None:
    memory_id = (await manager.process_turn("s1", 0, TEXT)).memory_id
    assert memory_id is not None
    token = load_or_create_token(manager.config.data_dir)
    transport = httpx.ASGITransport(app=create_app(manager, token=token))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
        change = {"content": "The standup moved to 10:00 in room Douro.", "expected_revision": 1, "agent": "a"}
        updated = await c.post(f"/v1/memories/{memory_id}/update", json=change)
        assert updated.status_code == 200 and updated.json()["revision"] == 2
        stale = await c.post(f"/v1/memories/{memory_id}/update", json=change)
        assert stale.status_code == 409
        error = stale.json()["error"]
        assert error["code"] == "revision_conflict"
        assert error["details"] == {"memory_id": memory_id, "expected": 1, "current": 2}
        strict = await c.post(f"/v1/memories/{memory_id}/update", json={**change, "expected_revision": "2"})
        assert strict.status_code == 422
        gone = await c.post("/v1/memories/nope/update", json={**change, "expected_revision": 1})
        assert gone.status_code == 404
        new = await c.post(
            f"/v1/memories/{memory_id}/supersede", json={"content": "No standup this week.", "expected_revision": 2}
        )
        assert new.status_code == 200 and new.json()["status"] == "active"
        again = await c.post(f"/v1/memories/{memory_id}/update", json={**change, "expected_revision": 3})
        assert again.status_code == 409 and again.json()["error"]["code"] == "not_current"
        history = (await c.get(f"/v1/memories/{memory_id}/history")).json()
        assert [(h["revision"], h["change"]) for h in history] == [(1, "update"), (2, "supersede")]
        assert history[0]["agent"] == "a" and history[0]["content"] == TEXT
        assert (await c.get("/v1/memories/nope/history")).status_code == 404

    async with DaemonClient(
        "http://test", token, transport=httpx.ASGITransport(app=create_app(manager, token=token))
    ) as d:
        assert [r.revision for r in await d.history(memory_id)] == [1, 2]
        with pytest.raises(RevisionConflict) as caught:
            await d.supersede(memory_id, "anything", expected_revision=1)
        assert (caught.value.expected, caught.value.current) == (1, 3)
        with pytest.raises(InvalidInput, match="superseded"):
            await d.update(memory_id, "anything", expected_revision=3)
        current = await d.get(new.json()["memory_id"])
        changed = await d.update(current.memory_id, "Standup resumes Monday.", expected_revision=1, reason="back")
        assert changed.revision == 2 and changed.status is MemoryStatus.ACTIVE


def test_the_cli_changes_a_memory_and_shows_its_history(
    config: Config, embedder: Embedder, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "turns.jsonl"
    data.write_text(json.dumps({"session_id": "s1", "turn_number": 0, "content": TEXT}) + "\n", encoding="utf-8")
    store = ["--data-dir", str(config.data_dir), "--config", str(tmp_path / "keep.toml")]
    (tmp_path / "keep.toml").write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    assert main([*store, "ingest", str(data)]) == 0
    assert main([*store, "search", "standup", "--json"]) == 0
    memory_id = json.loads(capsys.readouterr().out.split("\n", 1)[1])[0]["memory_id"]
    assert main([*store, "update", memory_id, "The standup is at 10:00.", "--expected-revision", "1"]) == 0
    assert "revision 2 [active]" in capsys.readouterr().out
    assert main([*store, "update", memory_id, "again", "--expected-revision", "1"]) == 2
    err = capsys.readouterr().err
    assert "at revision 2, not the expected revision 1" in err and err.count("\n") == 1
    assert main([*store, "supersede", memory_id, "No standup.", "--expected-revision", "2", "--json"]) == 0
    new = json.loads(capsys.readouterr().out)
    assert new["status"] == "active" and new["history_length"] == 0
    assert main([*store, "history", memory_id]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("revision 1 [active]") and "ended by update" in shown[0] and TEXT in shown[0]
    assert shown[-1].startswith("revision 3 [superseded] now:")
    assert main([*store, "get", memory_id, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["superseded_by"] == new["memory_id"] and got["history_length"] == 2


async def test_forget_and_restore_over_http_and_the_client(manager: MemoryManager) -> None:
    memory_id = (await manager.process_turn("s1", 0, TEXT)).memory_id
    assert memory_id is not None
    token = load_or_create_token(manager.config.data_dir)
    headers = {"Authorization": f"Bearer {token}"}
    app = create_app(manager, token=token)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers) as c:
        stale = await c.post(f"/v1/memories/{memory_id}/forget", json={"expected_revision": 2})
        assert stale.status_code == 409 and stale.json()["error"]["details"]["current"] == 1
        gone = await c.post(f"/v1/memories/{memory_id}/forget", json={"expected_revision": 1, "reason": "asked"})
        assert gone.status_code == 200 and gone.json()["status"] == "forgotten"
        assert memory_id not in [
            r["memory"]["memory_id"] for r in (await c.post("/v1/retrieve", json={"query": "standup Tejo"})).json()
        ]
        back = await c.post(f"/v1/memories/{memory_id}/restore")
        assert back.status_code == 200 and back.json()["status"] == "active" and back.json()["revision"] == 3
        again = await c.post(f"/v1/memories/{memory_id}/restore", json={})
        assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_input"
    async with DaemonClient("http://test", token, transport=httpx.ASGITransport(app=app)) as d:
        assert (await d.forget(memory_id, expected_revision=3)).status is MemoryStatus.FORGOTTEN
        assert (await d.restore(memory_id, reason="by mistake")).status is MemoryStatus.ACTIVE
        assert [r.change for r in await d.history(memory_id)] == ["forget", "restore", "forget", "restore"]


def test_the_cli_forgets_and_restores(
    config: Config, embedder: Embedder, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "turns.jsonl"
    data.write_text(json.dumps({"session_id": "s1", "turn_number": 0, "content": TEXT}) + "\n", encoding="utf-8")
    (tmp_path / "keep.toml").write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    store = ["--data-dir", str(config.data_dir), "--config", str(tmp_path / "keep.toml")]
    assert main([*store, "ingest", str(data)]) == 0
    assert main([*store, "search", "standup", "--json"]) == 0
    memory_id = json.loads(capsys.readouterr().out.split("\n", 1)[1])[0]["memory_id"]
    assert main([*store, "forget", memory_id, "--expected-revision", "1", "--reason", "asked"]) == 0
    assert "[forgotten]" in capsys.readouterr().out
    assert main([*store, "search", "standup Tejo", "--json"]) == 0
    assert memory_id not in [r["memory_id"] for r in json.loads(capsys.readouterr().out)]
    assert main([*store, "restore", memory_id]) == 0
    assert "revision 3 [active]" in capsys.readouterr().out


SECRET = "The vault combination for the Quokka-Zephyr office is 31-07-77, written nowhere else."


async def test_erase_over_http_and_the_client(manager: MemoryManager) -> None:
    turn = await manager.process_turn("s1", 0, SECRET)
    await manager.process_turn("s1", 1, TEXT)
    token = load_or_create_token(manager.config.data_dir)
    transport = httpx.ASGITransport(app=create_app(manager, token=token))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
        nothing = await c.post("/v1/erase", json={"reason": "asked"})
        assert nothing.status_code == 400 and "nothing was named" in nothing.json()["error"]["message"]
        strict = await c.post("/v1/erase", json={"reason": "asked", "turn_ids": "not-a-list"})
        assert strict.status_code == 422
        plan = (await c.post("/v1/erase", json={"reason": "asked", "turn_ids": [turn.turn_id], "dry_run": True})).json()
        assert plan["dry_run"] and plan["memory_ids"] == [turn.memory_id] and plan["log_records"] == 1
        assert (await c.get(f"/v1/memories/{turn.memory_id}")).status_code == 200
    async with DaemonClient("http://test", token, transport=transport) as d:
        answer = await d.erase(reason="asked", turn_ids=[turn.turn_id])
        assert (
            answer["proof"]["hits"] == 0 and answer["proof"]["files"] > 0 and answer["memory_ids"] == [turn.memory_id]
        )
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
        gone = await c.get(f"/v1/memories/{turn.memory_id}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "erased"


def test_the_cli_erases_and_prints_the_proof(
    config: Config, embedder: Embedder, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "turns.jsonl"
    lines = [
        {"session_id": "s1", "turn_number": 0, "content": SECRET},
        {"session_id": "s2", "turn_number": 0, "content": TEXT},
    ]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (tmp_path / "keep.toml").write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    store = ["--data-dir", str(config.data_dir), "--config", str(tmp_path / "keep.toml")]
    assert main([*store, "ingest", str(data)]) == 0
    capsys.readouterr()
    assert main([*store, "erase", "--session", "s1", "--reason", "asked", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("would erase 1 memories, 1 turns, 1 log records")
    assert main([*store, "erase", "--session", "s1"]) == 2  # --reason is required
    capsys.readouterr()
    assert main([*store, "erase", "--session", "s1", "--reason", "asked"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("erased 1 memories") and " hits=0" in out
    for path in config.data_dir.rglob("*"):
        assert not path.is_file() or b"quokka-zephyr office" not in path.read_bytes().lower()
    assert main([*store, "search", "standup", "--json"]) == 0
    assert "standup" in capsys.readouterr().out.lower()
