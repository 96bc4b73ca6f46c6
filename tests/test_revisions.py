"""Revisions (issue #20, part 1): update in place, supersede, history, and a stale revision refused with both numbers."""

from __future__ import annotations

import asyncio

import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import (
    ContentTooLarge,
    InvalidInput,
    MemoryNotCurrent,
    MemoryNotFound,
    RevisionConflict,
    StorageError,
)
from agent_memory.models import MemoryStatus, utc_now


async def remembered(manager: MemoryManager, text: str, turn: int = 0) -> str:
    result = await manager.process_turn("s1", turn, text)
    assert result.memory_id is not None
    return result.memory_id


async def found(manager: MemoryManager, query: str) -> list[str]:
    return [r.memory.memory_id for r in await manager.retrieve(query, k=5)]


async def test_update_changes_the_words_and_keeps_the_revision_it_replaced(manager: MemoryManager) -> None:
    memory_id = await remembered(manager, "Ines lives in Lisbon, in a flat near the Alfama viewpoint.")
    updated = await manager.update(
        memory_id,
        "Ines lives in Porto now, in a flat in Bonfim.",
        expected_revision=1,
        agent="agent-a",
        reason="she moved",
    )
    assert (updated.revision, updated.content, updated.status) == (2, updated.content, MemoryStatus.ACTIVE)
    assert "porto" in updated.entities and "lisbon" not in updated.entities
    (earlier,) = await manager.history(memory_id)
    assert (earlier.revision, earlier.change, earlier.agent, earlier.reason) == (1, "update", "agent-a", "she moved")
    assert earlier.content.startswith("Ines lives in Lisbon") and earlier.ended_at >= earlier.began_at
    assert memory_id in await found(manager, "Bonfim Porto flat")  # keyword and vector layers see the new words
    await manager.flush()
    memory = await manager.get(memory_id)
    assert "bonfim" in memory.keywords and "lisbon" not in " ".join(memory.keywords)
    assert (await manager.doctor()).consistent


async def test_a_stale_revision_is_refused_with_both_numbers_and_changes_nothing(manager: MemoryManager) -> None:
    memory_id = await remembered(manager, "The train to Porto leaves at 9:40 from Santa Apolonia.")
    await manager.update(memory_id, "The train to Porto leaves at 10:10 from Oriente.", expected_revision=1)
    with pytest.raises(RevisionConflict) as caught:
        await manager.update(memory_id, "The train leaves at noon.", expected_revision=1)
    assert (caught.value.memory_id, caught.value.expected, caught.value.current) == (memory_id, 1, 2)
    assert "revision 2, not the expected revision 1" in str(caught.value) and memory_id in str(caught.value)
    assert (await manager.get(memory_id)).content == "The train to Porto leaves at 10:10 from Oriente."
    assert len(await manager.history(memory_id)) == 1


async def test_of_concurrent_updates_naming_one_revision_exactly_one_wins(manager: MemoryManager) -> None:
    memory_id = await remembered(manager, "The launch review is on Monday.")
    attempts = [
        manager.update(memory_id, f"The launch review moved to day {n}.", expected_revision=1, agent=f"agent-{n}")
        for n in range(8)
    ]
    outcomes = await asyncio.gather(*attempts, return_exceptions=True)
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, RevisionConflict)]
    assert len(won) == 1 and len(lost) == 7, outcomes
    assert all((e.expected, e.current) == (1, 2) for e in lost)
    current = await manager.get(memory_id)
    assert current.revision == 2 and current.content == won[0].content
    assert [r.revision for r in await manager.history(memory_id)] == [1]


