"""Both text embedders are the same all-MiniLM-L6-v2: the ONNX export must reproduce PyTorch's vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agent_memory.embeddings.onnx_text import OnnxMiniLmEmbedder
from agent_memory.embeddings.text import Embedder, MiniLmEmbedder

SENTENCES = [
    "I moved to Porto on May 1, into a flat in Bonfim.",
    "Melanie: off to go swimming with the kids this weekend!",
    "ok",
    "The reconciliation rebuild for Project Harbor ships on June 3. " * 20,  # truncated at 256 tokens
]


async def test_onnx_matches_torch(embedder: Embedder) -> None:
    assert isinstance(embedder, OnnxMiniLmEmbedder)
    torch_model = MiniLmEmbedder()
    try:
        expected = await torch_model.embed(SENTENCES)
    finally:
        await torch_model.aclose()
    got = await embedder.embed(SENTENCES)
    assert got.shape == (4, 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert float((got * expected).sum(axis=1).min()) > 0.9999


async def test_batch_order_and_empty_input(embedder: Embedder) -> None:
    one_by_one = np.vstack([await embedder.embed([s]) for s in SENTENCES])
    together = await embedder.embed(SENTENCES)
    assert np.allclose(one_by_one, together, atol=1e-4)
    assert (await embedder.embed([])).shape == (0, 384)


async def test_similar_sentences_are_closer(embedder: Embedder) -> None:
    a, b, c = await embedder.embed(["my boss is Tom", "Tom is my manager", "a recipe for lentil soup"])
    assert float(a @ b) > float(a @ c) + 0.3


async def test_export_is_cached_and_reused(tmp_path: Path) -> None:
    first = OnnxMiniLmEmbedder(cache_dir=tmp_path)
    await first.load()
    exported = list(tmp_path.glob("*.onnx"))
    assert len(exported) == 1 and not list(tmp_path.glob("*.partial"))
    stamp = exported[0].stat().st_mtime_ns
    second = OnnxMiniLmEmbedder(cache_dir=tmp_path)
    await second.load()
    assert exported[0].stat().st_mtime_ns == stamp
    assert np.allclose(await first.embed(["same"]), await second.embed(["same"]))
    await first.aclose()
    await second.aclose()
