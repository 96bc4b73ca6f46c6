"""A sentence-transformers model of the user's own, from a local folder (`embedding.backend = "torch"`,
`embedding.model_path`, `embedding.dimension`): it loads with nothing downloaded, a size that disagrees with the
configuration is refused when it loads, and a store made by one model refuses a model of another size before any
vector collection opens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder, default_model_path
from agent_memory.engines import make_embedder
from agent_memory.errors import ConfigError, ModelError
from agent_memory.manager import MemoryManager

ROOT = Path(__file__).resolve().parents[1]
SIZE = 128


def model_config(tmp_path: Path, folder: Path, dimension: int) -> Config:
    environ = {
        "AGENT_MEMORY__EMBEDDING__BACKEND": "torch",
        "AGENT_MEMORY__EMBEDDING__MODEL_PATH": str(folder),
        "AGENT_MEMORY__EMBEDDING__DIMENSION": str(dimension),
        "AGENT_MEMORY__SAVE__KEEP_ALL": "true",
    }
    return load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(tmp_path / "data"))


async def test_a_local_model_folder_embeds_at_its_own_size(tmp_path: Path, model_folder: Path) -> None:
    embedder = make_embedder(model_config(tmp_path, model_folder, SIZE))
    try:
        vectors = await embedder.embed(["I moved to Porto on May 1.", "ok"])
        question = await embedder.embed_query("Where did I move?")
    finally:
        await embedder.aclose()
    assert embedder.name == "minilm-128"  # stored beside each vector: the store says which model made it
    assert vectors.shape == (2, SIZE) and question.shape == (SIZE,)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


async def refused_on_load(config: Config, message: str) -> None:
    """The configured embedder refuses to load with a ModelError matching `message`, and closes."""
    embedder = make_embedder(config)
    try:
        with pytest.raises(ModelError, match=message):
            await embedder.load()
    finally:
        await embedder.aclose()


async def test_a_model_of_another_size_than_configured_is_refused_when_it_loads(
    tmp_path: Path, model_folder: Path
) -> None:
    config = model_config(tmp_path, model_folder, 384)
    await refused_on_load(config, r"gives 128-dimensional vectors, and embedding.dimension is 384")


async def test_a_store_refuses_a_model_of_another_size_and_keeps_its_memories(
    config: Config, embedder: Embedder, tmp_path: Path, model_folder: Path
) -> None:
    async with MemoryManager.open(config, embedder=embedder) as manager:  # the shipped MiniLM: 384-dimensional vectors
        await manager.process_turn("s1", 1, "Our staging cluster runs Postgres 16 on port 5433.", role="user")
    other = model_config(tmp_path, model_folder, SIZE).model_copy(update={"data_dir": config.data_dir})
    with pytest.raises(ConfigError, match=r"holds 384-dimensional text vectors, and embedding.dimension is 128"):
        async with MemoryManager.open(other):
            pass
    async with MemoryManager.open(config, embedder=embedder) as manager:  # nothing was changed by the refused open
        found = await manager.retrieve("Which port does the staging Postgres use?", k=3)
    assert any("5433" in result.memory.content for result in found)


async def test_a_new_store_takes_the_local_models_vectors_and_finds_by_them(tmp_path: Path, model_folder: Path) -> None:
    async with MemoryManager.open(model_config(tmp_path, model_folder, SIZE)) as manager:
        await manager.process_turn("s1", 1, "The nightly backup job writes to the bucket cold-archive-eu.", role="user")
        await manager.process_turn("s1", 2, "Lunch today was a bowl of ramen near the office.", role="user")
        found = await manager.retrieve("where do the backups go", k=1)
        stored = await manager.records.text_vector_size()
    assert stored == SIZE
    assert "cold-archive-eu" in found[0].memory.content


def onnx_config(tmp_path: Path, folder: Path, dimension: int) -> Config:
    environ = {
        "AGENT_MEMORY__EMBEDDING__MODEL_PATH": str(folder),
        "AGENT_MEMORY__EMBEDDING__DIMENSION": str(dimension),
        "AGENT_MEMORY__EMBEDDING__CACHE_DIR": str(tmp_path / "cache"),
    }
    return load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(tmp_path / "data"))


async def test_the_onnx_backend_runs_a_mean_pooled_model_from_a_folder_under_its_own_name(
    tmp_path: Path, embedder: Embedder
) -> None:
    import shutil

    folder = tmp_path / "my-minilm"
    shutil.copytree(default_model_path(), folder)
    mine = make_embedder(onnx_config(tmp_path, folder, 384))
    try:
        vector = await mine.embed(["I moved to Porto."])
    finally:
        await mine.aclose()
    assert mine.name == "my-minilm" and embedder.name == "all-MiniLM-L6-v2"
    shipped = await embedder.embed(["I moved to Porto."])
    assert np.allclose(vector, shipped, atol=1e-6)  # the same weights give the same vector under either name
    assert list((tmp_path / "cache").glob("my-minilm-*-eager.onnx"))


async def test_the_onnx_backend_refuses_a_pipeline_it_would_embed_wrongly(tmp_path: Path, model_folder: Path) -> None:
    pipeline = r"is Transformer \+ Pooling \+ Normalize \+ Dense \+ Normalize: set embedding.backend"
    await refused_on_load(onnx_config(tmp_path, model_folder, SIZE), pipeline)
    wrong_size = onnx_config(tmp_path, Path(default_model_path()), 768)
    await refused_on_load(wrong_size, r"gives 384-dimensional vectors, and embedding.dimension is 768")


async def test_the_onnx_backend_reads_a_folder_saved_by_this_sentence_transformers(
    tmp_path: Path, embedder: Embedder
) -> None:
    """sentence-transformers 5.x writes its pooling config in a new form ("pooling_mode": "mean"); MiniLM's package
    ships the old one (pooling_mode_mean_tokens). Both are read, and the same weights give the same vector."""
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "resaved-minilm"
    SentenceTransformer(default_model_path(), device="cpu", local_files_only=True).save(str(folder))
    resaved = make_embedder(onnx_config(tmp_path, folder, 384))
    try:
        mine = await resaved.embed(["Deploys go out on Tuesdays."])
    finally:
        await resaved.aclose()
    theirs = await embedder.embed(["Deploys go out on Tuesdays."])
    assert float((mine * theirs).sum()) > 0.9999