async def test_supersede_keeps_the_old_memory_out_of_recall(manager: MemoryManager) -> None:
    old_id = await remembered(manager, "My booking code for the Kyoto ryokan is QX7731.")
    new = await manager.supersede(
        old_id, "The Kyoto ryokan booking was moved: the new code is ZR5520.", expected_revision=1, reason="rebooked"
    )
    old = await manager.get(old_id)
    assert (old.status, old.superseded_by, old.revision) == (MemoryStatus.SUPERSEDED, new.memory_id, 2)
    assert old.content.endswith("QX7731.")  # a superseded memory keeps its words: history and lineage need them
    assert (new.status, new.revision, new.session_id) == (MemoryStatus.ACTIVE, 1, "s1")
    assert [r.change for r in await manager.history(old_id)] == ["supersede"]
    assert await manager.revisions.lineage(old_id) == [new.memory_id]
    for query in ("QX7731", "booking code for the Kyoto ryokan", "ryokan code"):  # grep, keyword, vector
        hits = await found(manager, query)
        assert old_id not in hits, (query, hits)
    assert new.memory_id in await found(manager, "Kyoto ryokan booking code")
    await manager.flush()
    assert (await manager.stats())["graph"]["SUPERSEDES"] == 1
    with pytest.raises(MemoryNotCurrent, match="superseded"):
        await manager.update(old_id, "anything", expected_revision=2)
    assert (await manager.doctor()).consistent


async def test_bad_changes_are_typed_errors(manager: MemoryManager, config: Config) -> None:
    memory_id = await remembered(manager, "Biscuit the dog is allergic to chicken.")
    with pytest.raises(MemoryNotFound):
        await manager.update("no-such-memory", "text", expected_revision=1)
    with pytest.raises(MemoryNotFound):
        await manager.history("no-such-memory")
    for bad in (0, -1, True, "1", 2**63):
        with pytest.raises(InvalidInput, match="expected_revision"):
            await manager.update(memory_id, "text", expected_revision=bad)  # type: ignore[arg-type]
    with pytest.raises(ContentTooLarge):
        await manager.update(memory_id, "x" * (config.max_content_bytes + 1), expected_revision=1)
    with pytest.raises(InvalidInput, match="reason"):
        await manager.update(memory_id, "text", expected_revision=1, reason="x" * 500)
    assert (await manager.get(memory_id)).revision == 1 and await manager.history(memory_id) == []


