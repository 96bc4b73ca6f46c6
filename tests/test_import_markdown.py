"""`agent-memory import-markdown`: a notes folder written as one note per section through the daemon (started
for it), with kinds and sources, and a second import that writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_memory.interfaces import autostart
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.client import find_daemon
from agent_memory.note_models import Note
from agent_memory.project import project_namespace

LONG = "\n\n".join(f"Step {i}: " + "run the release script and check the output. " * 8 for i in range(12))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A repository with notes, the current directory; its data directory, whose daemon is stopped afterwards."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "docs" / "decisions").mkdir(parents=True)
    (root / "docs" / "runbooks").mkdir(parents=True)
    (root / "CLAUDE.md").write_text("Read me first.\n\n# Project\n\n## Build\n\nRun `make`.\n\n## Empty\n")
    (root / "docs" / "decisions" / "0001-sqlite.md").write_text("# Use SQLite\n\nOne file, WAL.\n")
    (root / "docs" / "runbooks" / "release.md").write_text(f"# Release\n\n{LONG}\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.md").write_text("# Not me\n\nhidden\n")
    monkeypatch.chdir(root)
    data_dir = tmp_path / "mem"
    try:
        yield root, data_dir
    finally:
        autostart.stop_daemon(data_dir)  # the daemon this process started: stopped and reaped


async def _notes(data_dir: Path, namespace: str) -> list[Note]:
    client = await find_daemon(data_dir)
    assert client is not None
    async with client:
        page = await client.notes.list_notes(namespace=namespace, limit=100)
    return page.notes


def test_import_writes_one_note_per_section_once(
    project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, data_dir = project
    argv = ["import-markdown", ".", "--data-dir", str(data_dir), "--max-chars", "1000"]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "CLAUDE.md: 2 notes" in out and ".hidden" not in out
    assert not data_dir.exists()  # a dry run starts no daemon and writes nothing
    assert main(argv) == 0
    first = capsys.readouterr().out
    namespace = project_namespace(root)
    notes = asyncio.run(_notes(data_dir, namespace))
    written = int(first.split(": ")[1].split(" notes written")[0])
    assert len(notes) == written > 4 and f"{namespace!r}" in first and "1 sections split" in first
    by_text = {n.memory.content.split("\n\n", 1)[0]: n for n in notes}
    build = by_text["CLAUDE.md > Project > Build"]
    assert build.memory.content == "CLAUDE.md > Project > Build\n\nRun `make`."
    assert (build.meta.kind.value, build.meta.source and build.meta.source.as_dict()) == (
        "note",
        {"path": "CLAUDE.md", "line": 5},
    )
    assert by_text["docs/decisions/0001-sqlite.md > Use SQLite"].meta.kind.value == "decision"
    parts = [n for t, n in by_text.items() if t.startswith("docs/runbooks/release.md > Release (part ")]
    assert len(parts) > 1 and {n.meta.kind.value for n in parts} == {"procedure"}
    assert all(len(n.memory.content) <= 1000 for n in notes)
    assert main(argv) == 0
    assert f"0 notes written, {written} already there" in capsys.readouterr().out
    assert len(asyncio.run(_notes(data_dir, namespace))) == written


def test_a_missing_path_is_refused(project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, data_dir = project
    assert main(["import-markdown", "nowhere", "--data-dir", str(data_dir)]) == 2
    assert "No file or folder at nowhere" in capsys.readouterr().err
