"""Retrieval end to end on the real engines: each signal is shown to be necessary for some answer."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent_memory import InvalidInput, MemoryManager, TurnInput
from agent_memory.cognition.novelty import TurnVectors
from agent_memory.cognition.query_reading import read_query
from agent_memory.cognition.ranking import fuse_layers
from agent_memory.config import Config, RetrievalConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.projection_models import VectorItem
from agent_memory.recall import finalists
from agent_memory.sleep.index import run_index
from agent_memory.storage.outbox import TEXT, vector_items
from agent_memory.storage.recall_records import OWNERS_SQL, WALK_SQL, WALK_WITH
from agent_memory.storage.rows import migrations

NOW = datetime(2026, 3, 20, 18, 0, tzinfo=UTC)


def plain(manager: MemoryManager, **changes: object) -> None:
    """Every optional signal off, then `changes` on: so a test shows exactly what one signal does."""
    off = {"graph_weight": 0.0, "session_weight": 0.0, "mood_weight": 0.0, "decay_weight": 0.0, "user_weight": 0.0}
    manager.configure_retrieval(RetrievalConfig().model_copy(update=off | changes))


async def add(manager: MemoryManager, session: str, lines: list[str], at: datetime, **extra: object) -> list[str]:
    turns = [TurnInput(session, i, text, at=at + timedelta(minutes=i), **extra) for i, text in enumerate(lines)]  # type: ignore[arg-type]
    results = await manager.process_turns(turns)
    return [r.memory_id or "" for r in results]


def ids(results: list) -> list[str]:  # type: ignore[type-arg]
    return [r.memory.memory_id for r in results]


SERIALS = [f"Shipped the replacement router, serial KX99{n:05d}, to the Leeds office." for n in range(17340, 17370)]


async def test_a_swapped_candidate_pool_reaches_a_contexts_recall(manager: MemoryManager) -> None:
    """configure_retrieval (the folds' and ablations' variants) moves the candidate pool a context asks each layer
    for, which the shipped policy answers: before, a variant of `candidate_limit` changed no context."""
    await add(manager, "birds", [f"Heron number {n} stood by the lock gate at dawn." for n in range(40)], NOW)
    plain(manager)
    wide = await manager.recall("a heron by the lock gate", budget_tokens=128, now=NOW + timedelta(hours=1))
    plain(manager, candidate_limit=2)
    assert manager.candidates_for(128) == 2 and manager.candidates_for(2048) == 2048 // 64
    narrow = await manager.recall("a heron by the lock gate", budget_tokens=128, now=NOW + timedelta(hours=1))
    assert 0 < len(narrow.ranked.results) <= 3 * 2 < len(wide.ranked.results)


async def test_an_answer_only_grep_finds(manager: MemoryManager) -> None:
    target = (await add(manager, "ops", SERIALS, NOW - timedelta(days=3)))[17]  # serial KX9917357
    plain(manager, grep_weight=0.0)
    without = await manager.retrieve("9917357", k=1)
    plain(manager)
    with_grep = await manager.retrieve("9917357", k=1)
    assert ids(with_grep) == [target] and ids(without) != [target]
    assert with_grep[0].layers["grep"].rank == 1 and "keyword" not in with_grep[0].layers


async def test_an_answer_only_the_semantic_layer_finds(manager: MemoryManager) -> None:
    await add(manager, "s1", ["I adopted a golden retriever puppy last spring.", "The quarterly budget is due."], NOW)
    plain(manager)
    results = await manager.retrieve("Which animal lives with me?", k=1)
    assert results[0].memory.content.startswith("I adopted a golden retriever")
    assert set(results[0].layers) == {"semantic"}
    plain(manager, semantic_weight=0.0)
    assert await manager.retrieve("Which animal lives with me?", k=1) == []


async def test_an_answer_only_a_graph_hop_finds(manager: MemoryManager) -> None:
    found = await add(
        manager,
        "kayak",
        ["Guess what, I finally bought a kayak this weekend!", "It is bright orange and seats two people."],
        NOW - timedelta(days=2),
    )
    await add(manager, "other", [f"Meeting notes {n}: the vendor contract renewal is pending." for n in range(12)], NOW)
    plain(manager, semantic_weight=0.0)  # keyword alone finds the purchase, never the colour
    assert found[1] not in ids(await manager.retrieve("kayak I bought", k=3))
    plain(manager, semantic_weight=0.0, graph_weight=0.5)
    results = await manager.retrieve("kayak I bought", k=3)
    assert ids(results)[:2] == found
    assert results[1].layers["graph"].layer == "graph:NEXT" and results[1].layers["graph"].rank == 1


async def test_what_a_read_returns_carries_each_memorys_entities(manager: MemoryManager) -> None:
    """Candidates are ranked without their entities (nothing ranks on them); every memory a read returns has them."""
    lines = ["Melanie went swimming with Caroline in Lisbon.", "Caroline adopted a dog named Biscuit in Porto."]
    stored = {i: (await manager.get(i)).entities for i in await add(manager, "s", lines, NOW)}
    assert all(stored.values())  # the extractor named someone in each
    retrieved = await manager.retrieve("Caroline", k=2)
    packed = await manager.context("Caroline", budget_tokens=512)
    recalled = await manager.recall("Caroline")
    for memory in (
        [r.memory for r in retrieved] + [i.memory for i in packed.items] + [r.memory for r in recalled.ranked.results]
    ):
        assert memory.entities == stored[memory.memory_id]
    assert len(retrieved) == len(packed.items) == 2


async def test_an_answer_only_the_time_window_finds(manager: MemoryManager) -> None:
    yesterday = await add(manager, "d1", ["Tried the new ramen bar downtown with Jo."], NOW - timedelta(days=1))
    await add(manager, "d0", ["Went to the cinema and then had dinner with Jo."], NOW - timedelta(days=20))
    plain(manager)
    results = await manager.retrieve("What did I do yesterday evening with Jo?", k=2, now=NOW)
    assert ids(results)[0] == yesterday[0]
    assert results[0].layers["time"].score > 1.0 and results[1].layers["time"].score == 1.0  # nothing is lowered
    plain(manager, time_layer_weight=0.0, time_boost=0.0, time_penalty=1.0, time_penalty_after=1.0)
    assert ids(await manager.retrieve("What did I do yesterday evening with Jo?", k=1, now=NOW)) != yesterday


MARCH = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
BUSY_MONTH = [f"Status report {n}: build {n} passed on runner {n % 7} after {n % 13} retries." for n in range(510)]


async def pet_in_a_busy_month(manager: MemoryManager) -> tuple[str, str]:
    """The adoption is the oldest of 511 memories dated March 2026; a kitten adopted in February is outside it."""
    (puppy,) = await add(manager, "m1", ["I adopted a golden retriever puppy from the shelter."], MARCH)
    (kitten,) = await add(manager, "f1", ["I adopted a tabby kitten from the shelter."], MARCH - timedelta(days=20))
    await add(manager, "m2", BUSY_MONTH, MARCH + timedelta(days=1))
    return puppy, kitten


async def test_the_time_layer_searches_its_whole_window(manager: MemoryManager) -> None:
    """The time layer ranks every memory of the window by similarity, however many the window holds: the puppy is
    the oldest of 511 March memories (before, the layer read the newest 500 and never saw it), and the kitten,
    nearer the question but adopted in February, is not in the layer at all."""
    puppy, kitten = await pet_in_a_busy_month(manager)
    question = "Which pet joined my family in March 2026?"
    plain(manager, semantic_weight=0.0, time_layer_weight=0.0)  # no word of the question is in the puppy's memory
    assert puppy not in ids(await manager.retrieve(question, k=10, now=NOW))
    plain(manager, semantic_weight=0.0)  # the time layer alone brings candidates
    assert ids(await manager.retrieve(question, k=3, now=NOW))[0] == puppy
    found = [r.memory for r in (await manager.recall(question, now=NOW)).ranked.results]
    assert len(found) == RetrievalConfig().candidate_limit and kitten not in {m.memory_id for m in found}
    assert all(MARCH <= m.event_at < datetime(2026, 4, 1, tzinfo=UTC) for m in found)


async def test_a_store_from_before_migration_0030_gets_each_vectors_event_time(
    config: Config, embedder: Embedder
) -> None:
    """Vectors stored before their payload carried the event time are given it when the store is opened (payload
    rows through the outbox, applied before the first search), so the time layer finds them; until then it found
    nothing. Those payload changes move every point out of the HNSW index while Qdrant still counts it as indexed,
    so the records count them (as every later payload change), and a build of the index takes them off."""
    async with MemoryManager.open(config, embedder=embedder) as m:
        assert await m.records.index_moves() == {}  # a new store's points carry their times from the start
        puppy, _ = await pet_in_a_busy_month(m)
        await m.flush()
        rows = await m.records.stored_vectors(await m.records.get_memories(list(await m.records.embedded_ids())))
        old = [
            VectorItem(i.memory_id, i.vector, {k: v for k, v in i.payload.items() if k != "event_at"})
            for i in vector_items(rows)
        ]
        await m.vectors.upsert(TEXT, old)  # the points as migration 0029 left them
        plain(m, semantic_weight=0.0)
        assert await m.retrieve("Which pet joined my family in March 2026?", k=3, now=NOW) == []
    with sqlite3.connect(Path(config.data_dir) / "memory.db") as db:
        db.executescript("DROP TABLE vector_index_moves; DELETE FROM schema_migrations WHERE version = 30;")
    async with MemoryManager.open(config, embedder=embedder) as m:
        assert await m.records.schema_version() == len(migrations())
        plain(m, semantic_weight=0.0)
        assert ids(await m.retrieve("Which pet joined my family in March 2026?", k=3, now=NOW))[0] == puppy
        await m.flush()
        assert (await m.stats())["pending_outbox"] == 0
        assert await m.records.index_moves() == {"text": len(rows)}  # no image or context vector in this store
        kitten = (await m.recall("tabby kitten", now=NOW)).ranked.results[0].memory
        await m.forget(kitten.memory_id, expected_revision=kitten.revision)  # a status change moves its point too
        written = (m.records.commits, m.records.live_commits)
        await m.flush()
        assert (m.records.commits, m.records.live_commits) == written  # counted as the rows are marked: no new work
        await m.update(puppy, "I adopted a golden retriever puppy, Max, from the shelter.", expected_revision=1)
        await m.flush()  # and so does a revision's new vector
        assert await m.records.index_moves() == {"text": len(rows) + 2} == (await m.stats())["vectors_moved"]
        report = await run_index(m, NOW, force=True)
        assert report["text"]["built"] and report["text"]["moved"] == len(rows) + 2
        assert (await m.stats())["vectors_moved"] == {"text": 0}  # the build took them in
        assert ids(await m.retrieve("Which pet joined my family in March 2026?", k=3, now=NOW))[0] == puppy
    with sqlite3.connect(Path(config.data_dir) / "memory.db") as db:
        scopes = db.execute("SELECT scope, count(*) FROM outbox WHERE done_at IS NOT NULL GROUP BY scope").fetchall()
    assert ("payload", len(rows) + 1) in scopes  # one row a memory with a vector, each applied, and the forget's


async def test_mood_decides_the_order(manager: MemoryManager) -> None:
    happy = await add(manager, "h", ["The concert last night was loud."], NOW, emotional_context={"valence": 0.9})
    sad = await add(manager, "s", ["The concert last night was loud."], NOW, emotional_context={"valence": -0.9})
    plain(manager, mood_weight=0.5)
    cheerful = await manager.retrieve("the concert", k=2, emotional_context={"valence": 0.8, "arousal": 0.2})
    gloomy = await manager.retrieve("the concert", k=2, emotional_context={"valence": -0.8, "arousal": 0.2})
    assert ids(cheerful) == happy + sad and ids(gloomy) == sad + happy
    assert cheerful[0].layers["mood"].score > 1.0


async def test_as_of_limits_results_to_what_was_known_then(config: Config, embedder: Embedder) -> None:
    clock = iter([NOW - timedelta(days=10), NOW]).__next__
    times: list[datetime] = []

    def now() -> datetime:
        return times[-1] if times else NOW

    async with MemoryManager.open(config, embedder=embedder, clock=now) as manager:
        times.append(clock())
        early = await add(manager, "a", ["Maya lives in Lisbon."], NOW - timedelta(days=10))
        times.append(clock())
        await add(manager, "b", ["Maya moved from Lisbon to Porto."], NOW)
        then = await manager.retrieve("Where does Maya live?", k=5, as_of=NOW - timedelta(days=5))
        assert ids(then) == early
        assert len(await manager.retrieve("Where does Maya live?", k=5)) == 2


async def test_retrieval_records_access_and_rejects_bad_queries(manager: MemoryManager) -> None:
    target = await add(manager, "s", ["I prefer oat milk flat whites."], NOW)
    await manager.retrieve("oat milk", k=1)
    memory = await manager.get(target[0])
    assert memory.access_count == 1 and memory.last_accessed_at is not None
    with pytest.raises(InvalidInput, match="empty"):
        await manager.retrieve("   ")
    with pytest.raises(InvalidInput, match="timezone-aware"):
        await manager.retrieve("oat", now=datetime(2026, 1, 1))
    with pytest.raises(InvalidInput, match="namespace"):
        await manager.retrieve("oat", namespace="bad namespace!")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InvalidInput, match="k must be a positive integer"):
            await manager.retrieve("oat", k=bad)  # type: ignore[arg-type]


async def test_retrieve_weighs_three_fused_candidates_per_result_and_at_least_its_floor(
    manager: MemoryManager,
) -> None:
    await add(manager, "fleet", [f"Router number {n} was shipped to the depot." for n in range(70)], NOW)
    plain(manager, semantic_weight=0.0, grep_weight=0.0, time_layer_weight=0.0)  # the keyword layer alone
    assert manager.policy.retrieval_config(k=3)["finalists"] == 30  # retrieval.retrieve_finalists
    assert len(await manager.retrieve("router shipped", k=15)) == 15
    assert len(await manager.retrieve("router shipped", k=40)) == 40  # 120 weighed: 30 would give 30
    assert len((await manager.recall("router shipped")).ranked.results) == 50  # recall weighs every candidate


def test_finalists_are_the_best_fused_candidates_with_every_layer_rank_they_had() -> None:
    rankings = {"keyword": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "semantic": [("d", 0.9), ("c", 0.8), ("e", 0.1)]}
    fused = fuse_layers(rankings, weights={"keyword": 1.0, "semantic": 1.0}, rrf_k=60, method="rrf")
    assert finalists(fused, None) is fused and finalists(fused, 5) is fused
    base, layers = finalists(fused, 3)
    assert list(base) == ["c", "a", "d"]  # c is third and second: both ranks count; a and d tie, by id
    assert base["c"] == fused[0]["c"] and set(layers) == {"a", "c", "d"}
    assert {name: hit.rank for name, hit in layers["c"].items()} == {"keyword": 3, "semantic": 2}


async def test_context_fits_the_budget_and_explains(manager: MemoryManager) -> None:
    await add(manager, "trip", ["We landed in Porto at noon.", "The hotel overlooks the river Douro."], NOW)
    await add(manager, "work", ["The payments rebuild ships in June."] * 1, NOW - timedelta(days=3))
    context = await manager.context("Where did we stay in Porto?", budget_tokens=60)
    assert 0 < context.tokens <= 60
    assert "## 2026-03-20 (Friday), session trip" in context.text
    assert {e.reason for e in context.excluded} == {"budget"}
    assert "tokens (chars/4)" in context.explain()
    with pytest.raises(InvalidInput, match="budget_tokens"):
        await manager.context("Porto", budget_tokens=0)


async def test_a_miss_opens_a_retrieval_gap_and_a_hit_does_not(manager: MemoryManager) -> None:
    await add(manager, "s", ["I prefer oat milk flat whites, never dairy."], NOW)
    await manager.retrieve("What milk do I take in my coffee?")
    assert await manager.open_gaps() == []
    await manager.retrieve("When is my dentist appointment?")
    gaps = await manager.open_gaps()
    assert [g.query for g in gaps] == ["When is my dentist appointment?"]
    assert "dentist" in gaps[0].keywords and gaps[0].best_score is not None and gaps[0].best_score < 0.3
    assert gaps[0].expires_at - gaps[0].opened_at == manager.config.retrieval.gap_ttl
    assert (await manager.stats())["records"]["retrieval_gaps"] == 1
    ((_, stored),) = await manager.records.open_gaps("default", now=manager.clock())
    asked = await manager.embedder.embed_query("When is my dentist appointment?")  # the vector it was searched with
    assert stored is not None and np.array_equal(np.frombuffer(stored, dtype="<f4"), asked.astype("<f4"))


async def test_a_retrieval_is_recorded_after_it_returns_and_before_the_next_read(manager: MemoryManager) -> None:
    target = await add(manager, "s", ["I prefer oat milk flat whites."], NOW)
    for seen in range(3):  # each record waits for the one before it, and each read sees the records before it
        (found,) = await manager.retrieve("oat milk", k=1)
        assert found.memory.memory_id == target[0] and found.memory.access_count == seen
    await manager.context("oat milk", budget_tokens=100)
    memory = await manager.get(target[0])
    assert memory.access_count == 4
    counts = (await manager.stats())["records"]
    assert counts["retrieval_events"] == 4 and counts["access_log"] == 4
    await asyncio.gather(*(manager.retrieve(f"oat milk {n}", k=1) for n in range(6)))  # overlapping retrievals
    counts = (await manager.stats())["records"]
    assert counts["retrieval_events"] == 10 and counts["access_log"] == 10


async def test_a_short_reply_is_embedded_with_the_turn_before_it(config: Config, embedder: Embedder) -> None:
    similarity = {}
    for limit in (0, 600):
        embedding = config.embedding.model_copy(update={"with_previous_max_chars": limit})
        data_dir = config.data_dir / f"limit-{limit}"
        async with MemoryManager.open(
            config.model_copy(update={"embedding": embedding, "data_dir": data_dir}), embedder=embedder
        ) as manager:
            found = await add(manager, "kayak", ["Guess what, I finally bought a kayak!", "It is bright orange."], NOW)
            plain(manager, keyword_weight=0.0)
            results = {r.memory.memory_id: r for r in await manager.retrieve("the kayak's colour", k=2)}
            similarity[limit] = results[found[1]].layers["semantic"].score
    assert similarity[600] > similarity[0] + 0.1


class Counting:
    """The real embedder, recording every text it is given."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dimension, self.texts = inner, inner.name, inner.dimension, list[str]()
        self.query_is_document = False  # every text it is given is counted, questions apart

    async def load(self) -> None:
        await self.inner.load()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return await self.inner.embed(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        self.texts.append(text)
        return await self.inner.embed_query(text)

    async def aclose(self) -> None:
        return None  # the session's embedder outlives this test


async def test_a_short_reply_is_stored_with_the_sum_of_both_turns_however_it_arrives(
    config: Config, embedder: Embedder
) -> None:
    """The reply's vector is its own embedding plus the turn's before it, re-normalised, whether the two came in
    one batch, one at a time (the session's last vector is cached) or across a restart (the turn before is read
    back and embedded again); a long turn and a session's first turn keep their own vector."""
    first, reply, long = "Guess what, I finally bought a kayak!", "It is bright orange.", "We paddled " * 80
    after_long = "The paddle is yellow."
    own = await embedder.embed([first, reply, long, after_long])
    summed = own[0] + own[1]
    expected = {first: own[0], reply: summed / np.linalg.norm(summed), long: own[2], after_long: own[3]}

    async def stored(manager: MemoryManager, ids: list[str]) -> dict[str, np.ndarray]:
        found = await manager.records.embeddings(ids)
        return {memory.content: np.frombuffer(blob, dtype="<f4") for blob, memory in found.values()}

    counting = Counting(embedder)
    async with MemoryManager.open(
        config.model_copy(update={"data_dir": config.data_dir / "batch"}), embedder=counting
    ) as m:
        ids = await add(m, "kayak", [first, reply, long, after_long], NOW)
        batch = await stored(m, ids)
    assert counting.texts == [first, reply, long, after_long]  # each turn through the model once, nothing twice
    one_by_one = config.model_copy(update={"data_dir": config.data_dir / "single"})
    async with MemoryManager.open(one_by_one, embedder=counting) as m:
        ids = [(await m.process_turn("kayak", 0, first, at=NOW)).memory_id]
    async with MemoryManager.open(one_by_one, embedder=counting) as m:  # a restart: no cached vector
        ids.append((await m.process_turn("kayak", 1, reply, at=NOW)).memory_id)
        ids.append((await m.process_turn("kayak", 2, long, at=NOW)).memory_id)
        ids.append((await m.process_turn("kayak", 3, after_long, at=NOW)).memory_id)  # after a long turn: its own
        single = await stored(m, [i for i in ids if i])
    assert sorted(counting.texts[4:]) == sorted([first, reply, first, long, after_long])  # `first` again, once
    for found in (batch, single):
        assert set(found) == set(expected)
        for text, vector in found.items():
            assert float(vector @ expected[text]) > 0.9999, text
    assert float(expected[reply] @ own[1]) < 0.99  # the sum really differs from the reply alone


async def test_a_reply_after_a_turn_not_kept_is_summed_with_that_turn_from_the_cache(
    judging_config: Config, embedder: Embedder
) -> None:
    """A short turn is embedded with the turn logged just before it, kept or not (what reembed and the vector
    upgrade make again); when that turn was not kept, the session's cache still holds its vector: nothing goes
    through the model twice."""
    first, filler = "Guess what, I finally bought a kayak!", "Haha yeah, that sounds about right."
    reply = "It is bright orange and cost me 300 euros."
    counting, config = Counting(embedder), judging_config
    async with MemoryManager.open(config, embedder=counting) as m:
        results = [await m.process_turn("kayak", n, text, at=NOW) for n, text in enumerate([first, filler, reply])]
        assert [r.saved for r in results] == [True, False, True]
        ((blob, _),) = (await m.records.embeddings([results[2].memory_id or ""])).values()
    assert counting.texts == [first, filler, reply]
    own = await embedder.embed([filler, reply])
    summed = own[1] + config.embedding.previous_weight * own[0]
    assert float(np.frombuffer(blob, dtype="<f4") @ (summed / np.linalg.norm(summed))) > 0.9999


async def test_a_word_most_memories_carry_ranks_nothing_beside_a_hit_that_scores(manager: MemoryManager) -> None:
    lines = ["Ana: I moved to Porto in May.", "Ana: My cat Pixel hates the rain.", "Ana: I bake sourdough on Sundays."]
    await manager.process_turns([TurnInput("s1", i, text, at=NOW) for i, text in enumerate(lines)])
    found = await manager.recall("Where does Ana bake sourdough?", now=NOW)  # "ana" is in every memory
    assert found.ranked.results[0].layers["keyword"].rank == 1
    assert [r for r in found.ranked.results if "keyword" in r.layers] == found.ranked.results[:1]
    alone = await manager.recall("What did Ana say?", now=NOW)  # nothing scores: the near-zero hits are all there is
    assert sum("keyword" in r.layers for r in alone.ranked.results) == 3


async def test_a_shared_entity_links_only_while_few_memories_mention_it(manager: MemoryManager) -> None:
    (seed,) = await add(manager, "a", ["Ines and Tom drove from Porto to Braga."], NOW)
    (ines,) = await add(manager, "b", ["Ines started her new job at the bakery."], NOW)
    toms = await add(manager, "c", ["Tom fixed the boat engine."], NOW)
    toms += await add(manager, "d", ["Tom sold the old van to a neighbour."], NOW)
    await manager.flush()
    assert set(await manager.graph.entities(seed)) >= {"ines", "tom"}
    steps = await manager.records.structural_neighbours([seed], "default", depth=1, fanout=2)
    assert {(s.memory_id, s.relation) for s in steps} == {(ines, "MENTIONS")}  # three memories name Tom
    steps = await manager.records.structural_neighbours([seed], "default", depth=1, fanout=3)
    assert {s.memory_id for s in steps} == {ines, *toms}


async def test_an_entity_counts_only_the_mentions_of_the_namespace_walked(manager: MemoryManager) -> None:
    """Tom is named by two memories here and by four of another project: here he is rare (fanout 3) and links the
    two; there he is common and links nothing. Before migration 0029 the count ran over the whole store (six)."""
    (seed,) = await add(manager, "a", ["Ines and Tom drove from Porto to Braga."], NOW)
    (boat,) = await add(manager, "b", ["Tom fixed the boat engine."], NOW)
    work = await add(manager, "c", [f"Tom reviewed pull request {n}." for n in range(4)], NOW, namespace="work")
    await manager.flush()
    steps = await manager.records.structural_neighbours([seed], "default", depth=1, fanout=3)
    assert {(s.memory_id, s.relation) for s in steps} == {(boat, "MENTIONS")}
    elsewhere = await manager.records.structural_neighbours(work[:1], "work", depth=1, fanout=3)
    assert {s.relation for s in elsewhere} == {"NEXT"}  # four mentions there: none links
    steps, rows, _ = await manager.records.graph_neighbourhood([seed], "default", depth=1, fanout=3)
    assert [s.memory_id for s in steps] == [boat] and set(rows) == {boat}


async def test_a_store_from_before_migration_0029_gets_each_entity_rows_namespace(
    config: Config, embedder: Embedder
) -> None:
    """A store whose entity rows have no namespace (migration 0028 and before) is given them when it is opened, and
    its walk then counts by namespace; an entity row written afterwards carries its namespace too."""
    async with MemoryManager.open(config, embedder=embedder) as m:
        (seed,) = await add(m, "a", ["Ines and Tom drove from Porto to Braga."], NOW)
        (boat,) = await add(m, "b", ["Tom fixed the boat engine."], NOW)
        await add(m, "c", [f"Tom reviewed pull request {n}." for n in range(4)], NOW, namespace="work")
    path = Path(config.data_dir) / "memory.db"
    with sqlite3.connect(path) as db:  # back to the schema of 0028
        db.executescript(
            "DROP INDEX memory_entities_scope; ALTER TABLE memory_entities DROP COLUMN namespace; "
            "CREATE INDEX memory_entities_entity ON memory_entities (entity); "
            "DELETE FROM schema_migrations WHERE version = 29;"
        )
    async with MemoryManager.open(config, embedder=embedder) as m:
        assert await m.records.schema_version() == len(migrations())
        steps = await m.records.structural_neighbours([seed], "default", depth=1, fanout=3)
        assert {(s.memory_id, s.relation) for s in steps} == {(boat, "MENTIONS")}
        (later,) = await add(m, "d", ["Tom painted the fence."], NOW, namespace="home")
        await m.update(later, "Tom and Ines painted the fence.", expected_revision=1)  # its entities written again
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT e.namespace, m.namespace, e.entity FROM memory_entities e JOIN memories m USING (memory_id)"
        ).fetchall()
    assert rows and all(ours == theirs for ours, theirs, _ in rows)
    assert {(namespace, entity) for namespace, _, entity in rows} >= {("default", "tom"), ("home", "ines")}


