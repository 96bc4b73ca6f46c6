"""Knowledge-update questions (issue #20, "Measured"): does the newest value reach the context, or only a stale one?

A LongMemEval knowledge-update question has two or more answer sessions: the user stated a value, later a new one.
Ordered by session date (haystack order breaks a tie), the newest answer session holds the current value and every
older one a stale value. At each budget a question is classified by what reached its context:

- turn level: "newest" when a has_answer turn of the newest answer session is in the context; else "stale only"
  when a has_answer turn of an older answer session is; else "neither". A question whose newest answer session has
  no has_answer turn (an incomplete key) is left out of the turn level.
- session level (the measure of seed "agent-memory", finding 6): the same with any turn of those sessions.

"newest" includes contexts that hold the stale value too ("both"): their session headers' dates then tell which is
newer. A "known facts" block counts through its facts' source turns, as the data's protocol counts any item that is
not a raw turn. Turn recall is the harness's (every has_answer turn of every answer session).

Which value a question asks for is labelled from the data, not by hand: "current" when the gold answer's words
(case and spacing aside, as whole words, a plural allowed) are in the newest answer session's has_answer turns and
in no older one's, "earlier" the other way round, else "unclear". Some knowledge-update questions ask for the old
value ("Where did I initially keep my old sneakers?"): for them "stale only" is not a wrong answer, so the
current-value questions are summarised apart as well.

Each question is asked at its own time in its own namespace (the harness's protocol, bench/harness.py); one recall
feeds every budget, packed by the same functions `context()` uses, recording nothing.
"""

from __future__ import annotations

import random
import re
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from agent_memory.bench.datasets import namespace_of, parse_longmemeval_time, read_json
from agent_memory.bench.harness import _turn_keys
from agent_memory.bench.questions import Question, TurnKey, longmemeval_questions
from agent_memory.cognition.context import pack
from agent_memory.cognition.fact_block import content_words, fit_facts, pack_after, relevant_facts
from agent_memory.cognition.ranking import Ranked
from agent_memory.manager import MemoryManager
from agent_memory.models import Context

KNOWLEDGE_UPDATE = "knowledge-update"
NEWEST, STALE, NEITHER = "newest", "stale only", "neither"
SessionKey = tuple[str, str]
PLAIN_BM25: dict[str, Any] = {  # the keyword layer alone, every match ranked: BM25 over the stored turns
    "semantic_weight": 0.0,
    "grep_weight": 0.0,
    "time_layer_weight": 0.0,
    "image_weight": 0.0,
    "graph_weight": 0.0,
    "session_weight": 0.0,
    "user_weight": 0.0,
    "mood_weight": 0.0,
    "decay_weight": 0.0,
    "keyword_common_share": 1.0,
}


@dataclass(frozen=True, slots=True)
class UpdateQuestion:
    question: Question
    newest_session: SessionKey
    stale_sessions: frozenset[SessionKey]
    newest: frozenset[TurnKey]
    """has_answer turns of the newest answer session: the current value."""
    stale: frozenset[TurnKey]
    """has_answer turns of the older answer sessions: the stale values."""
    asks: str
    """"current", "earlier" or "unclear": which value the gold answer is."""
    evidence: Mapping[TurnKey, str]
    """Every has_answer turn's text, for diagnosis."""
    dates: Mapping[SessionKey, datetime]
    """When each answer session took place."""


def classify(newest: Collection[Any], stale: Collection[Any], reached: Iterable[Any]) -> str:
    """NEWEST when any of `newest` reached the context, else STALE when any of `stale` did, else NEITHER."""
    found = set(reached)
    if found & set(newest):
        return NEWEST
    return STALE if found & set(stale) else NEITHER


def asks_for(answer: str, newest: Iterable[str], stale: Iterable[str]) -> str:
    """Which answer session's evidence states the gold answer: "current", "earlier" or "unclear"."""
    pattern = re.compile(r"(?<!\w)" + re.escape(" ".join(answer.casefold().split())) + r"(?:e?s)?(?!\w)")
    in_newest = any(pattern.search(" ".join(t.casefold().split())) for t in newest)
    in_stale = any(pattern.search(" ".join(t.casefold().split())) for t in stale)
    if in_newest != in_stale:
        return "current" if in_newest else "earlier"
    return "unclear"


