"""The coding-notes retrieval check (bench/coding_notes.py): its data, its figures, and order independence.

A slice of the shipped set through the real store and the real embedder; no threshold on quality, which the
benchmark reports (docs/benchmarks.md, "Coding notes"), but the machinery must count what it claims.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from agent_memory.bench.coding_notes import (
    FIFTH,
    FOURTH,
    HELDOUT,
    KINDS,
    SETS,
    SHIPPED,
    SIXTH,
    THIRD,
    Answer,
    NoteQuery,
    ask_all,
    bootstrap_difference,
    load_notes,
    notes_config,
    order_changes,
    pooled,
    scores,
    sliced,
)
from agent_memory.embeddings.text import Embedder

NOTE_KINDS = {"decision", "fact", "finding", "procedure", "preference", "note", "handoff"}


@pytest.mark.parametrize("name", [SHIPPED, HELDOUT, THIRD, FOURTH, FIFTH, SIXTH])
def test_each_shipped_set_is_one_project_with_half_its_questions_paraphrased(name: str) -> None:
    notes = load_notes(name=name)
    ids = {n.note_id for n in notes.notes}
    assert len(notes.notes) >= 64 and len(ids) == len(notes.notes)
    assert {n.kind for n in notes.notes} == NOTE_KINDS
    literal = [q for q in notes.queries if q.kind == "literal"]
    paraphrased = [q for q in notes.queries if q.kind == "paraphrased"]
    assert len(literal) == len(paraphrased) >= 24
    assert all(q.relevant and q.relevant <= ids for q in notes.queries)
    days = [n.day for n in notes.notes]
    assert days == sorted(days) and len({n.written_at for n in notes.notes}) == len(notes.notes)


@pytest.mark.parametrize("one, other", list(itertools.combinations(SETS.values(), 2)))
def test_the_sets_are_other_projects(one: str, other: str) -> None:
    first, second = load_notes(name=one), load_notes(name=other)
    assert not {n.note_id for n in first.notes} & {n.note_id for n in second.notes}
    assert not {n.text for n in first.notes} & {n.text for n in second.notes}
    assert not {q.text for q in first.queries} & {q.text for q in second.queries}


def test_scores_count_a_hit_in_the_top_five_and_its_reciprocal_rank() -> None:
    hit = Answer(NoteQuery("a", "literal", "x", frozenset({"n2"})), ("n1", "n2"), ())
    miss = Answer(NoteQuery("b", "paraphrased", "y", frozenset({"n9"})), ("n1", "n2"), ())
    figures = scores([hit, miss])
    assert figures["literal"] == {"n": 1, "recall@5": 1.0, "mrr": 0.5}
    assert figures["paraphrased"] == {"n": 1, "recall@5": 0.0, "mrr": 0.0}
    assert figures["all"]["recall@5"] == 0.5
    assert order_changes([hit], [Answer(hit.query, ("n2", "n1"), ())]) == 1
    assert bootstrap_difference({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 1.0})[0] == 0.5


async def test_a_slice_through_the_real_store_ranks_the_same_in_any_order(tmp_path: Path, embedder: Embedder) -> None:
    notes = sliced(load_notes(), 3)
    forward = await ask_all(notes_config(tmp_path / "forward", environ={}), embedder, notes)
    reverse = list(reversed(notes.queries))
    backward = await ask_all(notes_config(tmp_path / "backward", environ={}), embedder, notes, reverse)
    figures = scores(forward)
    assert [figures[kind]["n"] for kind in KINDS] == [3, 3]
    assert all(0.0 <= figures[kind]["recall@5"] <= 1.0 for kind in KINDS)
    assert all(len(a.ranked) == 5 and "?" not in a.ranked for a in forward)
    assert order_changes(forward, backward) == 0  # the accesses one question records do not reorder the next


def test_sets_pool_with_their_questions_paired() -> None:
    def report(shipped: list[float], walk: list[float]) -> dict[str, Any]:
        def kinds(values: list[float]) -> dict[str, dict[str, float]]:
            return {"literal": {"l": 1.0}, "paraphrased": {f"p{i}": v for i, v in enumerate(values)}}

        return {"hits": {"shipped defaults": kinds(shipped), "with graph walk": kinds(walk)}}

    figures = pooled({"a": report([1.0, 1.0], [1.0, 0.0]), "b": report([1.0, 0.0, 1.0], [1.0, 0.0, 0.0])})
    walk = figures["with graph walk"]["paraphrased"]
    assert walk["n"] == 5 and walk["recall@5"] == 0.4 and walk["delta"] == -0.4
    assert walk["interval"][0] <= -0.4 <= walk["interval"][1] <= 0  # no question gains from the walk
    assert figures["shipped defaults"]["paraphrased"] == {"recall@5": 0.8, "n": 5, "delta": 0.0, "interval": [0.0, 0.0]}
