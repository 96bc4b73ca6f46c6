"""Context vectors (context_vectors.py): each turn memory embedded with the turns around it, off the write path.

Real SQLite, Qdrant Edge and MiniLM; the context collection is read back through the vector store itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.context_vectors import context_text
from agent_memory.embeddings.text import Embedder
from agent_memory.models import TurnInput
from agent_memory.sleep.jobs import run_job
from agent_memory.storage.outbox import CONTEXT

AT = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def config(config: Config) -> Config:
    """Context vectors are off by default (they did not pay on LongMemEval dev); these tests turn them on."""
    return config.model_copy(update={"embedding": config.embedding.model_copy(update={"context_vectors": True})})


@pytest.fixture
async def manager(config: Config, embedder: Embedder) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(config, embedder=embedder) as m:
        yield m


TALK = [
    "What did you end up naming the puppy?",
    "We went with Biscuit, after the colour of his fur.",
    "That suits him. Is he sleeping through the night yet?",
    "Not yet, he still wakes us at four every morning.",
]


def turns(session: str, texts: list[str], first: int = 0) -> list[TurnInput]:
    return [
        TurnInput(
            session_id=session,
            turn_number=first + i,
            content=text,
            role="user" if (first + i) % 2 == 0 else "assistant",
            at=AT + timedelta(minutes=first + i),
        )
        for i, text in enumerate(texts)
    ]


async def context_points(manager: MemoryManager) -> set[str]:
    await manager.flush()
    return await manager.vectors.ids(CONTEXT)


def test_the_text_keeps_the_memory_whole_and_caps_each_neighbour() -> None:
    text = context_text("one two three four", "the turn itself", "five six seven", turn_words=10, neighbour_words=2)
    assert text.split("\n") == ["three four", "the turn itself", "five six"]
    assert context_text(None, "a b c d", None, turn_words=3, neighbour_words=2) == "a b c"
    assert context_text("x", "y", "z", turn_words=3, neighbour_words=0) == "y"


async def test_a_vector_is_computed_once_a_neighbour_exists_and_again_when_the_next_turn_comes(
    manager: MemoryManager,
) -> None:
    first = await manager.process_turns(turns("s1", TALK[:3]))
    lonely = await manager.process_turns(turns("alone", ["A session of a single turn about tide tables."]))
    assert (await manager.records.context_counts())[0] == 0  # nothing on the write path
    report = await manager.context_vectors.catch_up()
    assert report == {"computed": 3, "wanted": 3}
    points = await context_points(manager)
    assert points == {r.memory_id for r in first}
    assert lonely[0].memory_id not in points  # its context vector would be its own
    assert await manager.context_vectors.catch_up() == {"computed": 0, "wanted": 0}

    last = first[2].memory_id
    before = (await manager.records.stored_context_vectors({last: await manager.get(last)}))[last][0]
    await manager.process_turns(turns("s1", TALK[3:], first=3))
    report = await manager.context_vectors.catch_up()
    assert report["computed"] == 2  # the new turn, and the one before it, which now has a next turn
    after = (await manager.records.stored_context_vectors({last: await manager.get(last)}))[last][0]
    assert before != after


async def test_the_semantic_layer_ranks_a_memory_by_the_better_of_its_two_vectors(manager: MemoryManager) -> None:
    """The question turn says nothing of the answer; with its context vector it matches a query about the answer
    better than its own vector does."""
    receipts = await manager.process_turns(turns("s1", TALK))
    await manager.context_vectors.catch_up()
    await manager.flush()
    question = receipts[0].memory_id
    query = "Biscuit, named after the colour of his fur"

    async def semantic_score() -> float:
        recalled = await manager.recall(query, now=AT + timedelta(days=1))
        hit = next(r for r in recalled.ranked.results if r.memory.memory_id == question)
        return float(hit.layers["semantic"].score)

    with_context = await semantic_score()
    base = manager.config.retrieval
    manager.configure_retrieval(base.model_copy(update={"context_search": False}))
    own = await semantic_score()
    manager.configure_retrieval(base)
    assert with_context > own + 0.05


async def test_erasing_a_turn_recomputes_the_context_of_its_neighbours_without_it(manager: MemoryManager) -> None:
    receipts = await manager.process_turns(turns("s1", TALK))
    await manager.context_vectors.catch_up()
    erased = receipts[1]
    assert await manager.records.context_wanted() == []  # all up to date
    await manager.erase(reason="test", turn_ids=[erased.turn_id])
    points = await context_points(manager)
    assert erased.memory_id not in points
    assert receipts[0].memory_id not in points and receipts[2].memory_id not in points  # read the erased turn
    assert receipts[3].memory_id in points  # its neighbours were turns 2 and none
    await manager.context_vectors.catch_up()
    assert await context_points(manager) == {receipts[0].memory_id, receipts[2].memory_id, receipts[3].memory_id}
    rows = await manager.records._fetch("SELECT basis FROM context_vectors")
    assert all(erased.turn_id not in str(r[0]) for r in rows)


async def test_a_forgotten_memory_leaves_the_context_search(manager: MemoryManager, embedder: Embedder) -> None:
    receipts = await manager.process_turns(turns("s1", TALK))
    await manager.context_vectors.catch_up()
    gone = await manager.get(receipts[1].memory_id)
    await manager.forget(gone.memory_id, expected_revision=gone.revision)
    await manager.flush()
    query = (await embedder.embed(["We went with Biscuit"]))[0].tolist()
    hits = await manager.vectors.search(CONTEXT, query, limit=10, where={"namespace": "default", "status": "active"})
    assert gone.memory_id not in {h.memory_id for h in hits} and len(hits) == 3


async def test_the_vectors_live_in_sqlite_so_doctor_rebuilds_them_without_the_model(manager: MemoryManager) -> None:
    await manager.process_turns(turns("s1", TALK))
    await manager.context_vectors.catch_up()
    await manager.flush()
    assert (await manager.doctor()).disagreements == ()
    await manager.vectors.rebuild(CONTEXT, [])
    report = await manager.doctor()
    assert [d.kind for d in report.disagreements] == ["missing context vectors"]
    repaired = await manager.doctor(repair=True)
    assert repaired.repaired and (await manager.doctor()).disagreements == ()
    assert len(await context_points(manager)) == 4


async def test_the_background_task_computes_them_once_writing_pauses(
    config: Config, embedder: Embedder, tmp_path: Path
) -> None:
    quick = config.model_copy(
        update={"embedding": config.embedding.model_copy(update={"context_delay": timedelta(milliseconds=50)})}
    )
    async with MemoryManager.open(quick, embedder=embedder) as manager:
        receipts = await manager.process_turns(turns("s1", TALK))
        for _ in range(200):
            if (await manager.records.context_counts())[0] == len(receipts):
                break
            await asyncio.sleep(0.05)
        assert await context_points(manager) == {r.memory_id for r in receipts}


async def test_the_neighbours_job_and_switching_them_off(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await manager.process_turns(turns("s1", TALK))
        run = await run_job(manager, "neighbours")
        assert run.error is None and run.counts == {"computed": 4, "wanted": 4}
        stored = await manager.records._fetch("SELECT vector FROM context_vectors")
        assert all(np.frombuffer(bytes(r[0]), dtype="<f4").shape == (384,) for r in stored)
    off = config.model_copy(update={"embedding": config.embedding.model_copy(update={"context_vectors": False})})
    off = off.model_copy(update={"data_dir": config.data_dir.parent / "off"})
    async with MemoryManager.open(off, embedder=embedder) as manager:
        await manager.process_turns(turns("s1", TALK))
        assert await manager.context_vectors.catch_up() == {"computed": 0, "wanted": 0}
        assert await context_points(manager) == set()


async def test_a_long_turn_gets_none_and_one_lengthened_by_an_update_loses_its_own(manager: MemoryManager) -> None:
    limit = manager.config.embedding.context_max_chars
    long_text = "A long turn about the harbour. " * (limit // 20)
    receipts = await manager.process_turns(turns("s1", [TALK[0], long_text, TALK[2]]))
    await manager.context_vectors.catch_up()
    assert await context_points(manager) == {receipts[0].memory_id, receipts[2].memory_id}
    short = await manager.get(receipts[0].memory_id)
    await manager.update(short.memory_id, long_text + " And the puppy.", expected_revision=short.revision)
    await manager.context_vectors.catch_up()
    assert await context_points(manager) == {receipts[2].memory_id}