def update_questions(path: Path) -> list[UpdateQuestion]:
    """The knowledge-update questions with at least two answer sessions in their haystack."""
    entries = {e["question_id"]: e for e in read_json(path) if e.get("question_type") == KNOWLEDGE_UPDATE}
    found = (_update_of(entries[q.question_id], q) for q in longmemeval_questions(path) if q.question_id in entries)
    return [u for u in found if u is not None]


def _update_of(entry: Mapping[str, Any], question: Question) -> UpdateQuestion | None:
    namespace, wanted = question.namespace, set(entry["answer_session_ids"])
    sessions = zip(entry["haystack_session_ids"], entry["haystack_dates"], entry["haystack_sessions"], strict=True)
    answer: dict[SessionKey, tuple[datetime, int, list[Any]]] = {}
    for position, (raw, date, turns) in enumerate(sessions):
        key = (namespace, namespace_of(raw))
        if raw in wanted and key not in answer:  # a session listed twice is ingested once (datasets.py)
            answer[key] = (parse_longmemeval_time(date), position, turns)
    if len(answer) < 2:
        return None
    order = sorted(answer, key=lambda k: answer[k][:2])
    evidence = {
        (*key, i): str(turn["content"])
        for key in order
        for i, turn in enumerate(answer[key][2])
        if turn.get("has_answer")
    }
    newest = frozenset(k for k in evidence if k[:2] == order[-1])
    stale = frozenset(evidence.keys() - newest)
    asks = asks_for(str(entry["answer"]), (evidence[k] for k in newest), (evidence[k] for k in stale))
    dates = {key: answer[key][0] for key in order}
    return UpdateQuestion(question, order[-1], frozenset(order[:-1]), newest, stale, asks, evidence, dates)


async def ask_updates(
    manager: MemoryManager, updates: Sequence[UpdateQuestion], *, budgets: Sequence[int], facts: str | None = None
) -> list[dict[str, Any]]:
    """One row per question and budget. With `facts` (a `facts.block_match`: "speaker" or "words"), the context
    opens with the "known facts" block, as `context()` builds it (the facts true at the question's time, first)."""
    pools: dict[int, list[int]] = {}
    for budget in sorted(budgets):
        pools.setdefault(manager.candidates_for(budget), []).append(budget)
    rows = []
    for update in updates:
        question = update.question
        for pool in pools.values():
            recalled = await manager.recall(
                question.text, namespace=question.namespace, now=question.asked_at, budget_tokens=pool[0]
            )
            ranked = await _turn_keys(manager, [r.memory for r in recalled.ranked.results])
            for budget in pool:
                context = await _context(manager, question, recalled.ranked, budget, facts=facts)
                reached = set(await _turn_keys(manager, [item.memory for item in context.items]))
                stated = await _fact_turns(manager, context)
                row = score(update, budget, ranked, reached | stated, context)
                row["via_facts"] = sorted([list(k[1:]) for k in (stated - reached) & update.question.gold])
                rows.append(row)
    return rows


async def _context(
    manager: MemoryManager, question: Question, ranked: Ranked, budget: int, *, facts: str | None
) -> Context:
    counter = manager.token_counter
    if facts is None:
        return pack(ranked, budget=budget, counter=counter)
    held = await manager.facts(namespace=question.namespace, as_of=question.asked_at)
    entities = [e for result in ranked.results[:10] for e in result.memory.entities]
    relevant = relevant_facts(held, question.text, entities, match=facts)
    chosen, block = fit_facts(relevant, budget, counter)
    return replace(pack_after(ranked, block, budget, counter), facts=tuple(chosen))


async def _fact_turns(manager: MemoryManager, context: Context) -> set[TurnKey]:
    """The turns the context's facts were stated in."""
    reached: set[TurnKey] = set()
    for source in {s for c in context.facts for s in c.fact.sources}:
        row = await manager.records.get_turn(source)
        if row is not None:
            reached.add((row.namespace, row.session_id, row.turn_number))
    return reached


