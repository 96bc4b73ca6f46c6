from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder, default_model_path
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager

ROOT = Path(__file__).resolve().parents[1]
LOCAL_MODEL_SIZE = 128  # the size of `model_folder`'s vectors


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real all-MiniLM-L6-v2 (the default ONNX backend), loaded once for the whole run."""
    return make_embedder(load_config(ROOT / "config" / "default.toml", environ={}))


@pytest.fixture(scope="session")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sentence-transformers model of another size: MiniLM's shipped weights with a seeded 384 -> 128 dense
    projection and normalisation on top, saved as a folder the way a downloaded model is."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers 5.2 moved its modules; sentence_transformers.models still works, deprecated
        from sentence_transformers.sentence_transformer.modules import Dense, Normalize
    except ImportError:
        from sentence_transformers.models import Dense, Normalize  # type: ignore[no-redef,import-not-found]

    torch.manual_seed(7)
    base = SentenceTransformer(default_model_path(), device="cpu", local_files_only=True)
    dense = Dense(in_features=384, out_features=LOCAL_MODEL_SIZE, activation_function=torch.nn.Identity())
    folder = tmp_path_factory.mktemp("models") / "minilm-128"
    SentenceTransformer(modules=[*base, dense, Normalize()], device="cpu").save(str(folder))
    return folder


@pytest.fixture
def judging_config(tmp_path: Path) -> Config:
    """The shipped defaults: every turn judged by the save decision."""
    return load_config(ROOT / "config" / "default.toml", environ={}, data_dir=str(tmp_path / "data"))


@pytest.fixture
def config(judging_config: Config) -> Config:
    """For tests of storage and retrieval: every turn they write but a phatic one is kept (save.keep_all), so what
    they search for is there. The save decision is tested with `judging_config`."""
    return judging_config.model_copy(update={"save": judging_config.save.model_copy(update={"keep_all": True})})


@pytest.fixture
async def manager(config: Config, embedder: Embedder) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(config, embedder=embedder) as m:
        yield m


@pytest.fixture
async def judging(judging_config: Config, embedder: Embedder) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(judging_config, embedder=embedder) as m:
        yield m
