"""Both text embedders are the same all-MiniLM-L6-v2: the ONNX export must reproduce PyTorch's vectors."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from agent_memory.config import load_config
from agent_memory.embeddings.onnx_text import OnnxMiniLmEmbedder
from agent_memory.embeddings.text import Embedder, SentenceTransformerEmbedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

ROOT = Path(__file__).resolve().parents[1]

SENTENCES = [
    "I moved to Porto on May 1, into a flat in Bonfim.",
    "Melanie: off to go swimming with the kids this weekend!",
    "ok",
    "The reconciliation rebuild for Project Harbor ships on June 3. " * 20,  # cut at 128 word pieces
]


@pytest.fixture(scope="module")
def int8_embedder() -> Embedder:
    """The shipped defaults with what is stored embedded by the int8 model too (`embedding.document_precision`)."""
    environ = {"AGENT_MEMORY__EMBEDDING__DOCUMENT_PRECISION": "int8"}
    return make_embedder(load_config(ROOT / "config" / "default.toml", environ=environ))


async def test_onnx_matches_torch(embedder: Embedder, int8_embedder: Embedder) -> None:
    """The default stores through the float32 export, PyTorch's vectors to 1e-4; int8 documents are close to
    them, and not the same model."""
    assert isinstance(embedder, OnnxMiniLmEmbedder) and embedder.name == "all-MiniLM-L6-v2"
    torch_model = SentenceTransformerEmbedder(max_tokens=embedder.max_tokens)  # the same cut: 128 word pieces
    try:
        expected = await torch_model.embed(SENTENCES)
    finally:
        await torch_model.aclose()
    got = await embedder.embed(SENTENCES)
    assert got.shape == (4, 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert float((got * expected).sum(axis=1).min()) > 0.9999
    assert isinstance(int8_embedder, OnnxMiniLmEmbedder) and int8_embedder.name == "all-MiniLM-L6-v2-int8"
    quick = await int8_embedder.embed(SENTENCES)
    assert np.allclose(np.linalg.norm(quick, axis=1), 1.0, atol=1e-5)
    cosines = (quick * expected).sum(axis=1)
    assert float(cosines.min()) > 0.95 and float(cosines.max()) < 0.99999


async def test_batch_order_and_empty_input(embedder: Embedder) -> None:
    one_by_one = np.vstack([await embedder.embed([s]) for s in SENTENCES])
    together = await embedder.embed(SENTENCES)
    assert np.allclose(one_by_one, together, atol=1e-4)
    assert (await embedder.embed([])).shape == (0, 384)


async def test_a_question_and_a_live_turn_do_not_wait_behind_an_import_batch(embedder: Embedder) -> None:
    """Questions, stored turns and an import's batches each have a thread and a tokenizer of their own: while an
    import's batch is in the model, a question and a live turn are answered, with the vectors they get when the
    model is idle. On one thread they waited for the whole batch (0.6 s for 64 LongMemEval turns)."""
    assert isinstance(embedder, OnnxMiniLmEmbedder)
    question, turn = "When does Project Harbor ship?", ["Caroline: I went to a support group yesterday."]
    idle_question, idle_turn = await embedder.embed_query(question), await embedder.embed(turn)
    long = [f"Turn {i}: the reconciliation rebuild for Project Harbor ships after the audit. " * 12 for i in range(400)]
    batch = asyncio.create_task(embedder.importer().embed(long))
    await asyncio.sleep(0.2)  # tokenized, and in the model: about 4 s of passes on two cores
    assert not batch.done()
    asked, told = await embedder.embed_query(question), await embedder.embed(turn)
    assert not batch.done(), "the question and the turn waited for the import's batch"
    assert (await batch).shape == (400, 384)
    assert np.array_equal(asked, idle_question) and np.array_equal(told, idle_turn)


def niceness_of_threads(prefix: str) -> set[int]:
    ids = [t.native_id for t in threading.enumerate() if t.name.startswith(prefix) and t.native_id is not None]
    return {os.getpriority(os.PRIO_PROCESS, i) for i in ids}


async def test_an_import_s_threads_give_way_to_questions_and_live_turns(tmp_path: Path, embedder: Embedder) -> None:
    """On Linux an import's model threads run 10 nicer than the process: when the cores are busy, a question or a
    live turn gets them first (a live turn during an import: p50 36.6-36.9 -> 16.1-19.0 ms on two cores); alone,
    the import runs as fast. Elsewhere a thread cannot be niced alone, and none is."""
    assert isinstance(embedder, OnnxMiniLmEmbedder)
    fresh = OnnxMiniLmEmbedder(cache_dir=embedder.cache_dir, max_tokens=embedder.max_tokens, threads=2)
    try:
        texts = [f"Turn {i}: the reconciliation rebuild ships after the audit." for i in range(16)]
        imported = await fresh.importer().embed(texts)  # starts the import's thread and its passes
        await fresh.embed_query("When does it ship?")
        await fresh.embed(texts[:1])
        process = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the main thread's
        given = {min(19, process + 10)} if sys.platform == "linux" else {process}
        assert niceness_of_threads("embedder-import") == given  # the batch's thread and the int8 passes
        assert niceness_of_threads("embedder-query") == niceness_of_threads("embedder_") == {process}
        assert np.array_equal(imported, await embedder.importer().embed(texts))  # the same vectors
    finally:
        await fresh.aclose()


async def test_an_import_s_drafts_give_way_and_a_live_turn_s_do_not(manager: MemoryManager) -> None:
    """What the save decision reads from each text of an import's batch (`process_turns(bulk=True)`) is drafted on a
    thread of their own (drafting.py), as nice as the import's model passes on Linux; a live batch's on the shared
    worker threads, at the process's priority. Questions asked of a daemon during an import wait less for the CPU
    (p95 93-104 -> 76-84 ms, docs/benchmarks.md)."""
    texts = ["The audit moved to Thursday.", "Lena owns the reconciliation rebuild.", "It ships after the audit."]
    await manager.process_turns(
        [TurnInput("import", n, t, namespace="imported") for n, t in enumerate(texts)], bulk=True
    )
    await manager.process_turns([TurnInput("live", n, t, namespace="live") for n, t in enumerate(texts)])
    process = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert niceness_of_threads("import-drafts") == ({min(19, process + 10)} if sys.platform == "linux" else {process})
    assert niceness_of_threads("asyncio_") == {process}


async def test_the_first_calls_on_three_threads_at_once_load_the_model_once(tmp_path: Path, embedder: Embedder) -> None:
    """A fresh embedder asked on its three threads at once (a daemon's first question, turn and import): each call
    waits for the one load, and each gets the vectors of an embedder loaded before it was asked."""
    assert isinstance(embedder, OnnxMiniLmEmbedder)
    fresh = OnnxMiniLmEmbedder(cache_dir=embedder.cache_dir, max_tokens=embedder.max_tokens)
    try:
        asked, told, imported = await asyncio.gather(
            fresh.embed_query(SENTENCES[0]), fresh.embed(SENTENCES), fresh.importer().embed(SENTENCES)
        )
        assert np.array_equal(asked, await embedder.embed_query(SENTENCES[0]))
        assert np.array_equal(told, await embedder.embed(SENTENCES))
        assert np.array_equal(imported, await embedder.importer().embed(SENTENCES))
    finally:
        await fresh.aclose()


async def test_similar_sentences_are_closer(embedder: Embedder) -> None:
    a, b, c = await embedder.embed(["my boss is Tom", "Tom is my manager", "a recipe for lentil soup"])
    assert float(a @ b) > float(a @ c) + 0.3


async def test_export_is_cached_and_reused(tmp_path: Path) -> None:
    first = OnnxMiniLmEmbedder(cache_dir=tmp_path, query_precision="float32", document_precision="float32")
    await first.load()
    exported = list(tmp_path.glob("*.onnx"))
    assert len(exported) == 1 and not list(tmp_path.glob("*.partial"))
    stamp = exported[0].stat().st_mtime_ns
    second = OnnxMiniLmEmbedder(cache_dir=tmp_path, query_precision="float32", document_precision="float32")
    await second.load()
    assert exported[0].stat().st_mtime_ns == stamp
    assert np.allclose(await first.embed(["same"]), await second.embed(["same"]))
    await first.aclose()
    await second.aclose()
    # eager attention: the mask is added, not traced as Where and IsNaN over every token pair (EXPORT_ATTENTION)
    graph = onnx.load(str(exported[0]), load_external_data=False).graph
    ops = Counter(node.op_type for node in graph.node)
    assert ops["Softmax"] == 6 and ops["IsNaN"] == 0 and ops["Where"] <= 2


QUESTIONS = [
    "What did Caroline research after the support group?",
    "When did I move to Porto?",
    "what's the PIN of the blue locker",
    "Which activities does Melanie partake in?",
]


async def test_a_question_goes_through_the_int8_model_close_to_the_float32_one(
    embedder: Embedder, int8_embedder: Embedder
) -> None:
    assert isinstance(embedder, OnnxMiniLmEmbedder) and embedder.query_precision == "int8"
    assert not embedder.query_is_document  # the default stores through the float32 model
    stored = await embedder.embed(QUESTIONS + SENTENCES[:2])
    asked = np.vstack([await embedder.embed_query(q) for q in QUESTIONS])
    # with int8 documents what is stored goes through the same int8 model, one text a pass: a question equals its
    # memory
    assert np.allclose(asked, await int8_embedder.embed(QUESTIONS), atol=1e-6)
    assert asked.dtype == np.float32 and np.allclose(np.linalg.norm(asked, axis=1), 1.0, atol=1e-5)
    agreement = (asked * stored[: len(QUESTIONS)]).sum(axis=1)
    assert agreement.min() > 0.98 and not np.allclose(asked, stored[: len(QUESTIONS)], atol=1e-4)  # another model
    porto = asked[1]  # still nearest to what it asks about
    assert float(porto @ stored[len(QUESTIONS)]) > float(porto @ stored[len(QUESTIONS) + 1]) + 0.2


async def test_the_int8_model_is_made_once_and_float32_questions_use_the_stored_model(tmp_path: Path) -> None:
    first = OnnxMiniLmEmbedder(cache_dir=tmp_path)
    await first.load()
    (quantized,) = tmp_path.glob("*-int8.onnx")
    stamp = quantized.stat().st_mtime_ns
    second = OnnxMiniLmEmbedder(cache_dir=tmp_path)
    exact = OnnxMiniLmEmbedder(cache_dir=tmp_path, query_precision="float32", document_precision="float32")
    fast = OnnxMiniLmEmbedder(cache_dir=tmp_path, threads=2, document_precision="int8")  # documents through int8
    lone = OnnxMiniLmEmbedder(cache_dir=tmp_path, threads=1, document_precision="int8")  # passes one after another
    try:
        await second.load()
        assert quantized.stat().st_mtime_ns == stamp and not list(tmp_path.glob("*.partial"))
        assert np.array_equal(await first.embed_query("same"), await second.embed_query("same"))
        assert np.allclose(await exact.embed_query(QUESTIONS[0]), (await exact.embed([QUESTIONS[0]]))[0], atol=1e-6)
        # documents through the int8 model (embedding.document_precision), and the vectors say so
        stored, quick = await exact.embed(QUESTIONS), await fast.embed(QUESTIONS)
        cosines = (stored * quick).sum(axis=1)
        assert float(cosines.min()) > 0.97 and float(cosines.max()) < 0.99999  # close, and not the same model
        alone = (await fast.embed([QUESTIONS[0]]))[0]
        assert np.allclose(alone, await fast.embed_query(QUESTIONS[0]), atol=1e-6)  # the query model itself
        # int8 activations are quantized per pass, so each text has a pass of its own: batch-mates never move it
        assert np.allclose(alone, quick[0], atol=1e-6)
        beside = await fast.embed(SENTENCES)  # "ok" with a 256-token turn in the same call
        assert np.allclose(beside, np.vstack([await fast.embed([s]) for s in SENTENCES]), atol=1e-6)
        assert np.allclose(beside, await lone.embed(SENTENCES), atol=1e-6)  # passes side by side change nothing
        assert (exact.name, fast.name) == ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8")
    finally:
        for embedder in (first, second, exact, fast, lone):
            await embedder.aclose()


@pytest.mark.parametrize(("broken", "reason"), [("unreadable", "could not be made"), ("strays", "strays from it")])
async def test_a_query_model_that_cannot_load_or_strays_falls_back_to_float32(
    tmp_path: Path, broken: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A corrupt cached file, or one whose vectors stray from the float32 model's, is not used: the question is
    embedded by the stored model, and a warning says why."""
    first = OnnxMiniLmEmbedder(cache_dir=tmp_path, query_precision="float32", document_precision="float32")
    await first.load()
    await first.aclose()
    (exported,) = tmp_path.glob("*.onnx")
    target = exported.with_name(exported.stem + "-int8.onnx")
    if broken == "unreadable":
        target.write_bytes(b"not an onnx model")
    else:  # a well-formed model with its token embeddings shuffled: it loads, and places questions elsewhere
        model = onnx.load(str(exported))
        table = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
        weights = numpy_helper.to_array(table)
        table.CopyFrom(numpy_helper.from_array(weights[np.random.default_rng(7).permutation(len(weights))], table.name))
        onnx.save(model, str(target))
    embedder = OnnxMiniLmEmbedder(cache_dir=tmp_path, document_precision="float32")  # int8 asked for questions
    try:
        with caplog.at_level(logging.WARNING, logger="agent_memory.embeddings.onnx_text"):
            await embedder.load()
        (warning,) = [r.getMessage() for r in caplog.records if "questions are embedded in float32" in r.getMessage()]
        assert reason in warning
        got, expected = await embedder.embed_query(QUESTIONS[1]), (await embedder.embed([QUESTIONS[1]]))[0]
        assert np.allclose(got, expected, atol=1e-6)
    finally:
        await embedder.aclose()
    asked = OnnxMiniLmEmbedder(cache_dir=tmp_path, document_precision="int8")  # int8 asked for what is stored too
    try:
        await asked.load()
        assert asked.name == "all-MiniLM-L6-v2"  # it got the float32 model, and its vectors say so
        assert np.allclose((await asked.embed([QUESTIONS[1]]))[0], expected, atol=1e-6)
    finally:
        await asked.aclose()


@pytest.mark.parametrize("backend", ["onnx", "torch"])
async def test_max_tokens_reads_a_text_up_to_that_many_word_pieces(backend: str) -> None:
    """`embedding.max_tokens` cuts what the model reads: with 128, two texts that share their first 128 word pieces
    have one vector; with the model's own 256, the second text's tail moves its vector."""
    head = "The reconciliation rebuild for Project Harbor ships on June 3. " * 12  # about 170 word pieces
    tail = "Lentil soup, and the long history of the Roman empire. " * 4
    vectors = {}
    for limit in ("128", "0"):
        environ = {"AGENT_MEMORY__EMBEDDING__MAX_TOKENS": limit, "AGENT_MEMORY__EMBEDDING__BACKEND": backend}
        model = make_embedder(load_config(ROOT / "config" / "default.toml", environ=environ))
        try:
            vectors[limit] = await model.embed([head, head + tail])
        finally:
            await model.aclose()
    cut, whole = vectors["128"], vectors["0"]
    assert float(cut[0] @ cut[1]) > 0.99999
    assert float(whole[0] @ whole[1]) < 0.99
    assert float(cut[0] @ whole[0]) < 0.9999  # 128 word pieces of the head against its 170
