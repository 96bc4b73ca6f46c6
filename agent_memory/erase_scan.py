"""The erase proof: every file of the data directory scanned for the erased text, each distinctive 16-byte piece.

A needle is a 16-byte window of an erased text, at every byte offset, in each of the forms the stores write text:
UTF-8 as said, UTF-8 lower-cased, and JSON-escaped (both `ensure_ascii` forms: `\\u00e9` and raw UTF-8 with only
quotes, backslashes and control characters escaped). Matching folds ASCII case on both sides, so "Zebra" in a file
is found by "zebra". A window that some text the store keeps also contains ("i think that the") is not
distinctive, and leaves the needles first (`drop_shared`): what is left can only be found where erased text
survived. Anything the live corpus misses is reported as a hit, never hidden: the check errs towards failing.

The scan is vectorised: a file is read in chunks, each 16-byte window hashed from two unaligned 64-bit words, the
hashes prefiltered through a bitmap and matched against the sorted needle hashes, and every candidate compared
byte for byte. About a second per few hundred MB on one core. Pure: no store is touched; the caller runs it off
the event loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

WINDOW = 16
"""Bytes in a needle: the issue's "each distinctive substring of 16 bytes or more" (a longer surviving piece holds
a 16-byte one)."""
CHUNK = 16 << 20
"""Bytes of a file hashed at once (with WINDOW - 1 bytes of overlap)."""
SEPARATOR = b"\x00" * WINDOW
"""Between texts of a corpus, so no window spans two texts: no needle holds a NUL byte."""
_MIX = np.uint64(0x9E3779B97F4A7C15)
_MIX2 = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX3 = np.uint64(0x165667B19E3779F9)
_FLIP = np.uint64(0x5555555555555555)
_PREFIX_MIX = np.uint32(2654435761)
MAX_LOCATIONS = 20
"""Hit locations a report keeps (the count covers all)."""


def forms(text: str) -> list[bytes]:
    """The byte forms a text takes in the stores, ASCII case folded (the scan folds the files the same way)."""
    found = {
        text.encode("utf-8"),
        text.lower().encode("utf-8"),
        json.dumps(text, ensure_ascii=True)[1:-1].encode("ascii"),
        json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8"),
    }
    return sorted(form.lower() for form in found)


def _words(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views (no copy) of the 4-byte word and the two 8-byte words that start every window of `data`."""
    count = max(0, len(data) - WINDOW + 1)
    buffer = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(WINDOW, dtype=np.uint8)
    prefix = np.ndarray((count,), dtype="<u4", buffer=buffer, offset=0, strides=(1,))
    low = np.ndarray((count,), dtype="<u8", buffer=buffer, offset=0, strides=(1,))
    high = np.ndarray((count,), dtype="<u8", buffer=buffer, offset=8, strides=(1,))
    return prefix, low, high


