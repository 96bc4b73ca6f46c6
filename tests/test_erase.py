"""Erase with proof (issue #20, section 4): every byte of the named words gone from every file, offsets intact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.erase_scan import Needles, forms, scan_tree
from agent_memory.errors import InvalidInput, MemoryErased, MemoryNotFound, RecordErased, TurnNotFound
from agent_memory.sleep.jobs import run_job

CANARY = "my locker code at the Zephyr-Quokka gym is 7731-ALBATROSS and nobody else knows it"
PIECES = ("zephyr-quokka gym is 7731", "7731-albatross and nobody")
SAUNA = "Also I really love the Zephyr-Quokka gym, its sauna is great."


def raw_hits(root: Path, pieces: tuple[str, ...] = PIECES) -> list[str]:
    """An independent check: plain byte search, case folded, of every file (sparse or not)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes().lower()
            found += [f"{path.name}:{piece}" for piece in pieces for form in forms(piece) if form in data]
    return found


async def fill(manager: MemoryManager, namespace: str = "default") -> str:
    for i in range(12):
        await manager.process_turn(
            "s1", i, f"I went hiking on day {i} with my sister Ana near the lake.", namespace=namespace
        )
    canary = await manager.process_turn("s1", 12, CANARY, namespace=namespace)
    await manager.process_turn("s1", 13, SAUNA, namespace=namespace)
    await manager.settle()
    return canary.turn_id


async def test_erase_removes_every_byte_and_proves_it(manager: MemoryManager, config: Config) -> None:
    turn_id = await fill(manager)
    before = await manager.retrieve("what is my locker code at the gym", k=3)
    assert CANARY in [hit.memory.content for hit in before]
    canary_memory = next(hit.memory.memory_id for hit in before if hit.memory.content == CANARY)
    assert raw_hits(config.data_dir)  # the check can fail: the words are there before
    assert manager.write_path.last_vector.recent(CANARY) is not None  # the write path's cache of recent texts holds it

    result = await manager.erase(turn_ids=[turn_id], reason="the user asked")

    assert result.proof.hits == 0 and result.proof.needles > 0 and result.proof.files > 5
    assert result.plan.memory_ids == (canary_memory,) and result.plan.log_records == 1
    assert raw_hits(config.data_dir) == []
    assert manager.write_path.last_vector.recent(CANARY) is None
    after = await manager.retrieve("what is my locker code at the gym 7731-ALBATROSS", k=5)
    assert CANARY not in [hit.memory.content for hit in after]
    assert any("sauna" in hit.memory.content for hit in after)  # the rest is intact
    with pytest.raises(MemoryErased, match="was erased"):
        await manager.get(canary_memory)
    report = await manager.doctor()
    assert report.consistent, report.disagreements


async def test_the_turn_after_an_erased_one_is_embedded_again_without_it(
    manager: MemoryManager, config: Config, embedder: Embedder
) -> None:
    """A short turn's vector holds the turn before it (write_path.py): after an erase, the next turn's vector is
    made again with the turn that now precedes it, so no vector keeps a trace of the erased words."""
    turn_id = await fill(manager)
    sauna, hiking = SAUNA, "I went hiking on day 11 with my sister Ana near the lake."
    own, canary, previous = await embedder.embed([sauna, CANARY, hiking])
    weight = config.embedding.previous_weight

    async def stored() -> np.ndarray:
        rows = await manager.records._fetch("SELECT embedding FROM memories WHERE content = ?", (sauna,))
        return np.frombuffer(rows[0][0], dtype=np.float32)

    assert np.allclose(await stored(), _unit(own + weight * canary), atol=1e-5)  # it held the erased turn
    await manager.erase(turn_ids=[turn_id], reason="the user asked")
    assert np.allclose(await stored(), _unit(own + weight * previous), atol=1e-5)
    found = await manager.retrieve("the gym with the great sauna", k=1)
    assert found[0].memory.content == sauna
    assert (await manager.doctor()).consistent  # the vector store took the new vector


def _unit(vector: np.ndarray) -> np.ndarray:
    return np.asarray(vector / np.linalg.norm(vector), dtype=np.float32)


async def test_other_records_keep_their_offsets_and_a_reopen_indexes_nothing(
    manager: MemoryManager, config: Config, embedder: Embedder
) -> None:
    turn_id = await fill(manager)
    turns = [t for t in await manager.records.turns() if t.turn_id != turn_id]
    await manager.erase(turn_ids=[turn_id], reason="the user asked")
    for turn in turns:
        assert (await manager.journal.read(turn.position)).turn_id == turn.turn_id
    await manager.close()
    async with MemoryManager.open(config, embedder=embedder) as again:
        assert again.recovered_turns == 0
        assert len(await again.records.turns()) == len(turns)
        assert raw_hits(config.data_dir) == []


