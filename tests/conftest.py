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
def config(tmp_path: Path) -> Config:
    return load_config(ROOT / "config" / "default.toml", environ={}, data_dir=str(tmp_path / "data"))


@pytest.fixture
async def manager(config: Config, embedder: Embedder) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(config, embedder=embedder) as m:
        yield m
