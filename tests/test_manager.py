"""MemoryManager end to end on the real engines: SQLite, Kuzu, Qdrant Edge and all-MiniLM-L6-v2."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from agent_memory import (
    ClosedError,
    ContentTooLarge,
    DuplicateTurn,
    EmptyContent,
    InvalidEncoding,
    InvalidIdentifier,
    InvalidInput,
    MemoryManager,
    MemoryNotFound,
    TurnInput,
    TurnNotFound,
)
from agent_memory.cognition.novelty import earlier_in_batch
from agent_memory.config import Config, EmbeddingConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.recall import RANKED_ON_THE_LOOP
from agent_memory.storage.outbox import Projector
from agent_memory.storage.outbox_records import PENDING_KEYWORDS
from agent_memory.validation import MAX_TURNS_PER_CALL

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

CONVERSATION = [
    "I just moved to Lisbon for a job at Fernwood, a fintech startup.",
    "ok",
    "My sister Ines is visiting on March 14 and we want to hike in Sintra.",
    "thanks!",
    "I prefer oat milk flat whites, never anything with dairy.",
    "My manager Tom wants the payments reconciliation rebuild shipped by June.",
]


async def ingest(manager: MemoryManager, lines: list[str], session: str = "s1") -> list:
    turns = [TurnInput(session, i, text, at=T0 + timedelta(minutes=i)) for i, text in enumerate(lines)]
    return await manager.process_turns(turns)


async def test_process_turn_logs_then_keeps_or_skips(judging: MemoryManager) -> None:
    manager = judging
    kept = await manager.process_turn("s1", 0, "Ines lands at Lisbon airport on flight TP1334.", at=T0)
    skipped = await manager.process_turn("s1", 1, "ok thanks!", at=T0)
    assert kept.saved and kept.memory_id and "salience" in kept.reason and "names" in kept.reason
    assert not skipped.saved and skipped.memory_id is None and "phatic" in skipped.reason
    memory = await manager.get(kept.memory_id)
    assert memory.content.startswith("Ines lands") and memory.event_at == T0
    assert "ines" in memory.entities and "lisbon" in memory.entities
    assert memory.generation == 0 and memory.tier.value == "hot" and memory.memory_type.value == "episodic"
    logged = await manager.read_turn(skipped.turn_id)
    assert logged.content == "ok thanks!" and logged.turn_number == 1


async def test_keywords_are_derived_after_the_commit_and_indexed(manager: MemoryManager) -> None:
    await manager.projector.stop()  # so the derivation cannot run between the commit and the checks below
    text = "Ines lands at Lisbon airport on flight TP1334 for the sailing regatta."
    kept = await manager.process_turn("s1", 0, text, at=T0)
    assert kept.memory_id is not None
    assert await manager.records.pending_keywords(10) == [(kept.memory_id, text)]
    async with manager.records.transaction() as db:
        (stored,) = await db.execute_fetchall("SELECT keywords FROM memories WHERE memory_id = ?", (kept.memory_id,))
    assert stored[0] == "[]"  # the commit did not wait for the key phrases
    memory = await manager.get(kept.memory_id)  # a read shows them at once, derived as the projector will
    assert memory.keywords == manager.extractor.keywords(text) and "regatta" in " ".join(memory.keywords)
    assert await manager.records.pending_keywords(10) == [(kept.memory_id, text)]  # get() wrote nothing
    await manager.flush()  # the projector's work: keywords stored, and indexed
    assert (await manager.get(kept.memory_id)).keywords == memory.keywords
    assert await manager.records.pending_keywords(10) == []
    async with manager.records.transaction() as db:  # the FTS row was re-indexed with the keywords column
        found = await db.execute_fetchall(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'keywords : regatta'"
        )
    assert len(list(found)) == 1
    async with manager.records.transaction() as db:  # every read asks: it must not scan the memories
        plan = await db.execute_fetchall("EXPLAIN QUERY PLAN " + PENDING_KEYWORDS, (64,))
    assert not [row for row in plan if "SCAN m" in row[3]], [row[3] for row in plan]


async def test_a_memory_whose_keywords_cannot_be_derived_keeps_none(manager: MemoryManager) -> None:
    await manager.projector.stop()
    broken = await manager.process_turn("s1", 0, "The harbour crane broke down on Tuesday morning.", at=T0)
    fine = await manager.process_turn("s1", 1, "Ines booked the ferry to Madeira for the regatta.", at=T0)
    assert broken.memory_id and fine.memory_id

    def picky(text: str) -> tuple[str, ...]:
        if "crane" in text:
            raise ValueError("unparseable")
        return manager.extractor.keywords(text)

    projector = Projector(manager.records, manager.graph, manager.vectors, clock=manager.clock, keywords=picky)
    await projector.drain()  # does not raise: the projector is not held up by one memory
    assert (await manager.records.get_memory(broken.memory_id)).keywords == ()
    assert "regatta" in " ".join((await manager.records.get_memory(fine.memory_id)).keywords)
    assert await manager.records.pending_keywords(10) == []


async def test_a_search_waits_for_live_writes_and_an_import_applies_its_own_batch(
    config: Config, embedder: Embedder
) -> None:
    """A search applies the projection work live writes left before it reads (so it sees every one of them), not an
    import's: `process_turns(bulk=True)` applies its own batch for reads before it returns. An import's batch that
    is committed but not yet applied is not applied by a search; the next live write's search applies all."""
    idle = timedelta(hours=1)  # the projector's tasks and the vector upgrade stay asleep: only the calls below apply
    embedding = config.embedding.model_copy(update={"upgrade_delay": idle})
    quiet = config.model_copy(update={"projector_read_delay": idle, "projector_delay": idle, "embedding": embedding})
    async with MemoryManager.open(quiet, embedder=embedder) as m:
        imported = await m.process_turns(
            [TurnInput("s1", n, text, at=T0) for n, text in enumerate(CONVERSATION[:3])], bulk=True
        )
        assert not await m.records.has_pending_for_reads()  # the import's call applied its batch
        assert await m.retrieve("oat milk in coffee", k=1)
        first = imported[0].memory_id
        assert first is not None
        async with m.records.transaction(background=True) as db:  # an import's next batch, committed, not yet applied
            await db.execute("UPDATE memories SET content = 'Moved to Kyoto in March.' WHERE memory_id = ?", (first,))
            await db.execute(
                "INSERT INTO outbox (op, memory_id, created_at) VALUES ('upsert_memory', ?, ?)", (first, T0.isoformat())
            )
            await db.execute("INSERT INTO pending_keywords (memory_id) VALUES (?)", (first,))
        await m.retrieve("Kyoto", k=1)
        assert await m.projector.catch_up_for_read() == 0
        assert await m.records.has_pending_for_reads()  # left to the import's call and the eager task
        live = await m.process_turn("s2", 0, "Ines booked the ferry to Madeira for the regatta.", at=T0)
        hits = await m.retrieve("ferry to Madeira", k=3)
        assert hits[0].memory.memory_id == live.memory_id  # a live write is searched at once
        assert not await m.records.has_pending_for_reads()  # and its search applied the import's rows with it
        assert await m.projector.catch_up_for_read() == 0


