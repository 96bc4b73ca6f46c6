"""The retrieval benchmark harness: `agent-memory bench locomo|longmemeval --data PATH`.

Protocol (../shared/data/README.md): ingest every turn through the real `process_turns` path with its session's
time; ask each question at its own time; render a context for each budget, counting every token rendered; score
evidence recall (the share of gold turns whose memory reaches the context), recall@k over the ranked source turns,
MRR, the share of questions with all their evidence in context, tokens used, and ingest and query time.

One recall per question feeds every budget: `pack` is the same function `MemoryManager.context` uses, so the
harness measures exactly what an agent gets, without recording accesses that would let one question tune the next.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import groupby, islice
from pathlib import Path
from typing import Any, TextIO

from agent_memory.bench.bootstrap import interval, paired_interval
from agent_memory.bench.filling import fill
from agent_memory.bench.questions import Question, TurnKey, locomo_questions, longmemeval_questions
from agent_memory.cognition.context import pack
from agent_memory.config import RetrievalConfig
from agent_memory.manager import MemoryManager
from agent_memory.models import Context, Memory

QUESTIONS: dict[str, Callable[[Path], Iterator[Question]]] = {
    "locomo": locomo_questions,
    "longmemeval": longmemeval_questions,
}
RECALL_AT = (1, 5, 10, 20)
HEADLINE = {"locomo": ("multi-hop", "temporal", "open-domain", "single-hop")}  # category 5 reported apart
SIGNALS_OFF: dict[str, Any] = {  # every signal beside the search layers switched off
    "graph_weight": 0.0,
    "session_weight": 0.0,
    "user_weight": 0.0,
    "speaker_weight": 0.0,
    "context_replies": 0,
    "mood_weight": 0.0,
    "decay_weight": 0.0,
}
ALONE_OFF: dict[str, Any] = {  # everything beside one search layer switched off: that layer's ranking alone
    "keyword_weight": 0.0,
    "semantic_weight": 0.0,
    "grep_weight": 0.0,
    "time_layer_weight": 0.0,
    **SIGNALS_OFF,
}
PLAIN_BM25: dict[str, Any] = {  # the keyword layer alone: FTS5's BM25 over the memories, no time window's weights
    **ALONE_OFF,
    "keyword_weight": 1.0,
    "context_search": False,
    "time_boost": 0.0,
    "time_penalty": 1.0,
    "time_penalty_after": 1.0,
}
"""Issue #22's floor: the configuration is never to score below its own keyword layer alone. Every `bench` run asks
the questions this way too, on the same store, and reports the difference question by question."""


@dataclass
class Scores:
    """Per-question figures for one budget, summarised by category and pooled."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, question: Question, ranked: Sequence[TurnKey], in_context: set[TurnKey], tokens: int) -> None:
        gold = question.gold
        first = next((i for i, key in enumerate(ranked, 1) if key in gold), None)
        row = {
            "category": question.category,
            "conversation": question.namespace,
            "recall": len(gold & in_context) / len(gold),
            "all": gold <= in_context,
            "mrr": 1.0 / first if first else 0.0,
            "tokens": tokens,
        }
        row |= {f"recall@{k}": len(gold & set(ranked[:k])) / len(gold) for k in RECALL_AT}
        if question.gold_sessions:
            sessions = {(ns, s) for ns, s, _ in in_context}
            row["session_recall"] = len(question.gold_sessions & sessions) / len(question.gold_sessions)
        self.rows.append(row)

    def summary(self, headline: Iterable[str] | None) -> dict[str, Any]:
        wanted = set(headline) if headline else None
        pooled = [r for r in self.rows if wanted is None or r["category"] in wanted]
        by_category = {
            c: list(g) for c, g in groupby(sorted(self.rows, key=lambda r: r["category"]), lambda r: r["category"])
        }
        summary = {
            "pooled": _mean(pooled) | _spread(pooled),
            "by_category": {c: _mean(rows) for c, rows in by_category.items()},
        }
        if wanted is not None:  # the headline leaves categories out: every question pooled too
            summary["all_categories"] = _mean(self.rows) | _spread(self.rows)
        return summary