async def test_link_edges_are_walked_from_the_records_as_the_graph_would(manager: MemoryManager) -> None:
    """A chain a-b-c-d of DREAM_LINK and EVOLVED_FROM edges (either direction), a merged memory on a side branch and
    one in another namespace: the records' walk reaches what Kuzu's does, nearest first, active memories only."""
    ids = await add(manager, "s", [f"Memory number {n} about the harbour." for n in range(6)], NOW)
    a, b, c, d, gone, _ = ids
    (other,) = await add(manager, "t", ["Elsewhere entirely."], NOW, namespace="work")
    links = [(a, b, "DREAM_LINK", 0.8, "test"), (c, b, "EVOLVED_FROM", 1.0, "test"), (c, d, "DREAM_LINK", 0.7, "test")]
    links += [(a, gone, "DREAM_LINK", 0.9, "test"), (d, other, "DREAM_LINK", 0.9, "test")]
    await manager.records.add_links(links, now=NOW)
    async with manager.records.transaction() as db:
        await db.execute("UPDATE memories SET status = 'merged' WHERE memory_id = ?", (gone,))
    await manager.flush()
    walked = await manager.records.linked_neighbours([a], "default", depth=2)
    assert [(s.memory_id, s.seed, s.hops, s.relation) for s in walked] == [
        (b, a, 1, "DREAM_LINK"),
        (c, a, 2, "EVOLVED_FROM"),
    ]
    kuzu = {s.memory_id: (s.hops, s.relation) for s in await manager.graph.expand([a], depth=2)}
    assert {s.memory_id: (s.hops, s.relation) for s in walked} == {k: v for k, v in kuzu.items() if k != gone}
    both = await manager.records.linked_neighbours([d, a], "default", depth=1)
    assert sorted((s.memory_id, s.seed, s.hops) for s in both) == sorted([(b, a, 1), (c, d, 1)])  # seeds: no steps
    assert [s.memory_id for s in both] == sorted(s.memory_id for s in both)  # equal hops: by id
    assert await manager.records.linked_neighbours([a], "default", depth=0) == []


