"""How many turns a second this machine could embed at best: the arithmetic of the model against the measured
speed of the machine's matrix multiply.

Every turn goes through all-MiniLM-L6-v2 once. A transformer layer costs, per pass of `n` tokens, 2·n·(4·H² + 2·H·I)
floating-point operations in its projections and feed-forward block and 4·n²·H in attention (H the hidden width,
I the feed-forward width). Dividing the float32 matrix-multiply rate this machine reaches on all its cores (numpy's
BLAS at the model's own shapes, best of several) by the operations a turn needs gives a ceiling no implementation
of this model can pass here; the embedder's measured rate says how close ours comes. What is stored goes through
the int8 model by default, which is made of int8 products (ONNX Runtime's MatMulInteger) run one thread a pass,
passes side by side: its ceiling divides the int8 rate of that product, measured the same way, by the same count.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.embeddings.text import Embedder, default_model_path


@dataclass(frozen=True)
class EmbeddingCeiling:
    turns: int
    tokens_per_turn: float
    """Mean tokens a turn takes through the model, [CLS] and [SEP] included."""
    gflop_per_turn: float
    machine_gflops: float
    """float32 matrix multiply on all cores, at the model's shapes (the best of several)."""
    embedder_rate: float
    """Turns a second the real embedder managed, all the turns in one call."""
    int8_gops: float = 0.0
    """int8 matrix multiply, one-thread passes side by side on every core (0: not measured)."""
    import_rate: float = 0.0
    """Turns a second an import's model managed (the int8 document pass, `embedding.import_precision`), all the
    turns in one call (0: not measured, or an import embeds as the write path does)."""

    @property
    def ceiling_rate(self) -> float:
        return self.machine_gflops / self.gflop_per_turn

    @property
    def int8_ceiling_rate(self) -> float:
        return self.int8_gops / self.gflop_per_turn


def transformer_flop(config: dict[str, Any], tokens: int) -> float:
    """Floating-point operations of one pass of `tokens` tokens through a BERT-style encoder (embeddings lookup,
    layer norms and pooling are left out: they are a few percent)."""
    layers, hidden, inner = config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]
    dense = 2 * tokens * (4 * hidden * hidden + 2 * hidden * inner)
    attention = 4 * tokens * tokens * hidden
    return float(layers * (dense + attention))


def matmul_gflops(hidden: int, inner: int, *, rows: Sequence[int] = (256, 1024, 4096), seconds: float = 0.5) -> float:
    """The best float32 rate of (rows x hidden) @ (hidden x inner) over `rows`, each timed for about `seconds`."""
    generator = np.random.default_rng(7)
    weights = generator.standard_normal((hidden, inner), dtype=np.float32)
    best = 0.0
    for count in rows:
        block = generator.standard_normal((count, hidden), dtype=np.float32)
        block @ weights  # warm the BLAS threads
        runs, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            block @ weights
            runs += 1
        best = max(best, 2 * count * hidden * inner * runs / elapsed / 1e9)
    return best


def int8_matmul_gops(
    hidden: int, inner: int, *, workers: int, rows: Sequence[int] = (32, 64, 256), seconds: float = 0.5
) -> float:
    """The best int8 rate (uint8 activations x int8 weights, int32 sums: ONNX Runtime's MatMulInteger, the product
    the int8 model is made of) over `rows`, `workers` one-thread passes side by side, as the int8 model runs."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    generator = np.random.default_rng(7)
    weights = generator.integers(-127, 128, (hidden, inner), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
        "int8-matmul",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None, inner])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    best = 0.0
    for count in rows:
        block = generator.integers(0, 256, (count, hidden), dtype=np.uint8)
        session.run(None, {"a": block})  # warm up

        def passes(block: np.ndarray = block) -> int:
            runs, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                session.run(None, {"a": block})
                runs += 1
            return runs

        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            runs = sum(pool.map(lambda _: passes(), range(workers)))
        best = max(best, 2 * count * hidden * inner * runs / (time.perf_counter() - started) / 1e9)
    return best


def token_counts(texts: Sequence[str], model_path: str = "", max_tokens: int = 0) -> list[int]:
    """Tokens each text takes through the model, with the model's own tokenizer and truncation (`max_tokens`:
    `embedding.max_tokens`)."""
    from agent_memory.embeddings.onnx_text import model_tokenizer

    tokenizer = model_tokenizer(Path(model_path or default_model_path()), max_tokens)
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(list(texts))]


async def measure_ceiling(
    texts: Sequence[str],
    embedder: Embedder,
    model_path: str = "",
    *,
    importer: Embedder | None = None,
    max_tokens: int = 0,
) -> EmbeddingCeiling:
    """The ceilings for `texts`, and the rate of `embedder` (what the write path stores) and of `importer` (what an
    import stores, engines.import_embedder) when that is another model, each alone, all the texts in one call."""
    path = Path(model_path or default_model_path())
    config = json.loads((path / "config.json").read_text())
    counts = await asyncio.to_thread(token_counts, texts, str(path), max_tokens)
    flop = statistics.fmean(transformer_flop(config, n) for n in counts)
    rate = await _rate(embedder, texts)
    imports = 0.0 if importer is None or importer is embedder else await _rate(importer, texts)
    machine = await asyncio.to_thread(matmul_gflops, config["hidden_size"], config["intermediate_size"])
    int8 = 0.0
    if getattr(embedder, "document_precision", "float32") == "int8" or imports:  # the int8 model stores something
        workers = int(getattr(embedder, "threads", 1))
        int8 = await asyncio.to_thread(
            int8_matmul_gops, config["hidden_size"], config["intermediate_size"], workers=workers
        )
    return EmbeddingCeiling(len(texts), statistics.fmean(counts), flop / 1e9, machine, rate, int8, imports)


async def _rate(embedder: Embedder, texts: Sequence[str]) -> float:
    """Texts a second `embedder` embeds, all of them in one call, after a warm-up."""
    await embedder.load()
    await embedder.embed(list(texts[:16]))
    started = time.perf_counter()
    await embedder.embed(list(texts))
    return len(texts) / (time.perf_counter() - started)