def against_plain(system: Scores, plain: Scores, headline: Iterable[str] | None) -> dict[str, Any]:
    """The configuration's recall against plain BM25's (PLAIN_BM25) on the same questions, headline categories only:
    the paired difference with its 95% interval (conversations, then their questions), and for how many questions
    each finds more of the evidence."""
    wanted = set(headline) if headline else None
    pairs = [(a, b) for a, b in zip(system.rows, plain.rows, strict=True) if wanted is None or a["category"] in wanted]
    after: dict[str, list[float]] = {}
    before: dict[str, list[float]] = {}
    for ours, theirs in pairs:
        after.setdefault(ours["conversation"], []).append(float(ours["recall"]))
        before.setdefault(ours["conversation"], []).append(float(theirs["recall"]))
    if not pairs:
        return {"n": 0}
    delta, low, high = paired_interval(after, before)
    return {
        "n": len(pairs),
        "plain_bm25": round(statistics.fmean(float(b["recall"]) for _, b in pairs), 4),
        "delta": round(delta, 4),
        "interval": [round(low, 4), round(high, 4)],
        "bm25_finds_more": sum(b["recall"] > a["recall"] for a, b in pairs),
        "finds_more": sum(a["recall"] > b["recall"] for a, b in pairs),
    }


def _mean(rows: list[dict[str, Any]]) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    keys = [k for k in rows[0] if k not in ("category", "conversation")]
    return {"n": len(rows)} | {k: round(statistics.fmean(float(r[k]) for r in rows), 4) for k in keys}


