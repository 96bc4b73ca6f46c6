"""The crash test, as the suite runs it: 5 cycles of SIGKILL at random moments, nothing acknowledged lost."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_five_sigkill_cycles_lose_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "crash_test.py"),
            "--cycles",
            "5",
            "--seed",
            "20261129",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    last = done.stdout.strip().splitlines()[-1]
    found = re.fullmatch(r"cycles=(\d+) acknowledged=(\d+) lost=(\d+) divergent=(\d+)", last)
    assert found, done.stdout + done.stderr
    cycles, acknowledged, lost, divergent = map(int, found.groups())
    assert (cycles, lost, divergent) == (5, 0, 0), done.stdout
    assert acknowledged > 0, "the children acknowledged nothing, so nothing was tested"
    assert done.returncode == 0