def test_each_session_keeps_its_last_few_turn_vectors() -> None:
    cache, one, two = TurnVectors(per_session=2, limit=4), ("default", "s1"), ("default", "s2")
    cache.remember([(one, f"turn {n}", np.full(3, n, dtype=np.float32)) for n in range(3)])
    assert cache.get(one, "turn 0") is None and float(cache.get(one, "turn 2")[0]) == 2.0  # type: ignore[index]
    cache.remember([(one, "turn 1", np.zeros(3, dtype=np.float32))])  # said again: the newest, kept
    cache.remember([(one, "turn 3", np.ones(3, dtype=np.float32))])
    assert cache.get(one, "turn 2") is None and cache.get(one, "turn 1") is not None
    cache.remember([(two, "hello there", np.ones(3, dtype=np.float32))])
    assert cache.get(two, "hello there") is not None and cache.get(one, "turn 3") is not None
    cache.remember([(("default", f"s{n}"), "x", np.ones(3, dtype=np.float32)) for n in range(3, 5)])  # past 2 sessions
    assert cache.get(one, "turn 3") is None  # cleared when full; a miss costs one more pass through the model


async def test_the_walk_is_one_query_that_never_scans_a_table(manager: MemoryManager) -> None:
    ids = await add(manager, "s", ["Ines sails to Porto.", "Tom sails too.", "The regatta starts at noon."], NOW)
    sql = WALK_WITH + " UNION ALL ".join(WALK_SQL.values())
    params = {"seeds": json.dumps(ids[:2]), "depth": 2, "fanout": 25, "namespace": "default"}
    async with manager.records.transaction() as db:
        plan = [row[3] for row in await db.execute_fetchall("EXPLAIN QUERY PLAN " + sql, params)]
    scans = [step for step in plan if step.startswith("SCAN")]
    allowed = ("SCAN json_each", "SCAN seeds", "SCAN w", "SCAN e", "SCAN (subquery")
    assert scans and all(step.startswith(allowed) for step in scans), plan  # tables are searched by index only
    steps = await manager.records.graph_neighbours(ids[:1], "default", depth=2, fanout=25)
    assert {(s.memory_id, s.hops, s.relation) for s in steps} == {(ids[1], 1, "NEXT"), (ids[2], 2, "NEXT")}


