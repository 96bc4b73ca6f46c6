"""The command line, run in-process against a real data directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_memory.interfaces.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_search_stats_doctor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "mem")
    sample = str(ROOT / "data" / "sample_conversation.jsonl")
    code, out, _ = run(capsys, "--data-dir", data, "ingest", sample)
    assert code == 0 and "ingested 54 turns" in out
    code, out, _ = run(capsys, "--data-dir", data, "search", "what was the 10k race time?", "-k", "2", "--json")
    hits = json.loads(out)
    assert code == 0 and "48:37" in hits[0]["content"] and set(hits[0]["layers"]) >= {"keyword", "semantic"}
    code, out, _ = run(capsys, "--data-dir", data, "stats", "--json")
    stats = json.loads(out)
    assert stats["records"]["turns"] == 54 and stats["vectors"]["text"] == stats["records"]["memories"]
    code, out, _ = run(capsys, "--data-dir", data, "doctor")
    assert code == 0 and out.strip().endswith("consistent")


def test_errors_are_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": "s1", "turn_number": 0, "content": "fine"}\n{"session_id": oops}\n')
    code, _, err = run(capsys, "--data-dir", str(tmp_path / "mem"), "ingest", str(bad))
    assert code == 2 and "bad.jsonl line 2: malformed JSON" in err
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text('{"session_id": "s1", "turn_number": 0, "content": "x", "colour": "red"}\n')
    code, _, err = run(capsys, "--data-dir", str(tmp_path / "mem"), "ingest", str(unknown))
    assert code == 2 and "Unknown turn keys ['colour']" in err
    code, _, err = run(capsys, "--data-dir", str(tmp_path / "mem"), "--config", str(tmp_path / "nope.toml"), "stats")
    assert code == 2 and "nope.toml" in err


def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--data-dir", str(tmp_path / "demo"))
    assert code == 0
    assert "skipped" in out and "phatic" in out and "Q: " in out
    assert "48:37" in out and "TP1334" in out
    assert "top answer to 'Where does she live now?': Other big news: I moved to Porto!" in out
    assert out.strip().endswith("nothing lost.")


def test_context_command_prints_a_budgeted_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "mem")
    run(capsys, "--data-dir", data, "ingest", str(ROOT / "data" / "sample_conversation.jsonl"))
    code, out, _ = run(
        capsys, "--data-dir", data, "context", "What was her 10k race time?", "--budget", "120", "--explain"
    )
    block, explanation = out.split("</memories>\n", 1)
    assert code == 0 and block.startswith("<memories") and "48:37" in block and "\n## 2026-03-22" in block
    assert "/120 tokens (chars/4)" in explanation
    assert " budget" in explanation  # what did not fit is named with its reason