async def test_a_dry_run_changes_nothing_and_the_scan_can_fail(manager: MemoryManager, config: Config) -> None:
    turn_id = await fill(manager)
    plan = await manager.erase_plan(turn_ids=[turn_id])
    assert plan.log_records == 1 and plan.text_bytes >= len(CANARY)
    assert len(await manager.records.turns()) == 14
    stray = config.data_dir / "notes.txt"
    stray.write_text(f"copied by hand: {CANARY.upper()}")
    result = await manager.erase(turn_ids=[turn_id], reason="the user asked")
    assert result.proof.hits > 0 and any(place.startswith("notes.txt:") for place in result.proof.locations)


async def test_bad_requests_are_refused_and_erase_nothing(manager: MemoryManager) -> None:
    turn_id = await fill(manager)
    with pytest.raises(InvalidInput, match="nothing was named"):
        await manager.erase(reason="why")
    with pytest.raises(InvalidInput, match="reason"):
        await manager.erase(turn_ids=[turn_id], reason=" ")
    with pytest.raises(InvalidInput, match="quotes the text"):
        await manager.erase(turn_ids=[turn_id], reason=f"remove '{CANARY}'")
    with pytest.raises(TurnNotFound):
        await manager.erase(turn_ids=["no-such-turn"], reason="why")
    with pytest.raises(MemoryNotFound):
        await manager.erase(memory_ids=["01a2351b-0000-7000-8000-000000000000"], reason="why")
    with pytest.raises(TurnNotFound):  # the turn lives in "default": another namespace cannot reach it
        await manager.erase(turn_ids=[turn_id], namespace="other", reason="why")
    assert len(await manager.records.turns()) == 14


async def test_a_digest_is_rewritten_without_the_erased_statement(manager: MemoryManager, config: Config) -> None:
    for i, text in enumerate(
        [
            "I love baking sourdough bread on Sundays.",
            "I love baking rye bread with caraway seeds, my grandmother's Qwertyuiop-Zxcv recipe.",
            "I love baking brioche bread for breakfast.",
            "I love baking banana bread when it rains.",
        ]
    ):
        await manager.process_turn(f"s{i}", 0, text)
    await manager.settle()
    await run_job(manager, "digest")
    digests = await manager.records.digest_memory_ids()
    assert digests
    secret = next(t for t in await manager.records.turns() if t.session_id == "s1")
    result = await manager.erase(turn_ids=[secret.turn_id], reason="family recipe")
    assert result.proof.hits == 0
    assert raw_hits(config.data_dir, ("grandmother's qwertyuiop", "qwertyuiop-zxcv recipe")) == []
    for digest in result.plan.digests_rewritten:
        text = (await manager.get(digest)).content
        assert "Qwertyuiop" not in text and "sourdough" in text


def test_the_scan_finds_every_form_and_skips_shared_windows(tmp_path: Path) -> None:
    needles = Needles.of(['she said "zebra quartz canary"\nat dawn in Zürich'])
    (tmp_path / "a.json").write_bytes(b'{"t":"she said \\"ZEBRA quartz canary\\"\\nat dawn in Z\\u00fcrich"}')
    (tmp_path / "b.bin").write_bytes(b"\x00" * 100 + "DAWN IN ZÜRICH".encode().lower() + b"at dawn in z\xc3\xbcrich")
    assert scan_tree(tmp_path, needles).hits > 10
    dropped = needles.drop_shared(["unrelated", 'quartz canary"\nat dawn'])
    assert dropped > 0 and scan_tree(tmp_path, needles).hits > 0


async def test_a_record_of_one_letter_takes_a_tombstone_of_its_length(manager: MemoryManager, config: Config) -> None:
    """Found by the HTTP fuzz: a tombstone with its erase id is longer than a record of a few words."""
    short = await manager.process_turn("s", 0, "x", namespace="n")
    await manager.process_turn("s", 1, "I like the Qwertz-Asdfg lighthouse very much indeed.", namespace="n")
    (turn,) = [t for t in await manager.records.turns() if t.turn_id == short.turn_id]
    result = await manager.erase(whole_namespace=True, namespace="n", reason="closed")
    assert result.proof.hits == 0 and result.plan.log_records == 2
    with pytest.raises(RecordErased, match="was erased"):
        await manager.journal.read(turn.position)
    assert await manager.records.turns() == []
