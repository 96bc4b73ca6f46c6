"""No fact, memory, history entry or erase crosses from one namespace to another (issue #20, section 5).

Randomized: each seed picks the namespaces, how many turns each gets (all in the same session ids, so only the
namespace tells them apart), the canary words, which memory is corrected and which namespace is erased.
"""

from __future__ import annotations

import random
import string

import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.errors import MemoryNotFound, TurnNotFound


def word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(10))


@pytest.mark.parametrize("seed", [3, 11])
async def test_nothing_crosses_namespaces(manager: MemoryManager, config: Config, seed: int) -> None:
    rng = random.Random(seed)
    spaces = [f"ns-{word(rng)[:5]}" for _ in range(4)]
    canaries: dict[str, list[str]] = {ns: [] for ns in spaces}
    memories: dict[str, list[str]] = {ns: [] for ns in spaces}
    for ns in spaces:
        for turn in range(rng.randint(2, 4)):
            canary = f"{word(rng)}-{word(rng)}"
            canaries[ns].append(canary)
            result = await manager.process_turn("s1", turn, f"My project codename is {canary} for now.", namespace=ns)
            assert result.memory_id is not None
            memories[ns].append(result.memory_id)
        corrected = rng.choice(memories[ns])
        canary = f"{word(rng)}-{word(rng)}"
        canaries[ns].append(canary)
        await manager.update(corrected, f"My project codename is {canary} since the rename.", expected_revision=1)
        first_turn = next(t.turn_id for t in await manager.records.turns() if t.namespace == ns)
        await manager.remember_fact("user", "codename", canaries[ns][0], namespace=ns, source=first_turn)
        await manager.remember_fact("user", "codename", canary, namespace=ns, source=first_turn)
        await manager.remember_fact("user", "unsourced", f"kept-{word(rng)}", namespace=ns)
    await manager.settle()

    def others(ns: str) -> list[str]:
        return [c for other in spaces if other != ns for c in canaries[other]]

    for ns in spaces:
        for canary in others(ns)[:3]:
            found = await manager.retrieve(f"project codename {canary}", k=10, namespace=ns)
            assert {hit.memory.namespace for hit in found} <= {ns}
            text = (await manager.context(f"what is the codename {canary}", namespace=ns)).text
            assert not any(c in text for c in others(ns))
        values = {fact.value for fact in await manager.facts(namespace=ns) if fact.attribute == "codename"}
        assert values == {canaries[ns][-1]}
        history = await manager.fact_history("user", "codename", namespace=ns)
        assert {fact.value for fact in history} <= set(canaries[ns])
        for memory_id in memories[ns]:
            assert (await manager.get(memory_id)).namespace == ns
            assert all(not any(c in r.content for c in others(ns)) for r in await manager.history(memory_id))

    victim = rng.choice(spaces)
    turn_of_other = next(t for t in await manager.records.turns() if t.namespace != victim)
    with pytest.raises(TurnNotFound):
        await manager.erase(turn_ids=[turn_of_other.turn_id], namespace=victim, reason="cross")
    with pytest.raises(MemoryNotFound):
        await manager.erase(memory_ids=[memories[turn_of_other.namespace][0]], namespace=victim, reason="cross")
    result = await manager.erase(session_id="s1", namespace=victim, reason="the user left")
    assert result.proof.hits == 0
    assert set(result.plan.memory_ids) == set(memories[victim])

    on_disk = b"".join(path.read_bytes().lower() for path in config.data_dir.rglob("*") if path.is_file())
    assert not any(c.encode() in on_disk for c in canaries[victim])
    for ns in spaces:
        if ns == victim:  # the codename facts came from its turns; the unsourced one was not in the session
            assert [fact.attribute for fact in await manager.facts(namespace=ns)] == ["unsourced"]
            assert await manager.retrieve("project codename", k=10, namespace=ns) == []
            continue
        assert all(c.encode() in on_disk for c in canaries[ns])
        assert {f.value for f in await manager.facts(namespace=ns) if f.attribute == "codename"} == {canaries[ns][-1]}
        for memory_id in memories[ns]:
            assert (await manager.get(memory_id)).namespace == ns
    assert (await manager.doctor()).consistent

    whole = await manager.erase(whole_namespace=True, namespace=victim, reason="the account closed")
    assert whole.proof.hits == 0 and await manager.facts(namespace=victim) == []
    for ns in spaces:
        assert ns == victim or await manager.facts(namespace=ns)