async def test_revisions_survive_a_reopen_and_a_graph_rebuild(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        old_id = await remembered(manager, "Tom works at the harbour office in Setubal.")
        new = await manager.supersede(old_id, "Tom now works at the port authority in Sines.", expected_revision=1)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert [r.revision for r in await manager.history(old_id)] == [1]
        assert (await manager.get(old_id)).superseded_by == new.memory_id
        await manager.doctor(repair=False)
        await manager.graph.rebuild(await manager.records.all_graph_memories())
        await manager.projector.recount()
        assert (await manager.stats())["graph"]["SUPERSEDES"] == 1
        assert (await manager.doctor()).consistent


async def test_as_of_before_a_change_sees_what_was_current_then(manager: MemoryManager) -> None:
    old_id = await remembered(manager, "My booking code for the Kyoto ryokan is QX7731.")
    edited = await remembered(manager, "The garden budget for spring is 400 euros.", turn=1)
    await asyncio.sleep(0.01)
    before = utc_now()
    await asyncio.sleep(0.01)
    new = await manager.supersede(
        old_id, "The Kyoto ryokan booking was moved: the code is ZR5520.", expected_revision=1
    )
    await manager.update(edited, "The garden budget for spring is 650 euros.", expected_revision=1)
    after = utc_now()

    then = await manager.retrieve("Kyoto ryokan booking code", k=5, as_of=before)
    assert old_id in [r.memory.memory_id for r in then] and new.memory_id not in [r.memory.memory_id for r in then]
    shown = next(r.memory for r in then if r.memory.memory_id == old_id)
    assert shown.status is MemoryStatus.ACTIVE and shown.revision == 1 and shown.superseded_by is None
    now = [r.memory.memory_id for r in await manager.retrieve("Kyoto ryokan booking code", k=5, as_of=after)]
    assert new.memory_id in now and old_id not in now
    assert old_id not in [r.memory.memory_id for r in await manager.retrieve("Kyoto ryokan booking code", k=5)]

    budget_then = {r.memory.memory_id: r.memory for r in await manager.retrieve("garden budget", k=5, as_of=before)}
    assert (
        budget_then[edited].content == "The garden budget for spring is 400 euros."
        and budget_then[edited].revision == 1
    )
    budget_now = {r.memory.memory_id: r.memory for r in await manager.retrieve("garden budget", k=5)}
    assert budget_now[edited].content.endswith("650 euros.") and budget_now[edited].revision == 2


async def test_forget_leaves_every_recall_path_and_restore_brings_it_back(manager: MemoryManager) -> None:
    memory_id = await remembered(manager, "The alarm code for the Alvalade flat is 4417, and Biscuit sleeps there.")
    other = await remembered(manager, "Biscuit the dog loves the Alvalade park.", turn=1)
    queries = ("4417", "alarm code Alvalade flat", "what number turns off the security system")  # grep, words, meaning
    for query in queries[:2]:
        assert memory_id in await found(manager, query), query
    with pytest.raises(RevisionConflict):
        await manager.forget(memory_id, expected_revision=2)
    forgotten = await manager.forget(memory_id, expected_revision=1, reason="the user asked")
    assert (forgotten.status, forgotten.revision) == (MemoryStatus.FORGOTTEN, 2)
    for query in queries:
        assert memory_id not in await found(manager, query), query
    assert other in await found(manager, "Biscuit Alvalade")  # the rest of the memory is untouched
    assert memory_id not in await found(manager, "Biscuit Alvalade")
    await manager.flush()
    assert (await manager.stats())["records"]["memories_forgotten"] == 1
    hits = await manager.vectors.search(
        "text", (await manager.embedder.embed_query("alarm code"))[0:].tolist(), limit=5
    )
    assert any(h.memory_id == memory_id for h in hits)  # still in the index, its payload says forgotten
    (logged,) = [r async for _, r in manager.journal.scan() if r.turn_number == 0]
    assert "4417" in logged.content  # soft: the log keeps every word
    with pytest.raises(MemoryNotCurrent):
        await manager.update(memory_id, "anything", expected_revision=2)
    restored = await manager.restore(memory_id, agent="agent-b")
    assert (restored.status, restored.revision) == (MemoryStatus.ACTIVE, 3)
    assert memory_id in await found(manager, "4417") and memory_id in await found(manager, "alarm code Alvalade flat")
    assert [(r.change, r.status) for r in await manager.history(memory_id)] == [
        ("forget", MemoryStatus.ACTIVE),
        ("restore", MemoryStatus.FORGOTTEN),
    ]
    with pytest.raises(InvalidInput, match="not forgotten"):
        await manager.restore(memory_id)
    assert (await manager.doctor()).consistent


async def test_the_status_check_admits_forgotten_and_nothing_else(manager: MemoryManager) -> None:
    memory_id = await remembered(manager, "Ines runs the Porto half marathon in May.")
    with pytest.raises(StorageError, match="CHECK constraint"):
        await manager.records.write_one("UPDATE memories SET status = 'bogus' WHERE memory_id = ?", (memory_id,))
    async with manager.records.transaction() as db:
        assert list(await db.execute_fetchall("PRAGMA integrity_check")) == [("ok",)]


async def test_get_shows_the_history_length_and_the_lineage(manager: MemoryManager) -> None:
    first = await remembered(manager, "The release train leaves on Tuesdays.")
    fresh = await manager.get(first)
    assert (fresh.revision, fresh.history_length, fresh.lineage) == (1, 0, ())
    await manager.update(first, "The release train leaves on Wednesdays.", expected_revision=1)
    second = await manager.supersede(first, "The release train leaves on Thursdays.", expected_revision=2)
    third = await manager.supersede(second.memory_id, "There is no release train any more.", expected_revision=1)
    old = await manager.get(first)
    assert old.status is MemoryStatus.SUPERSEDED and old.superseded_by == second.memory_id
    assert old.history_length == 2 and old.lineage == (second.memory_id, third.memory_id)
    assert (await manager.get(third.memory_id)).lineage == ()
