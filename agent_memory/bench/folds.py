"""Retrieval settings judged by folds (issue #22): LoCoMo dev leave-one-conversation-out and LongMemEval dev.

`python scripts/bench_folds.py --dataset locomo --data ../shared/data/locomo/locomo_dev.json --data-dir DIR`
opens a store the harness has filled (`agent-memory --data-dir DIR bench ...` with `save.keep_all`), asks every
question under each variant of the retrieval config (the harness's `ask`: one recall per question, recording
nothing, packed as `context()` packs), and reports, beside the shipped defaults:

- per fold: LoCoMo's held-out conversation (the two others are where a choice would be made: a variant is kept
  only if it pays on the held-out conversation of every fold), LongMemEval's single split;
- the pooled difference and a 95% bootstrap interval, resampling conversations and then questions within them
  (LoCoMo), or questions (LongMemEval, where every question is its own haystack).

`--apart` asks whether the benchmark's one store measures what a user's store would: the harness puts every
conversation (or haystack) in a namespace of one store, and a user's store holds one history. It fills a fresh
store for each conversation alone and compares, question by question, with DIR.

`after_sleep` judges the settings of a sleep job (the digests' similarity and size, say) the same way: each
variant on a copy of DIR given an idle store's digests (by the variant's settings) and then the job, against DIR as
ingested before them, and `loco_choice` says which variant the two
other conversations would pick for each held-out one, and what that pick scores there.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import shutil
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent_memory.bench.bootstrap import Rows, paired_interval
from agent_memory.bench.filling import do_idle_work, ingest, turns_for
from agent_memory.bench.harness import HEADLINE, QUESTIONS, Scores, ask, limited
from agent_memory.bench.lifecycle import CATCH_UP_JOBS, CATCH_UP_RUNS
from agent_memory.bench.questions import Question
from agent_memory.config import RetrievalConfig, SleepConfig, load_config
from agent_memory.manager import MemoryManager
from agent_memory.sleep.jobs import run_job


async def figures(
    data_dir: Path,
    dataset: str,
    data: Path,
    variants: Mapping[str, Mapping[str, Any]],
    *,
    budget: int = 2048,
    idle_digests: bool = True,
) -> dict[str, dict[str, Rows]]:
    """variant -> metric ("recall", "mrr") -> conversation -> per-question figures (headline categories only). The
    store is asked once its idle work is done, in place, as a daemon leaves it; `idle_digests=False` leaves out the
    digests an idle store makes (DIR as ingested, against which `after_sleep` judges the digest settings)."""
    questions = limited(QUESTIONS[dataset](data), None)
    idle: dict[str, Any] = {} if idle_digests else {"sleep__digest_idle_delay": "PT0S"}
    config = load_config(data_dir=str(data_dir), save__keep_all=True, image__enabled=False, **idle)
    out: dict[str, dict[str, Rows]] = {}
    async with MemoryManager.open(config) as manager:
        await do_idle_work(manager)  # what a daemon makes while idle: int8 vectors upgraded, context vectors, digests
        base = manager.config.retrieval
        for name, changes in variants.items():
            manager.configure_retrieval(base.model_copy(update=dict(changes)))
            scores, _ = await ask(manager, questions, budgets=[budget])
            out[name] = _grouped(questions, scores[budget], dataset)
        manager.configure_retrieval(base)
    return out


def _grouped(questions: Sequence[Question], scores: Scores, dataset: str) -> dict[str, Rows]:
    """Recall and MRR per fold (LoCoMo's conversation; "all" for LongMemEval), headline categories only, in the
    questions' order: two answers to the same questions pair up figure by figure."""
    wanted = set(HEADLINE.get(dataset, ())) or None
    metrics: dict[str, Rows] = {"recall": {}, "mrr": {}}
    for question, row in zip(questions, scores.rows, strict=True):
        if wanted is not None and question.category not in wanted:
            continue
        group = question.question_id.split(":")[0] if dataset == "locomo" else "all"
        for metric in metrics:
            metrics[metric].setdefault(group, []).append(float(row[metric]))
    return metrics


async def stores_apart(data_dir: Path, dataset: str, data: Path, *, budget: int = 2048) -> dict[str, dict[str, Rows]]:
    """DIR, where every conversation (LoCoMo) or haystack (LongMemEval) is a namespace of one store, against a fresh
    store for each alone, filled and asked the same way (every turn kept): {"one store": ..., "a store each": ...}
    in figures()'s shape. In a store of one history nothing another namespace holds can count, so the difference is
    what sharing a store adds to the benchmark's figures. Each store is removed once its questions are asked."""
    pooled = (await figures(data_dir, dataset, data, {"shipped defaults": {}}, budget=budget))["shipped defaults"]
    questions = limited(QUESTIONS[dataset](data), None)
    rows: dict[str, dict[str, Any]] = {}
    for namespace in dict.fromkeys(q.namespace for q in questions):
        asked = [q for q in questions if q.namespace == namespace]
        with tempfile.TemporaryDirectory(prefix="agent-memory-apart-") as folder:
            config = load_config(data_dir=folder, save__keep_all=True, image__enabled=False)
            async with MemoryManager.open(config) as manager:
                await ingest(manager, turns_for(dataset, data, {namespace}))
                await do_idle_work(manager)
                scores, _ = await ask(manager, asked, budgets=[budget])
        rows |= {q.question_id: row for q, row in zip(asked, scores[budget].rows, strict=True)}
    apart = Scores(rows=[rows[q.question_id] for q in questions])
    return {"one store": pooled, "a store each": _grouped(questions, apart, dataset)}


async def stores_compared(
    data_dir: Path, baseline_dir: Path, dataset: str, data: Path, *, budget: int = 2048
) -> dict[str, dict[str, Rows]]:
    """Two stores of the same data, each asked with the shipped defaults: {"baseline store": ..., "this store": ...}
    in figures()'s shape, so compare() pairs them question by question."""
    plain: dict[str, dict[str, Any]] = {"shipped defaults": {}}
    baseline = (await figures(baseline_dir, dataset, data, plain, budget=budget))["shipped defaults"]
    this = (await figures(data_dir, dataset, data, plain, budget=budget))["shipped defaults"]
    return {"baseline store": baseline, "this store": this}


AS_INGESTED = "as ingested"


async def after_sleep(
    data_dir: Path,
    dataset: str,
    data: Path,
    variants: Mapping[str, Mapping[str, Any]],
    *,
    jobs: Sequence[str] = ("digest",),
    without: Sequence[str] = (),
    budget: int = 2048,
) -> dict[str, dict[str, Rows]]:
    """DIR asked as it is (AS_INGESTED: before an idle store's digests) and, for each variant of the sleep settings,
    a copy of DIR given the idle work a daemon does (the digests by the variant's settings, unless the variant turns
    them off) and then `jobs` in their order at the time of the last question, each asked with the shipped retrieval
    defaults, in figures()'s shape. For each job in `without`, one more variant "without JOB": the shipped settings, `jobs` but that one. A
    job that stops at its time budget runs again until it has caught up, as the daemon's next runs would
    (lifecycle.CATCH_UP_JOBS), before the next job starts; a job that fails stops the comparison with its error.
    DIR itself is never changed; each copy is made beside it and removed once asked."""
    runs = sleep_runs(variants, jobs, without)
    questions = limited(QUESTIONS[dataset](data), None)
    now = max(q.asked_at for q in questions)
    as_ingested = await figures(data_dir, dataset, data, {AS_INGESTED: {}}, budget=budget, idle_digests=False)
    out = {AS_INGESTED: as_ingested[AS_INGESTED]}
    for name, (jobs_run, changes) in runs.items():
        with tempfile.TemporaryDirectory(prefix="agent-memory-sleep-", dir=data_dir.parent) as folder:
            copy = Path(folder) / "store"
            await asyncio.to_thread(shutil.copytree, data_dir, copy)  # LongMemEval's store is 200 MB: off the loop
            settings = {f"sleep__{key}": value for key, value in changes.items()}
            config = load_config(data_dir=str(copy), save__keep_all=True, image__enabled=False, **settings)
            async with MemoryManager.open(config) as manager:
                await do_idle_work(manager)
                for job in jobs_run:
                    for _ in range(1 + (CATCH_UP_RUNS if job in CATCH_UP_JOBS else 0)):
                        run = await run_job(manager, job, now=now)
                        if run.status != "ok":
                            raise RuntimeError(f"variant {name!r}: sleep job {job} {run.status}: {run.error}")
                        if not run.counts.get("deferred"):
                            break
                await manager.flush()
                scores, _ = await ask(manager, questions, budgets=[budget])
            out[name] = _grouped(questions, scores[budget], dataset)
    return out


def sleep_runs(
    variants: Mapping[str, Mapping[str, Any]], jobs: Sequence[str], without: Sequence[str] = ()
) -> dict[str, tuple[list[str], Mapping[str, Any]]]:
    """What after_sleep runs on each copy: variant -> (the jobs in order, the sleep settings changed). Each variant
    runs every job; "without JOB" runs the others with the shipped settings. ValueError for a job left out that is
    not run."""
    missing = [job for job in without if job not in jobs]
    if missing:
        raise ValueError(f"cannot leave out {missing}: the jobs run are {list(jobs)}")
    runs: dict[str, tuple[list[str], Mapping[str, Any]]] = {name: (list(jobs), c) for name, c in variants.items()}
    off = {"digest": {"digest_idle_delay": "PT0S"}}  # without the digest job, no idle store's digests either
    return runs | {f"without {job}": ([j for j in jobs if j != job], off.get(job, {})) for job in without}


def loco_choice(results: Mapping[str, Mapping[str, Rows]], baseline: str, metric: str = "recall") -> dict[str, Any]:
    """Leave one conversation out: for each held-out group, the variant (the baseline among them) with the best
    `metric` over the other groups' questions, and what that choice scores on the held-out group against the
    baseline. A tie goes to the variant listed first. ValueError with fewer than two groups: nothing is left to
    choose on."""
    groups = list(results[baseline][metric])
    if len(groups) < 2:
        raise ValueError(f"leaving one out needs two conversations at least; these figures have {groups}")
    choices: dict[str, Any] = {}
    for held in groups:

        def trained(name: str, held: str = held) -> float:
            return statistics.fmean([x for g, rows in results[name][metric].items() if g != held for x in rows])

        chosen = max(results, key=trained)
        score = statistics.fmean(results[chosen][metric][held])
        choices[held] = {
            "chosen": chosen,
            "on_the_others": round(trained(chosen), 4),
            "held_out": round(score, 4),
            "delta": round(score - statistics.fmean(results[baseline][metric][held]), 4),
        }
    return choices


def format_choice(choices: Mapping[str, Any]) -> str:
    lines = ["leave one conversation out: what the other conversations pick, and what it scores on the one left out"]
    for held, c in choices.items():
        lines.append(
            f"{held:<12} picks {c['chosen']!r:<28} ({c['on_the_others']:.4f} on the others)  "
            f"held out {c['held_out']:.4f}, {c['delta']:+.4f} against the baseline"
        )
    return "\n".join(lines)


def compare(results: Mapping[str, Mapping[str, Rows]], baseline: str) -> dict[str, Any]:
    """Each variant against `baseline`: per-group (fold) differences, their spread, the pooled difference with its
    interval, for recall and MRR."""
    report: dict[str, Any] = {}
    before = results[baseline]
    for name, metrics in results.items():
        entry: dict[str, Any] = {}
        for metric, rows in metrics.items():
            folds = {g: statistics.fmean(v) for g, v in rows.items()}
            deltas = {g: folds[g] - statistics.fmean(before[metric][g]) for g in rows}
            mean, low, high = paired_interval(rows, before[metric])
            entry[metric] = {
                "pooled": round(statistics.fmean([x for v in rows.values() for x in v]), 4),
                "folds": {g: round(v, 4) for g, v in folds.items()},
                "fold_deltas": {g: round(d, 4) for g, d in deltas.items()},
                "delta": round(mean, 4),
                "interval": [round(low, 4), round(high, 4)],
                "pays_every_fold": all(d > 0 for d in deltas.values()),
            }
        report[name] = entry
    return report


def format_comparison(report: Mapping[str, Any], dataset: str) -> str:
    lines = [f"{dataset}: recall at the budget and MRR, each variant against the first"]
    for name, entry in report.items():
        for metric in ("recall", "mrr"):
            e = entry[metric]
            folds = " ".join(f"{g}:{d:+.4f}" for g, d in e["fold_deltas"].items())
            lines.append(
                f"{name:<28} {metric:<6} {e['pooled']:.4f}  delta {e['delta']:+.4f} "
                f"[{e['interval'][0]:+.4f}, {e['interval'][1]:+.4f}]  folds {folds}"
            )
    return "\n".join(lines)


def parse_variants(specs: Sequence[str], section: str = "retrieval") -> dict[str, dict[str, Any]]:
    """NAME=key:value,key:value ... (values as JSON scalars: true, 0.0, "rrf"; a bare word is a string); NAME alone
    is the defaults. Every key must be a setting of `section` ("retrieval" or "sleep") and every value one it takes,
    or ValueError says which: a misspelt key would make a variant the defaults under another name, 0.0000 in every
    fold."""
    model = SECTIONS[section]
    variants: dict[str, dict[str, Any]] = {"shipped defaults": {}}
    for spec in specs:
        name, _, body = spec.partition("=")
        if not name.strip():
            raise ValueError(f"variant {spec!r} has no name: give NAME=key:value,key:value")
        changes: dict[str, Any] = {}
        for pair in (p for p in body.split(",") if p.strip()):
            key, colon, value = pair.partition(":")
            if not colon:
                raise ValueError(f"variant {name!r}: {pair!r} is not key:value")
            changes[key.strip()] = _scalar(value.strip())
        variants[name] = checked(model, section, name, changes)
    return variants


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


SECTIONS: dict[str, type[RetrievalConfig] | type[SleepConfig]] = {"retrieval": RetrievalConfig, "sleep": SleepConfig}


def checked(
    model: type[RetrievalConfig] | type[SleepConfig], section: str, name: str, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """`changes` as `model` takes them (validated, coerced; it forbids unknown keys), or ValueError naming the
    setting at fault, and the closest setting for a misspelt one."""
    try:
        validated = model.model_validate(dict(changes))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(key, list(model.model_fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"variant {name!r}: {key!r} is not a {section} setting{hint}") from exc
        raise ValueError(f"variant {name!r}: {key} = {error.get('input')!r}: {error['msg']}") from exc
    return {key: getattr(validated, key) for key in changes}
