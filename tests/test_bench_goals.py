"""Issue #22's goals checked in one command (bench/goals.py): the verdicts, and a small run on the real engines."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_harness import BIKE, LOCOMO  # a tiny conversation (three scored questions), a tiny haystack

from agent_memory.bench.goals import BUDGET, goals_of, main, render


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
