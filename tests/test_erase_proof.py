"""The erase proof harness, short form (issue #20): the eraser SIGKILLed at a random point, the next open finishing
the erase, and a byte search of every file. The 20-cycle run is `python scripts/erase_proof.py --cycles 20`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_memory.bench.erase_proof import main


def test_two_killed_erases_are_finished_on_the_next_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cycles", "2", "--seed", "5", "--data-dir", str(tmp_path / "data")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "cycles=2 erased=2 hits=0 divergent=0"
    assert all('"hits": []' in line for line in lines[:-1])