async def test_retrieve_fuses_keyword_and_semantic_and_explains(manager: MemoryManager) -> None:
    await ingest(manager, CONVERSATION)
    results = await manager.retrieve("What milk does she like in coffee?", k=3)
    assert results[0].memory.content.startswith("I prefer oat milk")
    assert set(results[0].layers) >= {"keyword", "semantic"}
    assert results[0].layers["keyword"].rank == 1
    assert [r.rank for r in results] == [1, 2, 3]
    assert results[0].score > results[1].score
    assert "semantic #" in results[0].explain()
    # semantic search alone carries a paraphrase with no shared word
    paraphrase = await manager.retrieve("who is my boss", k=2)
    assert any("manager Tom" in r.memory.content for r in paraphrase)


async def test_retrieval_records_access_once_per_returned_memory(manager: MemoryManager) -> None:
    await ingest(manager, CONVERSATION)
    results = await manager.retrieve("sister visiting Sintra", k=2)
    memory = await manager.get(results[0].memory.memory_id)
    assert memory.access_count == 1 and memory.last_accessed_at is not None
    stats = await manager.stats()
    assert stats["records"]["retrieval_events"] == 1 and stats["records"]["access_log"] == len(results)


async def test_mood_congruent_memories_are_lifted(manager: MemoryManager) -> None:
    await manager.process_turn("s1", 0, "The dog walk in the park was long today.", at=T0)
    await manager.process_turn(
        "s1",
        1,
        "The dog walk in the park was awful, Biscuit got hurt.",
        at=T0,
        emotional_context={"valence": -0.9, "arousal": 0.9},
    )
    calm = await manager.retrieve("dog walk in the park", k=2)
    upset = await manager.retrieve("dog walk in the park", k=2, emotional_context={"valence": -0.9, "arousal": 0.9})
    upset_scores = {r.memory.content: r.score for r in upset}
    calm_scores = {r.memory.content: r.score for r in calm}
    hurt = next(c for c in upset_scores if "Biscuit" in c)
    assert upset_scores[hurt] > calm_scores[hurt]
    assert "mood" in next(r for r in upset if r.memory.content == hurt).layers