async def test_the_walk_brings_the_rows_of_what_it_reached_in_the_same_query(manager: MemoryManager) -> None:
    """The read path's walk returns the steps `graph_neighbours` gives, in the same order, and each reached memory's
    row once, as `rows_for_ranking` reads it: a memory two seeds reach, by two kinds of edge, too."""
    texts = ["Ines sails to Porto with Tom.", "Tom sails too.", "The regatta starts at noon.", "Ines won it."]
    ids = await add(manager, "s", texts, NOW)
    await manager.records.add_links([(ids[3], ids[0], "RELATED_TO", 0.9, "test")], now=NOW)
    await manager.settle()  # else the projector's keywords may land between the two reads of a row
    reached_twice = 0
    for seeds in (ids[:1], ids[:2], [ids[3], ids[1]]):
        expected = await manager.records.graph_neighbours(seeds, "default", depth=2, fanout=25)
        steps, rows, counted = await manager.records.graph_neighbourhood(seeds, "default", depth=2, fanout=25)
        assert steps == expected and steps and counted == await manager.records.last_retrieval_batch()
        ((read, _),) = await manager.records.rows_for_ranking([s.memory_id for s in steps])
        assert rows == read and all(not m.entities for m in rows.values())
        reached_twice += len(steps) - len({s.memory_id for s in steps})
    assert reached_twice > 0
    assert await manager.records.graph_neighbourhood([], "default", depth=2, fanout=25) == ([], {}, -1)


