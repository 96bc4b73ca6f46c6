from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real all-MiniLM-L6-v2 (the default ONNX backend), loaded once for the whole run."""
    return make_embedder(load_config(ROOT / "config" / "default.toml", environ={}))


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