def _spread(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Recall's 95% bootstrap interval (resampling conversations, then their questions: bootstrap.py) and, where a
    conversation holds several questions (LoCoMo), its recall in each: the folds' spread."""
    if not rows:
        return {}
    groups: dict[str, list[float]] = {}
    for row in rows:
        groups.setdefault(row["conversation"], []).append(float(row["recall"]))
    _, low, high = interval(groups)
    spread: dict[str, Any] = {"recall_interval": [round(low, 4), round(high, 4)]}
    if len(groups) < len(rows):
        spread["recall_by_conversation"] = {g: round(statistics.fmean(v), 4) for g, v in sorted(groups.items())}
    return spread


async def ask(
    manager: MemoryManager,
    questions: Sequence[Question],
    *,
    budgets: Sequence[int],
    dump: TextIO | None = None,
) -> tuple[dict[int, Scores], list[float]]:
    """Each question is recalled at its own time, once per candidate pool (a budget over 2,048 tokens asks each
    layer for more, exactly as `context()` does), and packed once per budget with the replies `context()` shows (a
    turn the save decision did not keep counts as found when it is in the context as a reply); query time is the
    smallest pool's."""
    scores = {budget: Scores() for budget in budgets}
    latencies: list[float] = []
    if manager.records.keyword_index is not None:  # every question ranked by the namespace's statistics, none by FTS5's
        await manager.records.keyword_index.caught_up()
    pools: dict[int, list[int]] = {}  # candidates per layer -> the budgets that context() serves from that pool
    for budget in sorted(budgets):
        pools.setdefault(manager.candidates_for(budget), []).append(budget)
    for question in questions:
        ranked: list[TurnKey] | None = None
        for pool_budgets in pools.values():
            started = time.perf_counter()
            recalled = await manager.recall(
                question.text, namespace=question.namespace, now=question.asked_at, budget_tokens=pool_budgets[0]
            )
            if ranked is None:  # query time and ranked metrics from the smallest pool (context()'s up to 3,200 tokens)
                latencies.append((time.perf_counter() - started) * 1000)
                ranked = await _turn_keys(manager, [r.memory for r in recalled.ranked.results])
            replies = await manager.replies_of(recalled.ranked, question.text, question.namespace)  # as context()'s
            for budget in pool_budgets:
                context = pack(recalled.ranked, budget=budget, counter=manager.token_counter, replies=replies)
                in_context = set(await _turn_keys(manager, [item.memory for item in context.items]))
                in_context |= {
                    (question.namespace, i.reply.session_id, i.reply.turn_number) for i in context.items if i.reply
                }
                scores[budget].add(question, ranked, in_context, context.tokens)
                if dump is not None:
                    _dump(dump, question, budget, ranked, in_context, context)
    return scores, latencies


def _dump(
    out: TextIO, question: Question, budget: int, ranked: list[TurnKey], in_context: set[TurnKey], context: Context
) -> None:
    record = {
        "question_id": question.question_id,
        "category": question.category,
        "budget": budget,
        "ranked": [list(k[1:]) for k in ranked[:50]],
        "in_context": sorted([list(k[1:]) for k in in_context]),
        "gold": sorted([list(k[1:]) for k in question.gold]),
        "tokens": context.tokens,
        "context": context.text,
    }
    out.write(json.dumps(record, ensure_ascii=False) + "\n")


async def _turn_keys(manager: MemoryManager, memories: Sequence[Memory]) -> list[TurnKey]:
    """The source turns, in order, each once. A consolidated memory or a digest counts through its lineage: every
    turn it was made from, at its place in the ranking (a digest holds each of those turns' statements)."""
    merged = [m.memory_id for m in memories if m.generation > 0]
    lineage = await manager.records.lineage_turns(merged) if merged else {}
    keys: dict[TurnKey, None] = {}
    for memory in memories:
        if memory.generation > 0:
            for session_id, turn_number in lineage.get(memory.memory_id, []):
                keys.setdefault((memory.namespace, session_id, turn_number), None)
        elif memory.session_id is not None and memory.turn_number is not None:
            keys.setdefault((memory.namespace, memory.session_id, memory.turn_number), None)
    return list(keys)


ABLATIONS: list[tuple[str, dict[str, Any]]] = [
    ("keyword only", {"semantic_weight": 0, "grep_weight": 0, "time_layer_weight": 0}),
    ("semantic only", {"keyword_weight": 0, "context_search": False, "grep_weight": 0, "time_layer_weight": 0}),
    ("semantic with context vectors", {"keyword_weight": 0, "grep_weight": 0, "time_layer_weight": 0}),
    ("keyword + semantic (fused)", {"context_search": False, "grep_weight": 0, "time_layer_weight": 0}),
    ("+ context vectors", {"grep_weight": 0, "time_layer_weight": 0}),
    ("+ grep", {"time_layer_weight": 0}),
    ("+ time", {}),
    ("+ graph", {}),
    ("+ session fusion", {}),
    ("+ role", {}),
    ("+ speaker", {}),
    ("+ replies", {}),
    ("+ mood", {}),
    ("+ decay (all signals)", {}),
]
_LATER = {  # what each step of the ladder turns on; everything after a step is still off at that step
    "+ time": [],
    "+ graph": ["graph_weight"],
    "+ session fusion": ["session_weight"],
    "+ role": ["user_weight"],
    "+ speaker": ["speaker_weight"],
    "+ replies": ["context_replies"],
    "+ mood": ["mood_weight"],
    "+ decay (all signals)": ["decay_weight"],
}


def ablation_configs(base: RetrievalConfig) -> list[tuple[str, RetrievalConfig]]:
    """Each layer alone, then each signal added in turn, ending at the shipped configuration."""
    off = SIGNALS_OFF
    configs = []
    switched_on: list[str] = []
    for name, changes in ABLATIONS:
        switched_on += _LATER.get(name, [])
        still_off = {k: v for k, v in off.items() if k not in switched_on}
        configs.append((name, base.model_copy(update={**still_off, **changes})))
    return configs


def limited(questions: Iterator[Question], limit: int | None) -> list[Question]:
    return list(islice(questions, limit)) if limit else list(questions)


async def run_bench(
    manager: MemoryManager,
    dataset: str,
    data: Path,
    *,
    budgets: Sequence[int],
    limit: int | None = None,
    dump: TextIO | None = None,
    ablate: bool = False,
    sleep: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Ingest the dataset's conversations into `manager`, ask its questions, and return the report. With `sleep`,
    then run a full sleep cycle and ask again (bench/lifecycle.py)."""
    questions = limited(QUESTIONS[dataset](data), limit)
    namespaces = {q.namespace for q in questions}
    filled = await fill(manager, dataset, data, namespaces, progress=progress)
    headline = HEADLINE.get(dataset)
    base = manager.config.retrieval
    report: dict[str, Any] = {
        "dataset": dataset,
        "data": str(data),
        "questions": len(questions),
        "turns": filled.turns + filled.reused,
        "ingest_seconds": round(filled.seconds, 2),
        "long_turns": {"turns": len(filled.long_turns), "chunks": sum(filled.long_turns)},
        "idle_work_seconds": round(filled.idle_seconds, 2),  # vector upgrade, context vectors, digests
        "token_counter": manager.token_counter.name,
        "retrieval_config": base.model_dump(mode="json"),
        "save": await _saved(manager),
    }
    scores, latencies = await ask(manager, questions, budgets=budgets, dump=dump)
    report["query_ms"] = {"p50": round(statistics.median(latencies), 1), "mean": round(statistics.fmean(latencies), 1)}
    report["budgets"] = {str(b): s.summary(headline) for b, s in scores.items()}
    progress(f"answered {len(questions)} questions, median {report['query_ms']['p50']} ms")
    manager.configure_retrieval(base.model_copy(update=PLAIN_BM25))
    try:
        plain, _ = await ask(manager, questions, budgets=budgets)
    finally:
        manager.configure_retrieval(base)
    report["against_bm25"] = {str(b): against_plain(scores[b], plain[b], headline) for b in budgets}
    if ablate:
        report["ablation"] = {}
        for name, config in ablation_configs(base):
            manager.configure_retrieval(config)
            ablated, _ = await ask(manager, questions, budgets=budgets)
            report["ablation"][name] = {str(b): s.summary(headline)["pooled"] for b, s in ablated.items()}
            progress(f"ablation {name}: {report['ablation'][name]}")
        manager.configure_retrieval(base)
    if sleep:
        from agent_memory.bench.lifecycle import run_lifecycle

        report["lifecycle"] = await run_lifecycle(manager, questions, budgets=budgets, before=scores, headline=headline)
        tokens, recall = report["lifecycle"]["stored_tokens"], report["lifecycle"]["recall"]
        progress(
            f"after a sleep cycle: stored tokens {-tokens['shrink']:+.1%} (and {tokens['digests']} in digests; "
            f"{-tokens['shrink_with_digests']:+.1%} with them), "
            f"recall {recall}"
        )
    return report


async def _saved(manager: MemoryManager) -> dict[str, Any]:
    """How the stored turns were judged (read from the decision log, so a reused store reports its own policy)
    and the share kept: only kept turns are memories, so only they can be found."""
    counts = await manager.records.counts()
    rows = await manager.records.decision_policies()
    policy = ", ".join(f"{name or 'phatic filter (before 0.2)'} {n}" for name, n in rows) or "none"
    kept = counts["memories"] / counts["turns"] if counts["turns"] else 0.0
    return {"policy": policy, "llm": manager.config.llm.model or None, "kept_share": round(kept, 4)}


def _interval(summary: dict[str, Any]) -> str:
    low, high = summary.get("recall_interval", (None, None))
    return f"[{low:.3f}, {high:.3f}]" if low is not None else ""


def format_report(report: dict[str, Any]) -> str:
    """A plain-text table: recall per category and pooled, per budget."""
    lines = [
        f"{report['dataset']}: {report['questions']} questions, {report['turns']} turns, "
        f"ingest {report['ingest_seconds']} s, query p50 {report['query_ms']['p50']} ms, "
        f"tokens by {report['token_counter']}, saved by {report['save']['policy']}: "
        f"{report['save']['kept_share']:.1%} of turns kept"
    ]
    for budget, summary in report["budgets"].items():
        pooled = summary["pooled"]
        lines.append(
            f"budget {budget}: recall {pooled['recall']:.3f} {_interval(pooled)}  all-evidence {pooled['all']:.3f}  "
            f"MRR {pooled['mrr']:.3f}  "
            + "  ".join(f"R@{k} {pooled[f'recall@{k}']:.3f}" for k in RECALL_AT)
            + f"  tokens {pooled['tokens']:.0f}"
            + (
                f"  (every category: recall {summary['all_categories']['recall']:.3f} "
                f"{_interval(summary['all_categories'])})"
                if "all_categories" in summary
                else ""
            )
        )
        if "recall_by_conversation" in pooled:
            folds = pooled["recall_by_conversation"]
            lines.append(
                "    by conversation: "
                + "  ".join(f"{g} {r:.3f}" for g, r in folds.items())
                + f"  (spread {max(folds.values()) - min(folds.values()):.3f})"
            )
        versus = report.get("against_bm25", {}).get(budget, {})
        if versus.get("n"):
            low, high = versus["interval"]
            lines.append(
                f"    against plain BM25 on this store (the keyword layer alone): {versus['plain_bm25']:.3f}, "
                f"difference {versus['delta']:+.3f} [{low:+.3f}, {high:+.3f}]; BM25 finds more of the evidence "
                f"for {versus['bm25_finds_more']} of {versus['n']} questions, this configuration for {versus['finds_more']}"
            )
        for category, row in summary["by_category"].items():
            extra = f"  session {row['session_recall']:.3f}" if "session_recall" in row else ""
            lines.append(f"    {category:<28} n={row['n']:<4} recall {row['recall']:.3f}{extra}")
    for name, budgets in report.get("ablation", {}).items():
        lines.append(f"ablation {name:<28} " + "  ".join(f"{b}: {r['recall']:.3f}" for b, r in budgets.items()))
    return "\n".join(lines)