async def test_a_date_the_time_layer_takes_is_not_grepped_and_other_numbers_are(manager: MemoryManager) -> None:
    """ "in February 2024" is a window of event times: grepping "2024" would find turns that say it, not turns of
    that month. A number outside the time phrase is still an exact term."""
    said = "The 2024 budget review ran long; I booked the dentist, PIN 4921, for March."
    (budget,) = await add(manager, "s", [said], NOW - timedelta(days=30))
    dated = await manager.recall("What did I buy in February 2024?", now=NOW)
    assert dated.window is not None and "grep" not in dated.timings
    assert all("grep" not in r.layers for r in dated.ranked.results)
    pin = await manager.recall("What was my PIN 4921 in 2024?", now=NOW)
    assert pin.window is not None and "grep" in pin.timings
    assert pin.ranked.results[0].memory.memory_id == budget and pin.ranked.results[0].layers["grep"].rank == 1


async def test_grep_hits_find_their_memories_in_one_query_by_index(manager: MemoryManager) -> None:
    """Every grep hit's (segment, offset) is looked up at once, each through the turns' position index."""
    ids = await add(manager, "s", ["Ines sails to Porto.", "Tom sails too.", "The regatta starts at noon."], NOW)
    async with manager.records.transaction() as db:
        turns = await db.execute_fetchall(
            "SELECT t.segment, t.offset, m.memory_id FROM turns t JOIN memories m ON m.source_turn_id = t.turn_id"
        )
        params = {"positions": json.dumps([[r[0], r[1]] for r in turns]), "namespace": "default"}
        plan = [row[3] for row in await db.execute_fetchall("EXPLAIN QUERY PLAN " + OWNERS_SQL, params)]
    scans = [step for step in plan if step.startswith("SCAN")]
    assert scans and all(step.startswith(("SCAN json_each", "SCAN up")) for step in scans), plan
    owners = await manager.records.memories_at("default", [(r[0], r[1]) for r in turns] + [(99, 0)])
    assert owners == {(r[0], r[1]): r[2] for r in turns} and sorted(owners.values()) == sorted(ids)
    assert await manager.records.memories_at("other", [(r[0], r[1]) for r in turns]) == {}