async def test_namespaces_do_not_leak(manager: MemoryManager) -> None:
    await manager.process_turn("s1", 0, "Project Harbor ships in June.", namespace="work", at=T0)
    await manager.process_turn("s1", 0, "Harbor seals at the aquarium.", namespace="home", at=T0)
    work = await manager.retrieve("Harbor", namespace="work")
    assert [r.memory.namespace for r in work] == ["work"]


async def test_bulk_ingest_links_sessions_in_the_graph(manager: MemoryManager) -> None:
    results = await ingest(manager, CONVERSATION)
    await manager.flush()
    stats = await manager.stats()
    saved = sum(r.saved for r in results)
    assert saved == 4
    assert stats["records"]["turns"] == 6 and stats["records"]["memories"] == saved
    assert stats["vectors"]["text"] == saved and stats["graph"]["Memory"] == saved
    assert stats["graph"]["NEXT"] == saved - 1 and stats["graph"]["IN_SESSION"] == saved
    assert stats["graph"]["MENTIONS"] >= 4 and stats["pending_outbox"] == 0


@pytest.mark.parametrize(
    ("turn", "error"),
    [
        ({"content": ""}, EmptyContent),
        ({"content": "   \n\t"}, EmptyContent),
        ({"content": "x" * (8 * 1024 * 1024 + 1)}, ContentTooLarge),  # over max_turn_bytes (70 KB is chunked)
        ({"content": b"caf\xe9 au lait"}, InvalidEncoding),
        ({"content": "lone \ud800 surrogate"}, InvalidEncoding),
        ({"session_id": "bad session id!"}, InvalidIdentifier),
        ({"session_id": ""}, InvalidIdentifier),
        ({"namespace": "../etc"}, InvalidIdentifier),
        ({"role": "narrator"}, InvalidInput),
        ({"turn_number": -1}, InvalidInput),
        ({"at": datetime(2026, 1, 1)}, InvalidInput),
        ({"emotional_context": {"valence": 3}}, InvalidInput),
    ],
)
async def test_bad_input_is_refused_and_writes_nothing(manager: MemoryManager, turn: dict, error: type) -> None:
    args = {"session_id": "s1", "turn_number": 0, "content": "fine", **turn}
    with pytest.raises(error):
        await manager.process_turn(args.pop("session_id"), args.pop("turn_number"), args.pop("content"), **args)
    stats = await manager.stats()
    assert stats["records"]["turns"] == 0 and stats["log_bytes"] == 0


async def test_one_bad_turn_rejects_the_whole_batch(manager: MemoryManager) -> None:
    with pytest.raises(EmptyContent, match="turn #1"):
        await manager.process_turns([TurnInput("s1", 0, "good"), TurnInput("s1", 1, "")])
    assert (await manager.stats())["log_bytes"] == 0