def score(
    update: UpdateQuestion, budget: int, ranked: Sequence[TurnKey], reached: set[TurnKey], context: Context
) -> dict[str, Any]:
    """The classification and recall of one context, with where the evidence ranked (for diagnosis)."""
    question, sessions = update.question, {key[:2] for key in reached}
    place = {key: rank for rank, key in reversed(list(enumerate(ranked, 1)))}
    return {
        "question_id": question.question_id,
        "asks": update.asks,
        "budget": budget,
        "turn": classify(update.newest, update.stale, reached) if update.newest else None,
        "session": classify({update.newest_session}, update.stale_sessions, sessions),
        "both": bool(update.newest & reached and update.stale & reached),
        "recall": len(question.gold & reached) / len(question.gold),
        "session_recall": len(question.gold_sessions & sessions) / len(question.gold_sessions),
        "tokens": context.tokens,
        "facts": len(context.facts),
        "newest_rank": min((place[k] for k in update.newest if k in place), default=None),
        "stale_rank": min((place[k] for k in update.stale if k in place), default=None),
        "in_context": sorted([list(k[1:]) for k in reached]),
        "context": context.text,
    }


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Shares of each class (turn and session level), mean recall and tokens; the current-value questions apart."""
    if not rows:
        return {"n": 0}
    turn = [r for r in rows if r["turn"] is not None]
    current = [r for r in turn if r["asks"] == "current"]
    summary: dict[str, Any] = {"n": len(rows), "n_turn": len(turn)}
    for reach in (NEWEST, STALE, NEITHER):
        summary[f"turn {reach}"] = _share([r["turn"] == reach for r in turn])
        summary[f"session {reach}"] = _share([r["session"] == reach for r in rows])
    summary["both"] = _share([r["both"] for r in turn])
    summary["via_facts"] = _share([bool(r.get("via_facts")) for r in rows])  # evidence reached only as a fact's source
    for key in ("recall", "session_recall", "tokens", "facts"):
        summary[key] = round(statistics.fmean(float(r[key]) for r in rows), 4)
    summary["current"] = {"n": len(current)} | {
        f"turn {reach}": _share([r["turn"] == reach for r in current]) for reach in (NEWEST, STALE, NEITHER)
    }
    return summary


def _share(hits: Sequence[bool]) -> float:
    return round(sum(hits) / len(hits), 4) if hits else 0.0


def bootstrap_difference(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, seed: int = 7, level: float = 0.95
) -> tuple[float, float, float]:
    """Mean of a - b, paired by question, with a percentile interval from resampling the questions."""
    deltas = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(deltas, k=len(deltas))) for _ in range(resamples))
    low, high = means[int((1 - level) / 2 * resamples)], means[int((1 + level) / 2 * resamples) - 1]
    return round(statistics.fmean(deltas), 4), round(low, 4), round(high, 4)


def compare(
    rows: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]], budget: int, *, seed: int = 7
) -> dict[str, tuple[float, float, float]]:
    """Paired differences of `rows` over `baseline` at one budget: stale-only share (turn and session level),
    newest share (turn level) and turn recall, each with its bootstrap interval."""
    mine = {r["question_id"]: r for r in rows if r["budget"] == budget}
    base = {r["question_id"]: r for r in baseline if r["budget"] == budget}
    both = sorted(mine.keys() & base.keys())
    scored = [q for q in both if mine[q]["turn"] is not None and base[q]["turn"] is not None]
    measures: dict[str, tuple[list[str], Callable[[dict[str, Any]], float]]] = {
        "turn stale only": (scored, lambda r: float(r["turn"] == STALE)),
        "session stale only": (both, lambda r: float(r["session"] == STALE)),
        "turn newest": (scored, lambda r: float(r["turn"] == NEWEST)),
        "recall": (both, lambda r: float(r["recall"])),
    }
    return {
        name: bootstrap_difference([value(mine[q]) for q in ids], [value(base[q]) for q in ids], seed=seed)
        for name, (ids, value) in measures.items()
        if ids
    }


def diagnose(update: UpdateQuestion, row: Mapping[str, Any]) -> dict[str, Any]:
    """What a context that missed the newest value had to go on: the query's words each evidence turn shares
    (plurals folded), where each ranked among the source turns, how long each is, and the answer sessions' dates,
    which the context's session headers show beside every turn."""
    asked = content_words(update.question.text)
    asked_at = update.question.asked_at

    def evidence(keys: Iterable[TurnKey]) -> list[dict[str, Any]]:
        return [
            {
                "turn": list(k[1:]),
                "shares": sorted(asked & content_words(update.evidence[k])),
                "chars": len(update.evidence[k]),
                "days_before_question": (asked_at - update.dates[k[:2]]).days,
            }
            for k in sorted(keys)
        ]

    return {
        "question_id": update.question.question_id,
        "budget": row["budget"],
        "turn": row["turn"],
        "question": update.question.text,
        "query_words": sorted(asked),
        "newest_rank": row["newest_rank"],
        "stale_rank": row["stale_rank"],
        "newest": evidence(update.newest),
        "stale": evidence(update.stale),
    }
