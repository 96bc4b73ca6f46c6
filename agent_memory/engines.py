"""Opening the engines the configuration names, one store at a time (the manager composes them)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder, MiniLmEmbedder
from agent_memory.errors import StorageError, StoreLocked
from agent_memory.storage.base import VectorStore

log = logging.getLogger(__name__)
T = TypeVar("T")


def make_embedder(config: Config) -> Embedder:
    """The text embedder the configuration names: ONNX Runtime by default, sentence-transformers on request."""
    settings = config.embedding
    if settings.backend == "torch":
        return MiniLmEmbedder(settings.model_path, batch_size=settings.batch_size, threads=settings.threads)
    from agent_memory.embeddings.onnx_text import OnnxMiniLmEmbedder

    return OnnxMiniLmEmbedder(
        settings.model_path, cache_dir=config.embedding_cache, batch_size=settings.batch_size, threads=settings.threads
    )


async def open_projection(path: Path, opener: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
    """Open a projection; when it cannot open (a crash left it unreadable), set it aside and start it afresh.

    The graph and the vectors are projections of SQLite, so nothing is lost: the caller rebuilds the fresh one.
    Returns the store and whether it must be rebuilt. A lock held by another process is never set aside.
    """
    try:
        return await opener(), False
    except StoreLocked:
        raise
    except StorageError as exc:
        aside = path.with_name(path.name + ".broken")
        log.warning("%s cannot be opened (%s); moving it to %s and rebuilding it from SQLite", path, exc, aside)
        await asyncio.to_thread(_set_aside, path, aside)
        return await opener(), True


def _set_aside(path: Path, aside: Path) -> None:
    if aside.exists():
        shutil.rmtree(aside)
    if path.exists():
        path.rename(aside)


async def open_vectors(config: Config) -> VectorStore:
    if config.vectors.url:
        from agent_memory.storage.server_vectors import QdrantServerVectors

        return await QdrantServerVectors.open(
            config.vectors.url,
            api_key=config.vectors.api_key,
            prefix=config.vectors.collection_prefix,
            dimensions={"text": config.embedding.dimension, "image": 512},
        )
    from agent_memory.storage.vectors import EdgeVectors

    return await EdgeVectors.open(
        config.data_dir / "vectors", dimensions={"text": config.embedding.dimension, "image": 512}
    )
