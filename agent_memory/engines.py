"""Opening the engines the configuration names, one store at a time (the manager composes them)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder, SentenceTransformerEmbedder
from agent_memory.errors import ConfigError, EngineUnavailable, StorageError, StoreLocked
from agent_memory.storage.base import VectorStore
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
T = TypeVar("T")
CLIP_DIMENSION = 512  # ViT-B-32's, the default architecture; used when an architecture's config cannot be read


async def check_vector_size(records: SqliteRecords, config: Config) -> None:
    """Refuse a store whose text vectors were made by a model of another size than the configured one, before a
    vector collection is opened: its vectors cannot be searched by this model's questions."""
    stored = await records.text_vector_size()
    if stored is not None and stored != config.embedding.dimension:
        raise ConfigError(
            f"The store in {config.data_dir} holds {stored}-dimensional text vectors, and embedding.dimension is "
            f"{config.embedding.dimension} ({config.embedding.model_path or 'all-MiniLM-L6-v2'}): open it with the "
            "model that made it, or make a new store for this model"
        )


async def warn_other_model(records: SqliteRecords, model: str, *, upgrading: str | None = None) -> set[str]:
    """Warn when the store's text vectors were made by another model than `model` (of the same size: another size
    is refused by check_vector_size): its questions would be compared with another model's vectors. A name is the
    model folder's; its int8 and float32 passes count as one model. `upgrading` names the vectors the vector
    upgrade makes again while the store is idle (vector_upgrade.py). Returns the other models' names."""
    models = await records.vector_models()
    others = {name for name in models if name and _base(name) != _base(model)}
    if precisions := {name for name in models if name and _base(name) == _base(model) and name != model}:
        later = (
            "they are made again with it while the store is idle (embedding.upgrade_vectors), or at once by"
            if precisions == {upgrading}
            else "searched together;"
        )
        log.info(
            "Some of the store's text vectors were made by %s, and new ones by %s: the same model at another "
            "precision; %s `agent-memory reembed` (daemon stopped), which makes them all with %s",
            ", ".join(sorted(precisions)),
            model,
            later,
            model,
        )
    if others:
        log.warning(
            "The store's text vectors were made by %s, and questions are now embedded by %s: the semantic layer "
            "compares two models' vectors. Run `agent-memory reembed` (daemon stopped) to make every vector with this "
            "model, or configure the model that made them",
            ", ".join(sorted(others)),
            model,
        )
    return others


def _base(name: str) -> str:
    return name.removesuffix("-int8")


def image_dimension(architecture: str) -> int:
    """The CLIP vector size of an open-clip architecture, read from open-clip's model config file without importing
    open-clip (that takes seconds): the image collection is created with it."""
    spec = importlib.util.find_spec("open_clip")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "model_configs" / f"{architecture}.json"
        try:
            return int(json.loads(path.read_text(encoding="utf-8"))["embed_dim"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return CLIP_DIMENSION


def make_embedder(config: Config) -> Embedder:
    """The text embedder the configuration names: ONNX Runtime by default, sentence-transformers on request."""
    settings = config.embedding
    if settings.backend == "torch":
        return SentenceTransformerEmbedder(
            settings.model_path,
            batch_size=settings.batch_size,
            threads=settings.threads,
            dimension=settings.dimension,
            max_tokens=settings.max_tokens,
        )
    from agent_memory.embeddings.onnx_text import OnnxMiniLmEmbedder

    return OnnxMiniLmEmbedder(
        settings.model_path,
        cache_dir=config.embedding_cache,
        batch_size=settings.batch_size,
        threads=settings.threads,
        query_precision=settings.query_precision,
        document_precision=settings.document_precision,
        dimension=settings.dimension,
        max_tokens=settings.max_tokens,
    )


def import_embedder(embedder: Embedder, config: Config) -> Embedder:
    """What a bulk import (`process_turns(..., bulk=True)`: `agent-memory ingest`) embeds what it stores with: the
    ONNX model's int8 document pass when `embedding.import_precision` is "int8", whose vectors the vector upgrade
    makes again in float32 while the store is idle (vector_upgrade.py); else `embedder` itself."""
    importer = getattr(embedder, "importer", None)
    if config.embedding.import_precision != "int8" or importer is None:
        return embedder
    made: Embedder = importer()
    return made


async def open_projection(path: Path, opener: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
    """Open a projection; when it cannot open (a crash left it unreadable), set it aside and start it afresh.

    The graph and the vectors are projections of SQLite, so nothing is lost: the caller rebuilds the fresh one.
    Returns the store and whether it must be rebuilt. A lock held by another process, or an engine whose own process
    cannot start (EngineUnavailable), is never set aside.
    """
    try:
        return await opener(), False
    except (StoreLocked, EngineUnavailable):
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
    clip = await asyncio.to_thread(image_dimension, config.image.architecture)
    dimensions = {"text": config.embedding.dimension, "image": clip, "context": config.embedding.dimension}
    if config.vectors.url:
        from agent_memory.storage.server_vectors import QdrantServerVectors

        return await QdrantServerVectors.open(
            config.vectors.url,
            api_key=config.vectors.api_key,
            prefix=config.vectors.collection_prefix,
            dimensions=dimensions,
        )
    from agent_memory.storage.vectors import EdgeVectors

    return await EdgeVectors.open(config.data_dir / "vectors", dimensions=dimensions)
