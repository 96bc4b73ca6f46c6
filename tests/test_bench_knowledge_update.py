"""The knowledge-update benchmark's classification, on a tiny LongMemEval-shaped haystack with a real store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent_memory.bench.filling import ingest, turns_for
from agent_memory.bench.knowledge_update import (
    NEITHER,
    NEWEST,
    STALE,
    ask_updates,
    asks_for,
    bootstrap_difference,
    classify,
    compare,
    summarise,
    update_questions,
)
from agent_memory.cognition.fact_block import relevant_facts
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import Fact, new_id

FILLER = (
    "Could you suggest a few stretches for after a long run? My calves get tight and I would like something short "
    "that I can do at the park before walking home. "
)
NEW_SCORE = (
    FILLER * 3 + "By the way, I just got my highest score in Ticket to Ride: 132 points! " + FILLER * 2
)  # long: it never fits a small budget, so what a small context holds depends on length, not on rank
PORTO = FILLER * 3 + "I moved to Porto last month and the light there is lovely. " + FILLER * 2


def _entry(question_id: str, question: str, answer: str, old: str, new: str) -> dict[str, Any]:
    """Three sessions, the newest answer session listed first: the order is the dates', not the haystack's."""
    return {
        "question_id": question_id,
        "question_type": "knowledge-update",
        "question": question,
        "question_date": "2023/07/01 (Sat) 10:00",
        "answer": answer,
        "answer_session_ids": ["new", "old"],
        "haystack_session_ids": ["new", "other", "old"],
        "haystack_dates": ["2023/06/20 (Tue) 09:00", "2023/03/02 (Thu) 09:00", "2023/01/10 (Tue) 09:00"],
        "haystack_sessions": [
            [{"role": "user", "content": new, "has_answer": True}],
            [{"role": "user", "content": "I repainted the garden fence green over the weekend."}],
            [{"role": "user", "content": old, "has_answer": True}],
        ],
    }


DATA = [
    _entry(
        "score", "What is my highest score in Ticket to Ride?", "132 points", "Ticket to Ride: 124 points.", NEW_SCORE
    ),
    _entry("home", "Where do I live now?", "Porto", "I live in Lisbon.", PORTO),
]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "ku.json"
    path.write_text(json.dumps(DATA), encoding="utf-8")
    return path


@pytest.fixture
async def store(config: Config, embedder: Embedder, data: Path) -> AsyncIterator[MemoryManager]:
    """Every turn kept, facts found as turns are stored; the tiny haystack ingested as the benchmark does."""
    facts = config.facts.model_copy(update={"extract_on_write": True})
    async with MemoryManager.open(config.model_copy(update={"facts": facts}), embedder=embedder) as manager:
        await ingest(manager, turns_for("longmemeval", data))
        yield manager


@pytest.mark.parametrize(
    ("reached", "expected"),
    [({"n1"}, NEWEST), ({"n1", "s1"}, NEWEST), ({"s1", "x"}, STALE), ({"x"}, NEITHER), (set(), NEITHER)],
)
def test_classify(reached: set[str], expected: str) -> None:
    assert classify({"n1", "n2"}, {"s1"}, reached) == expected


def test_asks_for_labels_the_value_the_answer_is() -> None:
    assert asks_for("132 points", ["... 132 points!"], ["124 points"]) == "current"
    assert asks_for("Friday", ["a class on Fridays"], ["a class on Thursday"]) == "current"
    assert asks_for("under my bed", ["in a shoe rack"], ["under my bed for storage"]) == "earlier"
    assert asks_for("7", ["on 7/22 we caught 9"], ["caught 7 on 7/10"]) == "unclear"  # in both
    assert asks_for("17", ["caught 170"], ["caught 117"]) == "unclear"  # "117" holds no word starting "17"


def test_update_questions_order_answer_sessions_by_date(data: Path) -> None:
    score, home = update_questions(data)
    assert score.newest_session == ("score", "new") and score.stale_sessions == {("score", "old")}
    assert score.newest == {("score", "new", 0)} and score.stale == {("score", "old", 0)}
    assert score.asks == "current" and home.asks == "current"


async def test_the_classes_follow_what_reaches_the_context(store: MemoryManager, data: Path) -> None:
    score, _ = update_questions(data)
    rows = {r["budget"]: r for r in await ask_updates(store, [score], budgets=[30, 70, 4096])}
    assert rows[4096]["turn"] == NEWEST and rows[4096]["both"] and rows[4096]["recall"] == 1.0
    assert rows[4096]["session"] == NEWEST
    assert rows[70]["turn"] == STALE and rows[70]["tokens"] <= 70  # only the short, stale turn fits
    assert rows[70]["recall"] == 0.5 and not rows[70]["both"]
    assert rows[30]["turn"] == NEITHER == rows[30]["session"] and rows[30]["recall"] == 0.0  # the fence alone
    summary = summarise(list(rows.values()))
    assert summary["n"] == 3 and summary["turn stale only"] == round(1 / 3, 4) and summary["both"] == round(1 / 3, 4)
    assert summary["current"]["n"] == 3


async def test_a_fact_counts_through_the_turn_it_was_stated_in(store: MemoryManager, data: Path) -> None:
    _, home = update_questions(data)
    (plain,) = await ask_updates(store, [home], budgets=[70])
    (with_facts,) = await ask_updates(store, [home], budgets=[70], facts="speaker")
    assert plain["turn"] == STALE and plain["facts"] == 0
    assert with_facts["facts"] >= 1 and "Porto" in with_facts["context"] and "Lisbon" not in with_facts["context"]
    assert with_facts["turn"] == NEWEST and with_facts["tokens"] <= 70  # the long turn itself never fits
    difference = compare([with_facts], [plain], 70)
    assert difference["turn stale only"] == (-1.0, -1.0, -1.0) and difference["turn newest"] == (1.0, 1.0, 1.0)
    (matched,) = await ask_updates(store, [home], budgets=[70], facts="words")  # "live" is in "lives in"
    assert matched["turn"] == NEWEST and matched["facts"] == with_facts["facts"]


def _fact(attribute: str, value: str) -> Fact:
    at = datetime(2023, 1, 1, tzinfo=UTC)
    return Fact(new_id(), "ns", "user", attribute, value, at, None, at, None, 0.8, 1, ())


def test_the_words_match_keeps_only_facts_the_query_speaks_of() -> None:
    held = [_fact("has pet", "cat Luna"), _fact("likes", "the idea of a dance party"), _fact("lives in", "Porto")]
    question = "How long have I had my cat, Luna?"
    assert len(relevant_facts(held, question, [])) == 3  # the speaker rule: every fact about "I"
    (kept,) = relevant_facts(held, question, [], match="words")
    assert kept.fact.value == "cat Luna" and kept.reason.endswith("cat, luna")
    assert relevant_facts(held, "Which parties did I go to?", [], match="words")[0].fact.attribute == "likes"
    assert relevant_facts(held, "What did they say about parties?", [], match="words") == []  # not first person


def test_bootstrap_difference() -> None:
    assert bootstrap_difference([1, 1, 0, 0], [1, 1, 0, 0]) == (0.0, 0.0, 0.0)
    mean, low, high = bootstrap_difference([1, 0, 1, 0, 1, 0, 1, 0], [0] * 8)
    assert mean == 0.5 and 0.0 <= low < 0.5 < high <= 1.0


@pytest.mark.parametrize(("match", "expected"), [("speaker", {"Porto", "jazz"}), ("words", {"Porto"})])
async def test_context_honours_facts_block_match(
    config: Config, embedder: Embedder, match: str, expected: set[str]
) -> None:
    facts = config.facts.model_copy(update={"block_match": match})
    async with MemoryManager.open(config.model_copy(update={"facts": facts}), embedder=embedder) as manager:
        await manager.remember_fact("user", "lives in", "Porto")
        await manager.remember_fact("user", "likes", "jazz")
        context = await manager.context("Where do I live now?", budget_tokens=512)
    assert {c.fact.value for c in context.facts} == expected
