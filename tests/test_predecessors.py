"""Turns that arrive out of order (predecessors.py): every short turn's vector is summed with the turn numbered just
below it in its session, as if the turns had come in order, whether the late turn came in the same batch, a later
call or after a restart; the vector of the turn above a late one is made again, in SQLite and in Qdrant Edge. Real
MiniLM, SQLite, Kuzu and Qdrant Edge in temporary directories."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import ModelError
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.scoring import with_previous
from agent_memory.storage.outbox import TEXT

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2023, 5, 8, 12, tzinfo=UTC)
SAID = [  # (session, turn number, words): short turns, a phatic one, a long one
    ("s1", 1, "Priya: I started learning the cello last month."),
    ("s1", 2, "Thanks!"),
    ("s1", 3, "It is bright orange, the new cello case."),
    ("s1", 4, "Tom: " + "The movers said the piano goes first, then the boxes of sheet music. " * 10),
    ("s1", 5, "Priya: Is it heavy to carry?"),
    ("s1", 6, "Tom: Not very."),
    ("s2", 1, "Tom: I am looking at flats near the river now."),
    ("s2", 2, "Priya: The dog and I went running on the beach."),
    ("s2", 3, "Tom: Which beach, the one by the pier?"),
]


def config_of(data_dir: Path) -> Config:
    environ = {"AGENT_MEMORY__SAVE__KEEP_ALL": "true"}
    return load_config(ROOT / "config" / "default.toml", environ=environ, data_dir=str(data_dir))


def said(order: Sequence[int]) -> list[TurnInput]:
    return [TurnInput(SAID[i][0], SAID[i][1], SAID[i][2], at=T0) for i in order]


async def vectors(manager: MemoryManager) -> dict[str, np.ndarray]:
    rows = await manager.records._fetch("SELECT content, embedding FROM memories WHERE length(embedding) > 0")
    return {str(r[0]): np.frombuffer(r[1], dtype=np.float32).copy() for r in rows}


async def fed(
    data_dir: Path, embedder: Embedder, *calls: Sequence[int], restart: bool = False
) -> dict[str, np.ndarray]:
    """The vectors of a store fed `calls` (each a batch of SAID's indexes), reopened between calls if `restart`."""
    if restart:
        for batch in calls:
            async with MemoryManager.open(config_of(data_dir), embedder=embedder) as manager:
                await manager.process_turns(said(batch))
    async with MemoryManager.open(config_of(data_dir), embedder=embedder) as manager:
        for batch in () if restart else calls:
            await manager.process_turns(said(batch))
        await manager.flush()
        found = await vectors(manager)
        for text, vector in found.items():  # the projection holds what SQLite holds
            hit = (await manager.vectors.search(TEXT, vector.tolist(), limit=1))[0]
            assert hit.score > 0.9999 and (await manager.records.get_memory(hit.memory_id)).content == text
        return found


async def test_turns_sent_out_of_order_get_the_vectors_they_would_get_in_order(
    tmp_path: Path, embedder: Embedder
) -> None:
    in_order = await fed(tmp_path / "in-order", embedder, range(len(SAID)))
    assert len(in_order) == len(SAID) - 1  # "Thanks!" is no memory
    own = dict(zip([t for *_, t in SAID], await embedder.embed([t for *_, t in SAID]), strict=True))
    weight = config_of(tmp_path).embedding.previous_weight
    assert np.allclose(in_order[SAID[2][2]], with_previous(own[SAID[2][2]], own["Thanks!"], weight), atol=1e-5)
    assert np.allclose(in_order[SAID[5][2]], with_previous(own[SAID[5][2]], own[SAID[4][2]], weight), atol=1e-5)
    assert np.allclose(in_order[SAID[4][2]], own[SAID[4][2]], atol=1e-5)  # after the long turn: alone
    orders = {
        "one batch, reversed": [list(reversed(range(len(SAID))))],
        "one turn a call, shuffled": [[i] for i in (5, 2, 8, 0, 4, 6, 1, 3, 7)],
        "the higher turns first, in two batches": [[2, 5, 7, 8], [0, 1, 3, 4, 6]],
    }
    for name, calls in orders.items():
        got = await fed(tmp_path / name, embedder, *calls)
        assert got.keys() == in_order.keys(), name
        for text, vector in in_order.items():
            assert np.allclose(got[text], vector, atol=1e-5), (name, text)
    restarted = await fed(tmp_path / "restart", embedder, [5, 8], [0, 2, 4], [1, 3, 6, 7], restart=True)
    for text, vector in in_order.items():  # a late turn after a restart: the cache is empty, SQLite answers
        assert np.allclose(restarted[text], vector, atol=1e-5), ("restart", text)


async def test_a_turn_sent_in_order_makes_no_vector_again(tmp_path: Path, embedder: Embedder) -> None:
    """The common case costs nothing: turns in order, in any batches, replace no stored vector."""
    async with MemoryManager.open(config_of(tmp_path), embedder=embedder) as manager:
        await manager.process_turns(said([0, 1, 2]))
        before = await vectors(manager)
        outbox = await manager.records._fetch("SELECT count(*) FROM outbox")
        await manager.process_turns(said([3, 4, 5, 6, 7, 8]))
        after = await vectors(manager)
        added = await manager.records._fetch("SELECT count(*) FROM outbox")
    assert all(np.array_equal(after[text], vector) for text, vector in before.items())
    assert added[0][0] - outbox[0][0] == len(after) - len(before)  # one row per new memory, none for an old one


class RefusingEmbedder:
    """The real embedder, passed through, but refusing any call that holds `refused` (a fault, not a stand-in)."""

    def __init__(self, inner: Embedder, refused: str) -> None:
        self.inner, self.refused = inner, refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.refused in texts:
            raise ModelError(f"refused to embed {self.refused!r}")
        return await self.inner.embed(texts)


async def test_a_late_turn_is_committed_when_the_vector_after_it_cannot_be_made_again(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """The turns are in SQLite before the turn above a late one is embedded again: a model failure then is logged,
    and the vector it could not make stays as it was written."""
    async with MemoryManager.open(config_of(tmp_path), embedder=embedder) as manager:
        await manager.process_turns(said([5]))  # turn 6, alone in its session for now; turn 5 comes late
        written = await vectors(manager)
    refusing = RefusingEmbedder(embedder, SAID[5][2])  # only making turn 6's vector again embeds its words
    async with MemoryManager.open(config_of(tmp_path), embedder=refusing) as manager:
        with caplog.at_level(logging.ERROR, logger="agent_memory.write_path"):
            [result] = await manager.process_turns(said([4]))
        after = await vectors(manager)
    assert result.memory_id is not None and SAID[4][2] in after
    assert np.array_equal(after[SAID[5][2]], written[SAID[5][2]])  # in order, it would be summed with turn 5
    assert "arrived late were not made again" in caplog.text and "refused to embed" in caplog.text
