"""scripts/bench_doctor.py's measure (bench/doctor_stalls.py) on a small real store: it runs doctor on a copy and
reports what the copy held, and leaves the store it was given as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory.bench.doctor_stalls import main, run
from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

T0 = datetime(2023, 5, 8, 12, tzinfo=UTC)


async def test_doctor_stalls_measure_a_copy_of_the_store(tmp_path: Path, embedder: Embedder) -> None:
    store = tmp_path / "store"
    config = load_config(environ={}, data_dir=str(store), save__keep_all=True)
    async with MemoryManager.open(config, embedder=embedder) as manager:
        turns = [
            TurnInput("s1", n, f"Priya packed box {n} for the move to Porto.", at=T0 + timedelta(minutes=n))
            for n in range(6)
        ]
        await manager.process_turns(turns)
    before = sorted(p.name for p in store.rglob("*"))

    found = await run(store, 1)

    assert len(found) == 1 and found[0].consistent
    assert (found[0].memories, found[0].turns) == (6, 6)
    assert found[0].seconds > 0 and found[0].longest_wait_ms >= 0
    assert "| 6 memories, 6 turns |" in found[0].row()
    assert sorted(p.name for p in store.rglob("*")) == before  # measured on a copy


def test_the_script_refuses_a_folder_that_is_no_store(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as refused:
        main(["--store", str(tmp_path)])
    assert refused.value.code == 2
    assert "holds no memory.db" in capsys.readouterr().err