def _hash(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two independent hashes of windows given by their two 8-byte words: a window is a needle when both match (a
    false match needs two 64-bit collisions at once)."""
    with np.errstate(over="ignore"):
        return low * _MIX + high, (low ^ _FLIP) * _MIX2 + high * _MIX3


def _bucket(prefix: np.ndarray, bits: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (prefix * _PREFIX_MIX) >> np.uint32(32 - bits)


class Needles:
    """The windows to look for, as two sorted hash arrays (a text of n bytes gives about 4n windows: 16n bytes),
    and a bitmap of their first four bytes that rules out most of a file's offsets cheaply."""

    def __init__(self, first: np.ndarray, second: np.ndarray, prefix: np.ndarray) -> None:
        order = np.lexsort((second, first))
        first, second, prefix = first[order], second[order], prefix[order]
        keep = np.ones(len(first), dtype=bool)
        keep[1:] = (first[1:] != first[:-1]) | (second[1:] != second[:-1])
        self._first, self._second, self._prefix = first[keep], second[keep], prefix[keep]
        self._bits = int(min(24, max(16, np.ceil(np.log2(max(len(self._first), 1))) + 4)))
        self._bitmap = np.zeros(1 << self._bits, dtype=bool)
        self._bitmap[_bucket(self._prefix, self._bits)] = True

    @classmethod
    def of(cls, texts: Iterable[str]) -> Needles:
        joined = SEPARATOR.join(form for text in texts for form in forms(text) if len(form) >= WINDOW)
        prefix, low, high = _words(joined)
        real = ~_spans_separator(joined) if joined else np.zeros(0, dtype=bool)
        first, second = _hash(low[real], high[real])
        return cls(first, second, prefix[real])

    def __len__(self) -> int:
        return len(self._first)

    def _matches(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Offsets in `data` where a needle is, and the needle's place in the sorted arrays."""
        none = np.zeros(0, dtype=np.int64)
        if not len(self._first) or len(data) < WINDOW:
            return none, none
        prefix, low, high = _words(data)
        maybe = np.flatnonzero(self._bitmap[_bucket(prefix, self._bits)])
        if not len(maybe):
            return none, none
        first, second = _hash(low[maybe], high[maybe])
        at = np.searchsorted(self._first, first).clip(0, len(self._first) - 1)
        same = (self._first[at] == first) & (self._second[at] == second)
        return maybe[same], at[same]

    def hits(self, data: bytes) -> np.ndarray:
        """Offsets in `data` (case folded) where a needle is."""
        return self._matches(data)[0]

    def drop_shared(self, texts: Iterable[str], *, batch_bytes: int = CHUNK) -> int:
        """Take out every window that one of `texts` (what the store keeps) also holds; returns how many went."""
        before = len(self)
        gone = np.zeros(len(self._first), dtype=bool)
        pending: list[bytes] = []
        size = 0
        for text in texts:
            for form in forms(text):
                pending.append(form)
                size += len(form) + WINDOW
            if size >= batch_bytes:
                gone[self._matches(SEPARATOR.join(pending))[1]] = True
                pending, size = [], 0
        if pending:
            gone[self._matches(SEPARATOR.join(pending))[1]] = True
        if gone.any():
            self.__init__(self._first[~gone], self._second[~gone], self._prefix[~gone])  # type: ignore[misc]
        return before - len(self)


def _spans_separator(data: bytes) -> np.ndarray:
    """For each window of `data`, whether it holds a NUL byte (a piece of the separator, never of a text)."""
    nul = np.frombuffer(data, dtype=np.uint8) == 0
    counts = np.concatenate(([0], np.cumsum(nul)))
    return (counts[WINDOW:] - counts[: len(counts) - WINDOW]) > 0


@dataclass(frozen=True)
class ScanReport:
    """What the proof scan read and found. `hits` must be 0."""

    files: int
    bytes: int
    hits: int
    needles: int
    locations: tuple[str, ...] = ()
    """The first hits as "path:offset", relative to the scanned directory."""
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds each step of the erase took (filled by the eraser)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "hits": self.hits,
            "needles": self.needles,
            "locations": list(self.locations),
            "steps": dict(self.steps),
        }


def scan_tree(root: Path, needles: Needles) -> ScanReport:
    """Every regular file under `root`, read whole in chunks, searched for every needle."""
    files = total = hits = 0
    locations: list[str] = []
    for path in sorted(_files(root)):
        try:
            found, size = _scan_file(path, needles)
        except FileNotFoundError:  # removed while the scan ran (a checkpoint, a temporary file): nothing to find
            continue
        files += 1
        total += size
        hits += len(found)
        name = path.relative_to(root).as_posix()
        locations += [f"{name}:{offset}" for offset in found[: max(0, MAX_LOCATIONS - len(locations))]]
    return ScanReport(files, total, hits, len(needles), tuple(locations))


def _files(root: Path) -> Iterable[Path]:
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                yield path


def _scan_file(path: Path, needles: Needles) -> tuple[list[int], int]:
    """The needles' offsets in one file, and the bytes read. A sparse file's holes (Qdrant Edge maps large files it
    has barely written) read as zeros and cannot hold a needle: they are passed over with SEEK_DATA/SEEK_HOLE."""
    found: list[int] = []
    read = 0
    with path.open("rb") as fh:
        for start, end in _data_regions(fh.fileno()):
            fh.seek(start)
            position, carry = start, b""
            while position < end and (chunk := fh.read(min(CHUNK, end - position))):
                data = carry + chunk.lower()
                base = position - len(carry)
                found += [base + int(i) for i in needles.hits(data)]
                position += len(chunk)
                read += len(chunk)
                carry = data[-(WINDOW - 1) :]
    return sorted(set(found)), read


def _data_regions(fd: int) -> list[tuple[int, int]]:
    """(start, end) of each part of the file that holds data; the whole file where holes cannot be asked for."""
    size = os.fstat(fd).st_size
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    regions, offset = [], 0
    try:
        while offset < size:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
            regions.append((start, end))
            offset = end
    except OSError:  # ENXIO: no data past offset
        pass
    return regions


def mask(data: bytes) -> bytes:
    """What an intent row keeps of the erased text: XORed with a random pad stored in front, so the database never
    holds it in the clear, not even while the erase is in flight (the scan would find it there)."""
    pad = os.urandom(32)
    return pad + _xor(data, pad)


def unmask(masked: bytes) -> bytes:
    return _xor(masked[32:], masked[:32])


def _xor(data: bytes, pad: bytes) -> bytes:
    stream = np.resize(np.frombuffer(pad, dtype=np.uint8), len(data))
    return (np.frombuffer(data, dtype=np.uint8) ^ stream).tobytes()
