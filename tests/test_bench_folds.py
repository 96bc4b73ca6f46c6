"""The fold comparison (bench/folds.py) that judges every retrieval setting: its differences and intervals, on figures
made up here so the answer is known. The benchmark itself reads ../shared/data and is not run by the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_memory.bench.bootstrap import paired_interval
from agent_memory.bench.folds import compare, loco_choice, parse_variants, sleep_runs


def test_a_difference_is_paired_per_question_and_its_interval_holds_it() -> None:
    before = {"a": [0.0, 1.0, 0.0, 1.0], "b": [1.0, 1.0, 0.0, 0.0]}
    after = {"a": [1.0, 1.0, 0.0, 1.0], "b": [1.0, 1.0, 1.0, 0.0]}  # one question more in each group
    mean, low, high = paired_interval(after, before)
    assert mean == pytest.approx(0.25) and 0.0 <= low <= mean <= high <= 1.0  # no question got worse: low >= 0
    assert paired_interval(before, before) == (0.0, 0.0, 0.0)


def test_compare_reports_each_folds_difference_and_whether_it_pays_in_every_one() -> None:
    base = {"recall": {"conv-1": [0.0, 1.0], "conv-2": [1.0, 0.0]}, "mrr": {"conv-1": [0.5, 0.5], "conv-2": [0.5, 0.5]}}
    better = {
        "recall": {"conv-1": [1.0, 1.0], "conv-2": [1.0, 1.0]},
        "mrr": {"conv-1": [0.5, 1.0], "conv-2": [0.5, 0.5]},
    }
    report = compare({"baseline": base, "better": better}, "baseline")
    recall = report["better"]["recall"]
    assert recall["pooled"] == 1.0 and recall["fold_deltas"] == {"conv-1": 0.5, "conv-2": 0.5}
    assert recall["delta"] == 0.5 and recall["pays_every_fold"] is True
    mrr = report["better"]["mrr"]
    assert mrr["fold_deltas"] == {"conv-1": 0.25, "conv-2": 0.0} and mrr["pays_every_fold"] is False
    assert report["baseline"]["recall"]["delta"] == 0.0


def test_leaving_one_conversation_out_picks_by_the_others_and_scores_the_one_left_out() -> None:
    rows = {
        "as ingested": {"c1": [0.5, 0.5], "c2": [0.5, 0.5], "c3": [0.5, 0.5]},
        "wide": {"c1": [1.0, 1.0], "c2": [1.0, 0.0], "c3": [0.0, 0.0]},  # good on c1 only
        "narrow": {"c1": [0.0, 0.0], "c2": [1.0, 1.0], "c3": [1.0, 1.0]},
    }
    results = {name: {"recall": groups} for name, groups in rows.items()}
    choice = loco_choice(results, "as ingested")
    assert choice["c1"] == {"chosen": "narrow", "on_the_others": 1.0, "held_out": 0.0, "delta": -0.5}
    assert choice["c2"] == {"chosen": "as ingested", "on_the_others": 0.5, "held_out": 0.5, "delta": 0.0}  # a tie
    assert choice["c3"]["chosen"] == "wide" and choice["c3"]["delta"] == -0.5
    with pytest.raises(ValueError, match="two conversations at least"):
        loco_choice({"as ingested": {"recall": {"all": [1.0]}}}, "as ingested")


def test_each_job_left_out_is_one_more_copy_running_the_others_with_the_shipped_settings() -> None:
    variants = {"shipped defaults": {}, "loose": {"digest_similarity": 0.3}}
    runs = sleep_runs(variants, ["compact", "digest", "reweight"], ["compact", "reweight"])
    assert runs == {
        "shipped defaults": (["compact", "digest", "reweight"], {}),
        "loose": (["compact", "digest", "reweight"], {"digest_similarity": 0.3}),
        "without compact": (["digest", "reweight"], {}),
        "without reweight": (["compact", "digest"], {}),
    }
    with pytest.raises(ValueError, match=r"cannot leave out \['dream'\]: the jobs run are \['digest'\]"):
        sleep_runs(variants, ["digest"], ["dream"])
    without = sleep_runs(variants, ["compact", "digest"], ["digest"])["without digest"]
    assert without == (["compact"], {"digest_idle_delay": "PT0S"})  # no digests: the idle store's neither


def test_a_sleep_variant_is_checked_against_the_sleep_settings() -> None:
    assert parse_variants(["loose=digest_similarity:0.3,digest_max_statements:12"], "sleep")["loose"] == {
        "digest_similarity": 0.3,
        "digest_max_statements": 12,
    }
    with pytest.raises(ValueError, match="'digest_similarty' is not a sleep setting .did you mean 'digest_similarity'"):
        parse_variants(["x=digest_similarty:0.3"], "sleep")
    with pytest.raises(ValueError, match="digest_max_statements = 1: Input should be greater than or equal to 2"):
        parse_variants(["x=digest_max_statements:1"], "sleep")
    with pytest.raises(ValueError, match="'graph_weight' is not a sleep setting"):
        parse_variants(["x=graph_weight:0"], "sleep")


def test_a_variant_is_named_settings_as_json_scalars_beside_the_defaults() -> None:
    variants = parse_variants(['blend=fusion:"blend",rrf_k:30', "no graph=graph_weight:0"])
    assert variants == {
        "shipped defaults": {},
        "blend": {"fusion": "blend", "rrf_k": 30},
        "no graph": {"graph_weight": 0},
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x=candidat_limit:75", "'candidat_limit' is not a retrieval setting (did you mean 'candidate_limit'?)"),
        ("x=graph_weight:-1", "graph_weight = -1: Input should be greater than or equal to 0"),
        ('x=rrf_k:"many"', "rrf_k = 'many'"),
        ("x=fusion:best", "fusion = 'best'"),
        ("x=graph_weight", "'graph_weight' is not key:value"),
        ("=graph_weight:0", "has no name"),
    ],
)
def test_a_variant_that_is_not_a_retrieval_setting_is_refused_by_name(spec: str, message: str) -> None:
    """A misspelt key would make a variant the defaults under another name: 0.0000 in every fold, read as "no
    effect" (as a candidate_limit variant was, before configure_retrieval moved the policy's pool)."""
    with pytest.raises(ValueError) as refused:
        parse_variants([spec])
    assert message in str(refused.value)