async def test_a_read_looks_for_projector_work_only_after_a_commit_that_can_leave_some(manager: MemoryManager) -> None:
    """Every read drains the projector first. A retrieval's own record (access, event) leaves the projector
    nothing, so the next read skips the look; a commit that queues an outbox row is always applied."""
    ids = await add(manager, "s", ["Ines sails to Porto.", "Tom sails too."], NOW)
    await manager.retrieve("Who sails to Porto?", now=NOW)
    await manager.settle()
    seen = manager.records.commits
    await manager.retrieve("Who sails?", now=NOW)
    await manager.settle()
    assert manager.records.commits == seen  # the record was written, and promised no projector work
    async with manager.records.transaction() as db:
        await db.execute(
            "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)", (ids[0], NOW.isoformat())
        )
    assert manager.records.commits == seen + 1
    assert await manager.projector.drain() == 1 and await manager.records.pending_outbox_count() == 0
    assert await manager.projector.drain() == 0


async def test_asking_about_the_message_just_stored_needs_no_second_pass_through_the_model(
    manager: MemoryManager,
) -> None:
    """An agent stores the user's message, then asks its memory about it: the write path's vector of that text
    is the query's, so retrieval skips the model. Any other text is embedded as usual."""
    said = "Remind me: the dentist moved my appointment to Friday at 4pm."
    await add(manager, "s", ["I moved to Porto in May.", said], NOW)
    again = await manager.recall(said, now=NOW)
    assert "embed" not in again.timings and again.vector is not None
    (fresh,) = await manager.embedder.embed([said])
    assert np.allclose(again.vector, fresh, atol=1e-5)
    assert again.ranked.results[0].memory.content == said
    other = await manager.recall("When is the dentist?", now=NOW)
    assert "embed" in other.timings


