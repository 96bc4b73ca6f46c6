"""The embedding ceiling: the model's arithmetic, the tokenizer's counts and a real measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_memory.bench.ceiling import int8_matmul_gops, measure_ceiling, token_counts, transformer_flop
from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder, default_model_path
from agent_memory.engines import import_embedder, make_embedder

MINILM = json.loads((Path(default_model_path()) / "config.json").read_text())


def test_the_operation_count_follows_the_model_shape() -> None:
    assert (MINILM["num_hidden_layers"], MINILM["hidden_size"], MINILM["intermediate_size"]) == (6, 384, 1536)
    per_token = 2 * (4 * 384 * 384 + 2 * 384 * 1536)  # projections and feed-forward block: 3.54 MFLOP a layer
    assert transformer_flop(MINILM, 1) == 6 * (per_token + 4 * 384)
    assert transformer_flop(MINILM, 36) == 6 * (36 * per_token + 4 * 36 * 36 * 384)
    assert transformer_flop(MINILM, 36) / 36 == pytest.approx(21.5e6, rel=0.01)  # about 21 MFLOP a token


def test_tokens_are_counted_with_the_special_tokens_and_the_truncation() -> None:
    assert token_counts(["hello world", "", "word " * 1000]) == [4, 2, 256]
    assert token_counts(["hello world", "word " * 1000], max_tokens=128) == [4, 128]


async def test_a_measurement_reports_the_embedder_beside_the_ceiling(embedder: Embedder) -> None:
    texts = [f"Ana: I walked the dog {n} times around the lake this week." for n in range(40)]
    found = await measure_ceiling(texts, embedder)
    assert found.turns == 40 and found.tokens_per_turn == sum(token_counts(texts)) / 40
    assert found.gflop_per_turn == pytest.approx(transformer_flop(MINILM, round(found.tokens_per_turn)) / 1e9, rel=0.05)
    assert found.embedder_rate > 0 and found.machine_gflops > 1
    assert found.ceiling_rate == found.machine_gflops / found.gflop_per_turn
    # what is stored goes through the float32 model by default: no int8 ceiling beside it
    assert getattr(embedder, "document_precision", None) == "float32" and found.int8_gops == 0


async def test_int8_documents_get_their_own_ceiling_from_int8_arithmetic() -> None:
    environ = {"AGENT_MEMORY__EMBEDDING__DOCUMENT_PRECISION": "int8"}
    texts = [f"Ana: I walked the dog {n} times around the lake this week." for n in range(24)]
    quick = make_embedder(load_config(Path(__file__).resolve().parents[1] / "config" / "default.toml", environ=environ))
    try:
        found = await measure_ceiling(texts, quick)
    finally:
        await quick.aclose()
    assert found.int8_gops > 1 and found.int8_ceiling_rate == found.int8_gops / found.gflop_per_turn


async def test_an_imports_int8_model_is_timed_beside_the_write_paths_with_the_int8_ceiling(embedder: Embedder) -> None:
    """An import stores through the int8 document pass (engines.import_embedder): the block shows its own rate and
    the int8 ceiling it is bound by, beside the float32 embedder's."""
    texts = [f"Ana: I walked the dog {n} times around the lake this week." for n in range(24)]
    config = load_config(Path(__file__).resolve().parents[1] / "config" / "default.toml", environ={})
    importer = import_embedder(embedder, config)
    assert importer is not embedder and importer.name.endswith("-int8")
    found = await measure_ceiling(texts, embedder, importer=importer)
    assert found.import_rate > 0 and found.embedder_rate > 0
    assert found.int8_gops > 1 and found.int8_ceiling_rate == found.int8_gops / found.gflop_per_turn
    alone = await measure_ceiling(texts, embedder, importer=embedder)  # an import that embeds as the write path
    assert alone.import_rate == 0 and alone.int8_gops == 0


def test_an_int8_matrix_multiply_is_measured_on_every_worker() -> None:
    one = int8_matmul_gops(384, 1536, workers=1, rows=(64,), seconds=0.2)
    two = int8_matmul_gops(384, 1536, workers=2, rows=(64,), seconds=0.2)
    assert one > 1 and two > 1  # real work was timed; two workers are not required to scale on a busy machine