def test_a_variants_values_are_taken_as_the_config_takes_them() -> None:
    variants = parse_variants(["blend=fusion:blend,graph_weight:1,event_anchors:true", "same"])
    assert variants["blend"] == {"fusion": "blend", "graph_weight": 1.0, "event_anchors": True}
    assert isinstance(variants["blend"]["graph_weight"], float) and variants["same"] == {}


SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_folds.py"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--apart", "--variant", 'blend=fusion:"blend"'], "--apart compares DIR with a store per conversation"),
        (["--apart", "--baseline-dir", "{store}"], "give no --variant or --baseline-dir"),
        (["--variant", "x=rrf_k:30", "--baseline-dir", "{store}"], "--baseline-dir compares two stores"),
        (["--data-dir", "{empty}"], "no store there (no memory.db)"),
        (["--variant", "x=candidat_limit:75"], "did you mean 'candidate_limit'?"),
        (["--sleep-variant", "x=digest_similarity:2"], "digest_similarity = 2: Input should be less than or equal"),
        (["--sleep-variant", "x=digest_similarity:0.3", "--variant", "y=rrf_k:30"], "give no --variant"),
        (["--sleep-variant", "x=digest_similarity:0.3", "--apart"], "give no --variant, --baseline-dir or --apart"),
        (["--sleep-jobs", "digest,dreams"], "--sleep-jobs 'digest,dreams': give 'cycle' or some of forget, decay"),
        (["--sleep-jobs", " , "], "--sleep-jobs ' , ': give 'cycle'"),
        (["--sleep-jobs", "cycle"], "--sleep-jobs says which jobs --sleep-variant or --without-job run"),
        (["--sleep-jobs", "digest"], "--sleep-jobs says which jobs --sleep-variant or --without-job run"),
        (["--without-job", "compact"], "--without-job compact: leave out only jobs --sleep-jobs runs (digest)"),
        (["--without-job", "digest", "--baseline-dir", "{store}"], "give no --variant, --baseline-dir or --apart"),
    ],
)
def test_the_script_refuses_what_it_cannot_compare_before_opening_anything(
    extra: list[str], message: str, tmp_path: Path
) -> None:
    store, empty = tmp_path / "store", tmp_path / "empty"
    store.mkdir()
    empty.mkdir()
    (store / "memory.db").touch()  # only its presence is checked before the refusal
    args = ["--dataset", "locomo", "--data", str(tmp_path / "locomo.json"), "--data-dir", str(store)]
    args += [a.format(store=store, empty=empty) for a in extra]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert (store / "memory.db").stat().st_size == 0  # nothing was opened or written
