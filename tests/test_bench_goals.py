"""Issue #22's goals checked in one command (bench/goals.py): the verdicts, and a small run on the real engines."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_harness import BIKE, LOCOMO  # a tiny conversation (three scored questions), a tiny haystack

from agent_memory.bench.goals import AFTER_SLEEP, AS_INGESTED, BUDGET, goals_of, main, render


def report(recall: float, *, multi_hop: float | None, delta: float, interval: tuple[float, float]) -> dict[str, Any]:
    """A bench report of the harness's shape at BUDGET, holding only what the goals read."""
    categories = {"open-domain": {"recall": 0.7}}
    if multi_hop is not None:
        categories["multi-hop"] = {"recall": multi_hop}
    summary = {
        "pooled": {"recall": recall, "recall_interval": [recall - 0.05, recall + 0.05]},
        "all_categories": {"recall": recall + 0.01, "recall_interval": [recall - 0.04, recall + 0.06]},
        "by_category": categories,
    }
    versus = {"n": 10, "plain_bm25": 0.7, "delta": delta, "interval": list(interval), "bm25_finds_more": 2}
    return {"budgets": {str(BUDGET): summary}, "against_bm25": {str(BUDGET): versus}}


def test_each_goal_is_judged_on_the_shipped_store_with_the_keep_all_figure_beside_it() -> None:
    shipped = report(0.93, multi_hop=0.70, delta=-0.01, interval=(-0.03, 0.01))
    keep_all = report(0.95, multi_hop=0.75, delta=0.02, interval=(0.0, 0.04))
    goals = {g.goal: g for g in goals_of("locomo", shipped, keep_all)}
    assert goals["recall, all five categories"].shipped == pytest.approx(0.94)  # every category, not the headline
    assert goals["recall, all five categories"].met is True and goals["recall, all five categories"].keep_all == 0.96
    assert goals["recall, multi-hop"].met is False and goals["recall, multi-hop"].keep_all == 0.75
    assert goals["recall, open-domain"].met is True
    floor = goals["difference from plain BM25"]
    assert floor.met is False and floor.interval == (-0.03, 0.01) and "finds more for 2 of 10" in floor.note
    table = render(list(goals.values()))
    assert "| locomo | recall, multi-hop | at least 0.72 | 0.700 | 0.750 | **no** |" in table
    lme = goals_of("longmemeval", report(0.96, multi_hop=None, delta=0.1, interval=(0.05, 0.15)), keep_all)
    assert [(g.goal, g.met) for g in lme] == [("turn recall", True), ("difference from plain BM25", True)]
    missing = goals_of("locomo", report(0.95, multi_hop=None, delta=0.0, interval=(0, 0)), keep_all)
    multi_hop = next(g for g in missing if g.goal == "recall, multi-hop")
    assert multi_hop.met is None and math.isnan(multi_hop.shipped) and "not measured" in render(missing)


def test_a_small_run_fills_both_stores_of_each_file_and_reuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locomo, longmemeval, stores = tmp_path / "locomo.json", tmp_path / "lme.json", tmp_path / "stores"
    locomo.write_text(json.dumps(LOCOMO), encoding="utf-8")
    longmemeval.write_text(json.dumps([BIKE]), encoding="utf-8")
    argv = ["--locomo", str(locomo), "--longmemeval", str(longmemeval), "--data-dir", str(stores)]
    code = main([*argv, "--out", str(tmp_path / "goals.json")])
    out = capsys.readouterr()
    found = json.loads((tmp_path / "goals.json").read_text())
    assert code == (1 if any(g["met"] is False for g in found["goals"]) else 0)
    assert [g["goal"] for g in found["goals"] if g["dataset"] == "longmemeval"][0] == "turn recall"
    assert {g["dataset"] for g in found["goals"]} == {"locomo", "longmemeval"}
    assert sorted(found["reports"]) == [
        "locomo, every turn kept",
        "locomo, shipped defaults",
        "longmemeval, every turn kept",
        "longmemeval, shipped defaults",
    ]
    assert found["reports"]["locomo, every turn kept"]["save"]["kept_share"] == 1.0
    assert found["reports"]["locomo, shipped defaults"]["save"]["policy"].startswith("heuristic")
    assert "| locomo | recall, all five categories | at least 0.92 |" in out.out
    assert sorted(p.name for p in stores.iterdir()) == [
        "locomo-every-turn-kept",
        "locomo-shipped-defaults",
        "longmemeval-every-turn-kept",
        "longmemeval-shipped-defaults",
    ]
    assert main(argv) == code  # the stores are reused: their turns are not ingested again
    assert capsys.readouterr().err.count("reusing") == 4