def test_the_recent_texts_are_bounded_and_shared_across_sessions() -> None:
    cache = TurnVectors(recent=2)
    cache.remember([(("default", "a"), "one", np.ones(3)), (("default", "b"), "two", np.full(3, 2.0))])
    assert cache.recent("one") is not None and float(cache.recent("two")[0]) == 2.0  # type: ignore[index]
    cache.remember([(("other", "c"), "three", np.full(3, 3.0))])
    assert cache.recent("one") is None and cache.recent("three") is not None  # the oldest text left


async def test_a_pasted_document_as_a_query_is_read_off_the_event_loop(manager: MemoryManager) -> None:
    """Reading a query's time phrases, words and grep terms is linear in its length but took half a second for
    60,000 characters, on the event loop, where every other caller waited (cognition/query_reading.py). A query over
    LONG_QUERY_CHARS is read on a worker thread: the loop is never held half as long as the reading itself takes
    on this machine (a heartbeat every 5 ms measures the longest wait; asyncio's debug mode, which measured it
    before, captures a traceback for every handle it creates, and under the reading thread's hold on the GIL that
    capture alone made a step of the projector's take 0.19 s now and then, on the code before as after), and the
    reading is the one a short query gets: its window and its words."""
    yesterday = await add(manager, "d1", ["Tried the new ramen bar downtown with Jo."], NOW - timedelta(days=1))
    await add(manager, "d0", ["Went to the cinema and then had dinner with Jo."], NOW - timedelta(days=20))
    filler = (
        "In March the team met on Monday, and last week before the release in 2025 we said this may help; "
        "two weeks ago since the summer the budget for next year was agreed. "
    )
    pasted = filler * (60_000 // len(filler)) + "What did I do yesterday evening with Jo?"
    started = time.perf_counter()
    read_query(pasted, now=NOW, config=manager.config.retrieval)
    reading = time.perf_counter() - started
    loop, held, recalling = asyncio.get_running_loop(), [0.0], True

    async def heartbeat() -> None:
        while recalling:
            beat = loop.time()
            await asyncio.sleep(0.005)
            held[0] = max(held[0], loop.time() - beat - 0.005)

    beating = asyncio.create_task(heartbeat())
    try:
        recalled = await manager.recall(pasted, now=NOW)
    finally:
        recalling = False
        await beating
    assert held[0] < reading / 2, (held[0], reading)
    assert recalled.window is not None and recalled.window.phrase == "In March"  # the leftmost phrase, as ever
    short = await manager.recall("What did I do yesterday evening with Jo?", now=NOW)
    assert short.window is not None and short.ranked.results[0].memory.memory_id == yesterday[0]
    assert "jo" in short.keywords and set(short.keywords) <= set(recalled.keywords)


WORK = [  # three sessions of one project
    [
        "Tom moved the Harbor launch to June 3 after the payments review.",
        "We deploy Harbor from the release branch every Thursday.",
        "Porto office asked for the Harbor billing export by Friday.",
    ],
    [
        "Maya owns the Postgres migration; Tom reviews it.",
        "The flaky checkout test fails when the cache is cold.",
        "Rotate the staging API keys before the launch.",
    ],
    [
        "Tom says the Porto customers want invoices in euros.",
        "The checkout service times out when Postgres is vacuuming.",
        "Harbor's launch checklist lives in the ops wiki.",
    ],
]
HOME = [  # another namespace of the same store, saying the same names
    "Tom and I walked along the river in Porto again.",
    "Porto was sunny; Tom bought pastries near the market.",
    "My sister says the launch of her bakery is in June.",
    "Tom fixed the kitchen tap on Thursday.",
    "We are planning Porto for the summer, Tom wants the coast.",
]


async def test_a_namespace_ranks_the_same_however_full_the_other_namespaces_are(
    judging_config: Config, embedder: Embedder, tmp_path: Path
) -> None:
    """Namespaces share a store, not a ranking: every layer and signal (BM25's statistics, the walk's entity counts,
    the save decision's novelty and habituation, the session lift) reads the searched namespace only. So a project's
    recall is the same in a store of its own as beside another namespace full of the same names and words."""

    async def fill(folder: str, others: int) -> list[list[tuple[str, float]]]:
        config = judging_config.model_copy(update={"data_dir": tmp_path / folder})
        async with MemoryManager.open(config, embedder=embedder) as manager:
            for n in range(others):  # written first
                said = [f"{text} ({n})" for text in HOME]
                turns = [TurnInput(f"h{n}", i, text, at=NOW - timedelta(days=40 - n)) for i, text in enumerate(said)]
                await manager.process_turns([replace(t, namespace="home") for t in turns])
            for n, said in enumerate(WORK):
                at = NOW - timedelta(days=9 - 3 * n)
                turns = [TurnInput(f"w{n}", i, text, at=at + timedelta(minutes=i)) for i, text in enumerate(said)]
                await manager.process_turns([replace(t, namespace="work") for t in turns])
            await manager.settle()
            answers = []
            for query in ("When does Harbor launch?", "Tom Porto", "what breaks the checkout test", "keys"):
                recalled = await manager.recall(query, namespace="work", now=NOW)
                answers.append([(r.memory.content, round(r.score, 9)) for r in recalled.ranked.results])
            return answers

    alone, beside = await fill("alone", 0), await fill("beside", 6)
    assert all(answer for answer in alone)
    assert beside == alone
