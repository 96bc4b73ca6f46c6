"""Issue 19's harness in its short form (docs/reliability.md): a real daemon under concurrent HTTP load, stopped
with SIGTERM, loses nothing; a daemon SIGKILLed under concurrent writers loses nothing acknowledged, recovery
indexes every logged record, and re-sent turns are never logged twice. The full runs are in the doc."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agent_memory.bench.crash import main as crash_test
from agent_memory.bench.crash import run_daemon_crash
from agent_memory.bench.load import render, run_load
from agent_memory.embeddings.text import Embedder


async def test_four_clients_for_ten_seconds_lose_nothing(tmp_path: Path, embedder: Embedder) -> None:
    report = await run_load(4, 10.0, tmp_path / "data", embedder=embedder, seed=19)
    shown = "\n".join(render(report))
    assert (report.errors, len(report.lost), len(report.divergent)) == (0, 0, 0), shown
    assert report.daemon_exit == 0, shown
    assert report.acknowledged > 0 and set(report.routes) >= {"POST /v1/turns", "POST /v1/retrieve"}, shown


async def test_three_daemon_kills_under_eight_writers_lose_nothing(tmp_path: Path, embedder: Embedder) -> None:
    tally = await run_daemon_crash(3, 8, tmp_path / "data", seed=19, embedder=embedder)
    shown = f"{tally.line()} {tally.detail()} lost={sorted(tally.lost)[:5]} doctor={sorted(tally.doctor)}"
    assert (tally.cycles, len(tally.lost), tally.divergent) == (3, 0, 0), shown
    assert not tally.errors, tally.errors[:5]
    assert tally.acknowledged > 0, "the writers acknowledged nothing, so nothing was tested"


async def test_the_killed_daemons_run_with_the_configuration_given(tmp_path: Path, embedder: Embedder) -> None:
    """`crash_test.py --daemon --daemon-config F`: every daemon of the run serves with F (here every turn kept, which
    the decision log records), so a schedule or a setting can be put under the kills."""
    config = tmp_path / "keep-all.toml"
    config.write_text("[save]\nkeep_all = true\n", encoding="utf-8")
    tally = await run_daemon_crash(1, 2, tmp_path / "data", seed=5, embedder=embedder, config_file=config)
    assert (tally.cycles, len(tally.lost), tally.divergent, tally.errors) == (1, 0, 0, [])
    with sqlite3.connect(tmp_path / "data" / "memory.db") as db:
        policies = dict(db.execute("SELECT policy, count(*) FROM save_decisions GROUP BY policy").fetchall())
    assert set(policies) - {""} == {"keep-all"} and policies["keep-all"] > 0  # "": the phatic turns, dropped


def test_a_daemon_config_that_is_not_there_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        crash_test(["--daemon", "--cycles", "1", "--daemon-config", str(tmp_path / "nowhere.toml")])
    assert refused.value.code == 2 and "--daemon-config: no file at" in capsys.readouterr().err
