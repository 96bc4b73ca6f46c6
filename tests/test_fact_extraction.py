"""The offline extractor of first-person facts and the write path's policy step (issue #20)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_memory import MemoryManager
from agent_memory.cognition.fact_extraction import extract
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        ("My name is Ana Costa and I live in Lisbon.", [("name", "Ana Costa"), ("lives in", "Lisbon")]),
        ("I work as a nurse at Santa Maria hospital.", [("job", "nurse"), ("employer", "Santa Maria hospital")]),
        ("My sister is called Ines.", [("sister", "Ines")]),
        ("I have a dog named Biscuit who loves the beach.", [("has pet", "dog Biscuit")]),
        ("I can't stand cilantro.", [("dislikes", "cilantro")]),
        ("If I moved to Berlin I would learn German.", []),  # a hypothetical
        ("I don't live in Faro anymore.", []),  # a negation
        ("Do you live in Porto too?", []),  # a question
        ("I love it!", []),  # only a pronoun
        ("I hate that this keeps happening.", []),  # a clause, not a thing
        ("I think I like the blue one better.", []),  # an opinion
    ],
)
def test_what_the_extractor_takes_and_leaves(text: str, facts: list[tuple[str, str]]) -> None:
    assert [(c.attribute, c.value) for c in extract(text, subject="user", now=NOW)] == facts


def test_a_stated_date_becomes_the_facts_valid_time() -> None:
    (moved,) = extract("I moved to Porto on May 1, into a flat in Bonfim.", subject="user", now=NOW)
    assert (moved.attribute, moved.value, moved.valid_at) == ("lives in", "Porto", datetime(2026, 5, 1, tzinfo=UTC))


async def test_the_write_path_remembers_what_a_user_turn_states(config: Config, embedder: Embedder) -> None:
    extracting = config.model_copy(update={"facts": config.facts.model_copy(update={"extract_on_write": True})})
    async with MemoryManager.open(extracting, embedder=embedder) as manager:
        first = await manager.process_turn("s1", 0, "I live in Lisbon and I work at Harbor Labs.", at=NOW)
        await manager.process_turn("s1", 1, "You could move to Porto, it is cheaper.", role="assistant", at=NOW)
        moved = await manager.process_turn(
            "s1", 2, "I moved to Porto on June 20!", at=datetime(2026, 6, 25, tzinfo=UTC)
        )
        again = await manager.process_turn("s1", 3, "I live in Porto now.", at=datetime(2026, 7, 1, tzinfo=UTC))
        assert [f.value for f in await manager.fact_history("user", "lives in")] == ["Lisbon", "Porto"]
        (porto,) = [f for f in await manager.facts("user") if f.attribute == "lives in"]
        assert porto.valid_at == datetime(2026, 6, 20, tzinfo=UTC) and porto.observation_count == 2
        assert set(porto.sources) == {moved.turn_id, again.turn_id}
        decided = [d.action for d in await manager.records.fact_decisions(first.turn_id)]
        assert decided == ["STORE", "STORE"]
        assert [d.action for d in await manager.records.fact_decisions(moved.turn_id)] == ["SUPERSEDE"]
        assert [d.action for d in await manager.records.fact_decisions(again.turn_id)] == ["MERGE"]
        packed = await manager.context("Where do I live now?", budget_tokens=300)
        assert "- user | lives in: Porto (since 2026-06-20)" in packed.text
        assert "speaker" in packed.facts[0].reason


async def test_extraction_is_off_by_default(manager: MemoryManager) -> None:
    turn = await manager.process_turn("s1", 0, "I live in Lisbon.")
    assert await manager.facts("user") == [] and await manager.records.fact_decisions(turn.turn_id) == []
