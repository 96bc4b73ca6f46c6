"""Versioned facts (issue #20, section 2, the store): four times, observations, closing, as_of and known_at."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import InvalidIdentifier, InvalidInput
from agent_memory.facts import normalised

JAN, MAY, SEP = (datetime(2025, m, 1, tzinfo=UTC) for m in (1, 5, 9))


async def test_a_new_value_closes_the_old_one_and_keeps_it(manager: MemoryManager) -> None:
    await manager.remember_fact("Ana", "lives in", "Lisbon", valid_at=JAN, source="turn-1")
    again = await manager.remember_fact(" ana ", "Lives  In", "lisbon", valid_at=MAY, source="turn-2")
    assert again.observation_count == 2 and again.sources == ("turn-1", "turn-2")  # the same value: an observation
    moved = await manager.remember_fact("Ana", "lives in", "Porto", valid_at=SEP, source="turn-3")
    assert (moved.value, moved.valid_at, moved.invalid_at) == ("Porto", SEP, None)
    history = await manager.fact_history("ANA", "lives in")
    assert [(f.value, f.valid_at, f.invalid_at) for f in history] == [("Lisbon", JAN, SEP), ("Porto", SEP, None)]
    assert history[0].observation_count == 2  # the closed value keeps what was known of it
    assert [f.value for f in await manager.facts("ana")] == ["Porto"]
    assert [f.value for f in await manager.facts("ana", as_of=MAY + timedelta(days=3))] == ["Lisbon"]
    assert await manager.facts("ana", as_of=JAN - timedelta(days=1)) == []


async def test_known_at_answers_what_the_store_believed_then(config: Config, embedder: Embedder) -> None:
    clock = {"now": datetime(2025, 6, 1, tzinfo=UTC)}
    async with MemoryManager.open(config, embedder=embedder, clock=lambda: clock["now"]) as manager:
        await manager.remember_fact("Tom", "employer", "Harbor Labs", valid_at=JAN)
        clock["now"] = datetime(2025, 10, 1, tzinfo=UTC)
        await manager.remember_fact("Tom", "employer", "Sines Port", valid_at=SEP)  # learned in October
        clock["now"] = datetime(2025, 12, 1, tzinfo=UTC)
        believed_in_june = await manager.facts("tom", known_at=datetime(2025, 6, 15, tzinfo=UTC))
        assert [f.value for f in believed_in_june] == ["Harbor Labs"]
        # In August the store believed Harbor Labs was still true "now"; what it knows today says so too.
        in_august = datetime(2025, 8, 15, tzinfo=UTC)
        assert [f.value for f in await manager.facts("tom", known_at=in_august)] == ["Harbor Labs"]
        assert [f.value for f in await manager.facts("tom", as_of=datetime(2025, 9, 15, tzinfo=UTC))] == ["Sines Port"]
        belief_then = await manager.facts("tom", as_of=datetime(2025, 9, 15, tzinfo=UTC), known_at=in_august)
        assert [f.value for f in belief_then] == ["Harbor Labs"]  # before October nobody knew of the move
        rows = await manager.fact_history("tom", "employer")
        assert rows[0].recorded_at == datetime(2025, 10, 1, tzinfo=UTC) and rows[0].invalid_at == SEP


async def test_a_statement_about_the_past_runs_until_the_next_known_value(manager: MemoryManager) -> None:
    await manager.remember_fact("Ana", "job", "nurse", valid_at=SEP)
    await manager.remember_fact("Ana", "job", "student", valid_at=JAN)  # learned later, true earlier
    assert [(f.value, f.invalid_at) for f in await manager.fact_history("ana", "job")] == [
        ("student", SEP),
        ("nurse", None),
    ]
    await manager.remember_fact("Ana", "job", "intern", valid_at=MAY)  # splits the student interval
    assert [(f.value, f.valid_at, f.invalid_at) for f in await manager.fact_history("ana", "job")] == [
        ("student", JAN, MAY),
        ("intern", MAY, SEP),
        ("nurse", SEP, None),
    ]
    await manager.remember_fact("Ana", "job", "Nurse", valid_at=MAY - timedelta(days=1))  # a correction, not a value
    values = [(f.value, f.valid_at) for f in await manager.fact_history("ana", "job")]
    assert values[0] == ("student", JAN) and ("Nurse", MAY - timedelta(days=1)) in values


async def test_a_multi_valued_attribute_keeps_its_values_side_by_side(manager: MemoryManager) -> None:
    for thing in ("hiking", "pottery", "Hiking"):
        await manager.remember_fact("Melanie", "likes", thing, valid_at=MAY)
    likes = await manager.facts("melanie")
    assert sorted(f.value for f in likes) == ["hiking", "pottery"]
    assert {f.value: f.observation_count for f in likes} == {"hiking": 2, "pottery": 1}


async def test_bad_statements_are_typed_errors(manager: MemoryManager) -> None:
    for field, kwargs in (
        ("subject", {"subject": " "}),
        ("attribute", {"attribute": "x" * 201}),
        ("value", {"value": ""}),
        ("confidence", {"confidence": 1.5}),
        ("valid_at", {"valid_at": datetime(2025, 1, 1)}),  # naive
        ("source", {"source": 7}),
    ):
        args = {"subject": "Ana", "attribute": "lives in", "value": "Porto"} | kwargs
        with pytest.raises(InvalidInput, match=field):
            await manager.remember_fact(**args)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdentifier):
        await manager.remember_fact("Ana", "lives in", "Porto", namespace="../etc")
    assert await manager.facts() == []


async def test_concurrent_statements_of_one_fact_serialise(manager: MemoryManager) -> None:
    await asyncio.gather(*(manager.remember_fact("Ana", "city", "Porto", valid_at=MAY) for _ in range(10)))
    (only,) = await manager.facts("ana")
    assert only.observation_count == 10


async def test_facts_never_cross_namespaces(manager: MemoryManager) -> None:
    rng = random.Random(20)
    namespaces = [f"user-{i}" for i in range(8)]
    canaries = {ns: f"canary-{rng.randrange(10**9)}" for ns in namespaces}
    for ns in namespaces:
        await manager.remember_fact("Ana", "secret", canaries[ns], valid_at=JAN, namespace=ns)
        await manager.remember_fact("Ana", "secret", f"{canaries[ns]}-later", valid_at=MAY, namespace=ns)
    for ns in namespaces:
        seen = {f.value for f in await manager.fact_history("ana", "secret", namespace=ns)}
        assert seen == {canaries[ns], f"{canaries[ns]}-later"}
        assert {f.namespace for f in await manager.facts(namespace=ns, as_of=MAY)} == {ns}
    assert await manager.facts() == []  # nothing in the default namespace


def test_keys_are_normalised() -> None:
    assert normalised("  Lives\t IN ") == "lives in" == normalised("lives in") == normalised("lives_in")


async def test_the_configured_multi_valued_names_match_the_extractors(manager: MemoryManager) -> None:
    await manager.remember_fact("user", "allergic to", "peanuts", valid_at=JAN)  # the extractor's spelling
    await manager.remember_fact("user", "allergic to", "shellfish", valid_at=MAY)  # config says allergic_to
    assert sorted(f.value for f in await manager.facts("user")) == ["peanuts", "shellfish"]


async def test_facts_survive_a_reopen(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.remember_fact("Ana", "lives in", "Lisbon", valid_at=JAN)
        await manager.remember_fact("Ana", "lives in", "Porto", valid_at=SEP)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert [f.value for f in await manager.fact_history("ana", "lives in")] == ["Lisbon", "Porto"]
        assert (await manager.doctor()).consistent


async def test_context_opens_with_the_known_facts_inside_the_budget(manager: MemoryManager) -> None:
    await manager.remember_fact("Ana", "lives in", "Lisbon", valid_at=JAN)
    await manager.remember_fact("Ana", "lives in", "Porto", valid_at=SEP)
    await manager.remember_fact("Tom", "employer", "Harbor Labs", valid_at=JAN)
    for n, text in enumerate(["Ana loves the river walks.", "Ana found a flat with a tiny garden.", "Tom likes jazz."]):
        await manager.process_turn("s1", n, text)
    packed = await manager.context("Where does Ana live now?", budget_tokens=400)
    assert packed.text.startswith("<known_facts") and "- ana | lives in: Porto (since 2025-09-01)" in packed.text
    assert "Lisbon" not in packed.text and "Harbor Labs" not in packed.text  # closed, and not relevant
    assert packed.tokens <= 400 and packed.items  # memories follow, in the same budget
    assert [c.fact.value for c in packed.facts] == ["Porto"] and "named in the query" in packed.facts[0].reason
    assert "fact ana | lives in = Porto" in packed.explain()
    then = await manager.context("Where did Ana live?", budget_tokens=400, as_of=MAY + timedelta(days=200))
    assert [c.fact.value for c in then.facts] == ["Porto"]
    earlier = await manager.context("Where did Ana live?", budget_tokens=400, as_of=datetime(2025, 6, 1, tzinfo=UTC))
    assert [c.fact.value for c in earlier.facts] == ["Lisbon"]  # the value true then
    for budget in (30, 60, 90):
        tight = await manager.context("Where does Ana live now?", budget_tokens=budget)
        assert tight.tokens <= budget and (tight.facts or not tight.text.startswith("<known_facts"))