def test_it_refuses_a_run_without_a_file_or_with_a_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as no_file:
        main([])
    assert no_file.value.code == 2 and "give --locomo FILE, --longmemeval FILE or both" in capsys.readouterr().err
    with pytest.raises(SystemExit) as missing:
        main(["--locomo", str(tmp_path / "nowhere.json")])
    assert missing.value.code == 2 and f"--locomo: no file at {tmp_path / 'nowhere.json'}" in capsys.readouterr().err
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps(LOCOMO), encoding="utf-8")
    with pytest.raises(SystemExit) as nowhere:
        main(["--locomo", str(locomo), "--out", str(tmp_path / "no" / "goals.json")])
    assert nowhere.value.code == 2 and f"--out: no folder {tmp_path / 'no'}" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_the_recall_goals_after_a_sleep_cycle_are_rows_of_their_own() -> None:
    """A report holding a sleep cycle's figures (`lifecycle.after`) gives the recall goals again on them, named by
    their stage; the floor against BM25 is judged as ingested only."""
    shipped = report(0.90, multi_hop=0.70, delta=0.01, interval=(0.0, 0.02))
    keep_all = report(0.91, multi_hop=0.69, delta=0.02, interval=(0.0, 0.04))
    for store, lifted in ((shipped, 0.93), (keep_all, 0.94)):
        after = report(lifted, multi_hop=0.74, delta=0.0, interval=(0, 0))["budgets"]
        store["lifecycle"] = {"after": after}
    goals = goals_of("locomo", shipped, keep_all)
    stages = [(g.stage, g.goal) for g in goals]
    assert stages.count((AFTER_SLEEP, "recall, multi-hop")) == 1
    assert (AFTER_SLEEP, "difference from plain BM25") not in stages
    slept = {g.goal: g for g in goals if g.stage == AFTER_SLEEP}
    ingested = {g.goal: g for g in goals if g.stage == AS_INGESTED}
    assert slept["recall, all five categories"].shipped == pytest.approx(0.94) and slept["recall, multi-hop"].met
    assert ingested["recall, all five categories"].met is False and ingested["recall, multi-hop"].met is False
    table = render(goals)
    assert "| locomo, after a sleep cycle | recall, multi-hop | at least 0.72 | 0.740 | 0.740 | yes |" in table
    assert "| locomo | recall, multi-hop | at least 0.72 | 0.700 | 0.690 | **no** |" in table


def test_sleep_judges_a_copy_of_each_store_after_a_cycle_and_never_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locomo, stores = tmp_path / "locomo.json", tmp_path / "stores"
    locomo.write_text(json.dumps(LOCOMO), encoding="utf-8")
    argv = ["--locomo", str(locomo), "--data-dir", str(stores), "--out", str(tmp_path / "goals.json")]
    code = main([*argv, "--sleep"])
    out = capsys.readouterr().out
    found = json.loads((tmp_path / "goals.json").read_text())
    as_ingested = [g for g in found["goals"] if g["stage"] == AS_INGESTED]
    assert code == (1 if any(g["met"] is False for g in as_ingested) else 0)  # the rows after sleep are reported
    assert [g["goal"] for g in found["goals"] if g["stage"] == AFTER_SLEEP] == [
        "recall, all five categories",
        "recall, multi-hop",
        "recall, open-domain",
    ]
    assert "| locomo, after a sleep cycle | recall, all five categories | at least 0.92 |" in out
    for label in ("shipped defaults", "every turn kept"):
        cycle = found["reports"][f"locomo, {label}"]["lifecycle"]
        assert {"digest", "compact", "decay"} <= set(cycle["jobs"]), cycle["jobs"]
    assert sorted(p.name for p in stores.iterdir()) == [
        "locomo-every-turn-kept",
        "locomo-every-turn-kept-after-sleep",
        "locomo-shipped-defaults",
        "locomo-shipped-defaults-after-sleep",
    ]
    for name, runs in (("locomo-shipped-defaults", 0), ("locomo-shipped-defaults-after-sleep", 1)):
        with contextlib.closing(sqlite3.connect(stores / name / "memory.db")) as db:  # the store never slept
            assert min(1, db.execute("SELECT count(*) FROM job_runs").fetchone()[0]) == runs, name
    assert main([*argv, "--sleep"]) == code  # a second run copies the stores again, over the copies
    assert capsys.readouterr().err.count("reusing") == 4
