"""The faces that talk to the daemon stay light (issue #23): importing the CLI or the daemon's client, and a CLI
command answered by a live daemon, import no engine and no model. Each check runs in a fresh interpreter, since
this test process has imported everything already."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample_conversation.jsonl"
HEAVY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "kuzu",
    "qdrant_edge",
    "qdrant_client",
    "aiosqlite",
    "litellm",
    "onnxruntime",
    "open_clip",
    "numpy",
    "agent_memory.manager",
    "httpcore",  # httpx's default transport (h2, anyio, a CA bundle): the client talks plain HTTP without it
    "h2",
)
RUN_CLI = f"""
import json, sys
from agent_memory.interfaces.cli import main
code = main(sys.argv[1:])
print("HEAVY=" + json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr)
sys.exit(code)
"""
"""`agent-memory ARGS` in this interpreter, then the heavy modules it imported, as the last line of stderr."""


def _heavy_after(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = subprocess.run([sys.executable, "-c", RUN_CLI, *args], capture_output=True, text=True, timeout=180, cwd=cwd)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert last.startswith("HEAVY="), done.stderr
    heavy: list[str] = json.loads(last.removeprefix("HEAVY="))
    return done, heavy


def test_importing_the_cli_and_the_client_loads_no_engine(tmp_path: Path) -> None:
    code = (
        "import json, sys, agent_memory.interfaces.cli, agent_memory.interfaces.client\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_manager_is_still_a_public_name_once_asked_for(tmp_path: Path) -> None:
    code = "import sys, agent_memory; from agent_memory import MemoryManager; print(MemoryManager.__module__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.stdout.strip() == "agent_memory.manager", done.stderr


@pytest.fixture(scope="module")
def daemon_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data directory owned by a real `agent-memory serve --port 0`, stopped after the module's tests."""
    root = tmp_path_factory.mktemp("light")
    data_dir = root / "mem"
    command = [sys.executable, "-m", "agent_memory.interfaces.cli", "--data-dir", str(data_dir), "serve", "--port", "0"]
    with (root / "daemon.err").open("w+") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=root)
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 90)
            line = proc.stdout.readline() if ready else ""
            assert line.startswith("agent-memory: serving"), f"the daemon did not start: {line!r}"
            yield data_dir
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=60)
            assert proc.stdout is not None
            proc.stdout.close()
            err.seek(0)
            sys.stderr.write(err.read())  # shown by pytest when a test fails


def test_commands_through_a_live_daemon_import_no_engine(daemon_dir: Path, tmp_path: Path) -> None:
    done, heavy = _heavy_after(["--data-dir", str(daemon_dir), "ingest", str(SAMPLE)], tmp_path)
    assert done.returncode == 0 and "ingested 54 turns" in done.stdout, done.stderr
    assert heavy == []
    done, heavy = _heavy_after(["--data-dir", str(daemon_dir), "search", "what was the 10k race time?"], tmp_path)
    assert done.returncode == 0 and "48:37" in done.stdout, done.stderr
    assert heavy == []


def test_the_direct_path_does_import_the_engines(tmp_path: Path) -> None:
    """The control: with no daemon the same wrapper sees the engines, so the check above can fail. (Kuzu itself is
    imported only by the graph's worker process, storage/graph_engine.py.)"""
    done, heavy = _heavy_after(["--data-dir", str(tmp_path / "mem"), "stats", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert {"qdrant_edge", "aiosqlite", "agent_memory.manager"} <= set(heavy) and "kuzu" not in heavy
