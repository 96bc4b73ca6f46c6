"""Issue 19's harness in its short form (docs/reliability.md): a real daemon under concurrent HTTP load, stopped
with SIGTERM, loses nothing; a daemon SIGKILLed under concurrent writers loses nothing acknowledged, recovery
indexes every logged record, and re-sent turns are never logged twice. The full runs are in the doc."""

from __future__ import annotations

from pathlib import Path

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
