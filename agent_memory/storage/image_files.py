"""Image files in the data directory: read and checked on the way in, then written whole and fsynced before the
transaction that names them commits. Names are content hashes, so the same image shared twice is one file."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent_memory.validation import image_extension, read_image

IMAGES_DIR = "images"
"""Where the store keeps the images it remembers, under data_dir: `<sha256>.<ext>`, one file per distinct image."""


def read_for_store(index: int, item: bytes | Path) -> tuple[bytes, str, str, str]:
    """The bytes, their SHA-256, where the store keeps them, and the label an uncaptioned image memory gets."""
    data, name = read_image(index, item)
    sha256 = hashlib.sha256(data).hexdigest()
    file_name = f"{sha256}.{image_extension(data)}"
    return data, sha256, f"{IMAGES_DIR}/{file_name}", f"[image] {name or file_name}"


def write_files(root: Path, files: Mapping[str, bytes]) -> None:
    """Write each file (a path relative to `root`) whole: to a temporary name, fsynced, renamed; then fsync its
    folder. The names are content hashes, so a file already there holds these bytes and is left alone."""
    folders = set()
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folders.add(path.parent)
        if path.is_file() and path.stat().st_size == len(data):
            continue
        fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(partial, path)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    for folder in folders:
        folder_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(folder_fd)
        finally:
            os.close(folder_fd)


def stored_files(root: Path) -> dict[str, float]:
    """Every file under root/images (temporary ones a crashed write left too), relative to root, with the time it
    was last written (seconds since the epoch)."""
    folder = root / IMAGES_DIR
    if not folder.is_dir():
        return {}
    return {f"{IMAGES_DIR}/{p.name}": p.stat().st_mtime for p in folder.iterdir() if p.is_file()}


def remove_files(root: Path, relative: Iterable[str]) -> int:
    """Delete these files (paths relative to root); returns how many were there."""
    removed = 0
    for name in relative:
        path = root / name
        if path.is_file():
            path.unlink()
            removed += 1
    return removed
