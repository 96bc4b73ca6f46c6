from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import MiniLmEmbedder
from agent_memory.manager import MemoryManager

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedder() -> MiniLmEmbedder:
    """The real all-MiniLM-L6-v2, loaded once for the whole run (its thread outlives each manager)."""
    return MiniLmEmbedder()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load_config(ROOT / "config" / "default.toml", environ={}, data_dir=str(tmp_path / "data"))


@pytest.fixture
async def manager(config: Config, embedder: MiniLmEmbedder) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(config, embedder=embedder) as m:
        yield m