async def test_a_call_over_the_turn_limit_is_refused_whole_and_a_full_one_keeps_the_loop_moving(
    manager: MemoryManager, caplog: pytest.LogCaptureFixture
) -> None:
    """One call takes up to MAX_TURNS_PER_CALL turns (one transaction); more is refused before anything is written.
    A full call lets other callers in: its novelty check compared each turn with the batch before it by stacking
    the batch again for every turn, so 1,024 turns held the event loop for 0.7-1.1 s in one step; now about 0.06 s
    (asyncio's debug mode reports each step over half a second: room for a machine busy with other tests)."""
    over = [TurnInput(f"s{n // 50}", n % 50, f"Turn {n}: the heron by the lock gate again") for n in range(1025)]
    with pytest.raises(InvalidInput, match="1025 turns in one call, over the limit of 1024"):
        await manager.process_turns(over)
    assert (await manager.stats())["log_bytes"] == 0
    loop = asyncio.get_running_loop()
    loop.slow_callback_duration, debug = 0.5, loop.get_debug()
    loop.set_debug(True)
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            results = await manager.process_turns(over[:MAX_TURNS_PER_CALL], bulk=True)
            wide = await manager.context("the heron by the lock gate", budget_tokens=1_000_000)  # ranked off the loop
    finally:
        loop.set_debug(debug)
    assert len(results) == MAX_TURNS_PER_CALL and [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    assert len(wide.items) == MAX_TURNS_PER_CALL > RANKED_ON_THE_LOOP and wide.tokens <= 1_000_000


def test_each_turn_is_compared_with_the_turns_before_it_in_its_batch_and_namespace() -> None:
    """`earlier_in_batch` stacks a namespace's vectors once: the same cosines, to the bit, as stacking the turns
    before each one again, and none for a namespace's first turn or a turn with no vector (a phatic one)."""
    rng = np.random.default_rng(3)
    vectors: list[np.ndarray | None] = []
    namespaces = ["a" if n % 3 else "b" for n in range(120)]
    for n in range(120):
        vector = rng.standard_normal(384).astype(np.float32)
        vectors.append(None if n % 17 == 0 else vector / np.linalg.norm(vector))
    found = earlier_in_batch(vectors, namespaces)
    seen: list[int] = []
    for position, vector in enumerate(vectors):
        if vector is None:
            assert position not in found
            continue
        before = [vectors[i] for i in seen if namespaces[i] == namespaces[position]]
        expected = float(np.max(np.stack(before) @ vector)) if before else None  # type: ignore[arg-type]
        assert found.get(position) == expected
        seen.append(position)
    assert len(found) == len(seen) - 2  # each namespace's first turn has none


async def test_bytes_content_is_decoded(manager: MemoryManager) -> None:
    result = await manager.process_turn("s1", 0, "café com leite em Lisboa".encode())
    assert (await manager.get(result.memory_id)).content == "café com leite em Lisboa"


async def test_duplicate_turns_are_refused(manager: MemoryManager) -> None:
    await manager.process_turn("s1", 0, "first words")
    with pytest.raises(DuplicateTurn, match="already processed"):
        await manager.process_turn("s1", 0, "second words")
    with pytest.raises(DuplicateTurn):
        await manager.process_turns([TurnInput("s2", 0, "a b c"), TurnInput("s2", 0, "d e f")])


async def test_a_batch_naming_a_stored_turn_is_refused_whole_and_the_error_names_that_turn(
    manager: MemoryManager,
) -> None:
    await manager.process_turns([TurnInput("s1", 3, "the stored one"), TurnInput("s1", 4, "and another")])
    batch = [
        TurnInput("s1", 2, "new, before it"),
        TurnInput("s1", 4, "sent again"),
        TurnInput("s1", 3, "sent again too"),
        TurnInput("s1", 3, "new in another namespace", namespace="other"),
    ]
    with pytest.raises(DuplicateTurn) as refused:
        await manager.process_turns(batch)
    assert (refused.value.namespace, refused.value.session_id, refused.value.turn_number) == ("default", "s1", 4)
    assert (await manager.stats())["records"]["turns"] == 2  # nothing of the batch was written
    written = await manager.process_turns([batch[0], batch[3]])  # the same keys, free, are taken
    assert [r.saved for r in written] == [True, True]


async def test_concurrent_duplicates_are_refused_once(manager: MemoryManager) -> None:
    outcomes = await asyncio.gather(
        *(manager.process_turn("s9", 0, f"racing writer {i}") for i in range(4)), return_exceptions=True
    )
    assert sum(isinstance(o, DuplicateTurn) for o in outcomes) == 3
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert (await manager.stats())["records"]["turns"] == 1


async def test_an_empty_store_answers_with_nothing(manager: MemoryManager) -> None:
    assert await manager.retrieve("anything at all?") == []
    assert await manager.retrieve("!!! ???") == []
    assert (await manager.doctor()).consistent


async def test_unknown_ids_raise_not_found(manager: MemoryManager) -> None:
    with pytest.raises(MemoryNotFound, match="nope"):
        await manager.get("nope")
    with pytest.raises(TurnNotFound):
        await manager.read_turn("nope")
    with pytest.raises(InvalidInput, match="empty"):
        await manager.retrieve("  ")


async def test_closed_manager_refuses_work(config: Config, embedder: Embedder) -> None:
    manager = MemoryManager(config, embedder=embedder)
    await manager.initialize()
    await manager.close()
    await manager.close()
    with pytest.raises(ClosedError):
        await manager.process_turn("s1", 0, "too late")
    with pytest.raises(ClosedError):
        await manager.retrieve("anything")


async def test_reopen_keeps_everything(config: Config, embedder: Embedder) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:
        await ingest(manager, CONVERSATION)
        await manager.flush()  # stats() does not wait for the projector: its counts are as of its last batch
        before = await manager.stats()
        top = (await manager.retrieve("hiking with my sister", k=1))[0].memory.memory_id
    async with MemoryManager.open(config, embedder=embedder) as manager:
        after = await manager.stats()
        assert (await manager.retrieve("hiking with my sister", k=1))[0].memory.memory_id == top
        assert (await manager.doctor()).consistent
    assert before["records"]["memories"] == after["records"]["memories"]
    assert before["graph"] == after["graph"] and before["vectors"] == after["vectors"]


INT8 = EmbeddingConfig(document_precision="int8")


class CountingEmbedder:
    """The real embedder, passed through, counting the texts it is asked to embed (a wrapper, not a stand-in)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.texts = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts += len(texts)
        return await self.inner.embed(texts)


async def test_a_text_prepared_ahead_is_stored_with_the_same_vector_and_not_embedded_again(
    config: Config, embedder: Embedder
) -> None:
    counting = CountingEmbedder(embedder)
    text = "I booked the ferry to Tangier for the ninth of June."
    async with MemoryManager.open(config, embedder=counting) as manager:  # type: ignore[arg-type]
        await manager.prepare_turns([text, text])
        assert counting.texts == 1  # once
        with pytest.raises(EmptyContent):  # a text no turn could hold is refused as the turn would be
            await manager.prepare_turns([""])
        before = counting.texts
        stored = await manager.process_turn("s1", 1, text)
        assert counting.texts == before  # taken from what was prepared
        again = await manager.process_turn("s1", 2, text + " Again.")
        assert counting.texts == before + 1
        blob = await manager.records._fetch("SELECT embedding FROM memories WHERE memory_id = ?", (stored.memory_id,))
    fresh = (await embedder.embed([text]))[0]
    assert again.saved and np.allclose(np.frombuffer(bytes(blob[0][0]), dtype="<f4"), fresh, atol=1e-5)


@pytest.mark.parametrize("documents", ["int8", "float32"])
async def test_a_question_said_next_as_a_turn_is_stored_with_its_question_vector(
    config: Config, embedder: Embedder, documents: str
) -> None:
    """The runtime and the proxy ask with the user's message, then record it. With int8 documents a question and a
    stored text get the same vector from the same model, so the question's is kept and the turn embeds nothing;
    with float32 documents (the default) the turn is embedded by the model that stores."""
    model = embedder if documents == "float32" else make_embedder(config.model_copy(update={"embedding": INT8}))
    counting = CountingEmbedder(model)
    text = "Which ferry did I book to Tangier?"
    try:
        async with MemoryManager.open(config, embedder=counting) as manager:  # type: ignore[arg-type]
            await manager.process_turn("s1", 1, "I booked the morning ferry to Tangier for the ninth of June.")
            assert model.query_is_document == (documents == "int8")
            asked = await model.embed_query(text)
            await manager.retrieve(text, k=3)
            before = counting.texts
            await manager.prepare_turns([text])  # int8: already there, nothing to embed; float32: embedded now
            stored = await manager.process_turn("s1", 2, text)
            assert counting.texts == before + (documents == "float32")
            await manager.process_turn("s1", 3, "Which train did I book to Fez?")  # never asked: embedded
            assert counting.texts == before + (documents == "float32") + 1
        alone = (await model.embed([text]))[0]
    finally:
        if model is not embedder:
            await model.aclose()
    assert stored.saved and alone.shape == asked.shape
    assert np.array_equal(asked, alone) == (documents == "int8")
