"""The raw log: append-only JSONL segments, byte-offset addressed, checksummed, crash-tolerant.

Every blocking file call runs on one owner thread, so the event loop never waits on the disk.

The one rewrite is an erase (eraser.py): each erased record's line becomes a tombstone of exactly its length (its
ids, no content, padded with spaces), so every other record keeps its offset. A segment is rewritten whole into a
temporary file, synced and renamed over the old one: after a crash it is either the old file or the new one.
`scan` passes over tombstones; `read` of one raises RecordErased.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

from agent_memory.errors import ClosedError, CorruptRecord, RecordErased, StorageError
from agent_memory.models import EmotionalContext, LogPosition, LogRecord, Role, TurnId, TurnRow
from agent_memory.note_models import meta_from_json

log = logging.getLogger(__name__)
T = TypeVar("T")
SCAN_CHUNK = 2048  # records per hop to the journal thread: a large log is never held in memory whole
SCAN_BUFFER = 1 << 20
"""Bytes a whole-log read takes from the file at once. With Python's 8 KiB, the reading thread let go of the GIL
for every 8 KiB and took it back: reading and decoding the 100k real-text store's log in a thread, the event loop
waited up to 60 ms at a time for it (43 waits over 20 ms, 1.41 s in all); with 1 MiB, 22-23 ms at most and 1-3
such waits."""
SEGMENT_RE = re.compile(r"^segment-(\d{8})\.jsonl$")
ERASING_SUFFIX = ".erasing"  # a segment being rewritten by an erase; left over only by a crash, and removed
TOMBSTONE_PREFIX = b'{"v":1,"erased":'


def segment_name(number: int) -> str:
    return f"segment-{number:08d}.jsonl"


def record_to_dict(record: LogRecord) -> dict[str, Any]:
    emotion = record.emotional_context.as_dict() if record.emotional_context else None
    return {
        "v": 1,
        "turn_id": record.turn_id,
        "namespace": record.namespace,
        "session_id": record.session_id,
        "turn_number": record.turn_number,
        "role": record.role.value,
        "content": record.content,
        "at": record.at.isoformat(),
        "emotional_context": emotion,
    } | (  # absent when empty: older lines stay valid
        ({"images": list(record.images)} if record.images else {})
        | ({"note": record.note.as_dict()} if record.note is not None else {})
    )


def checksum_of(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def logged_turn(record: LogRecord, position: LogPosition) -> TurnRow:
    """The turns row of a record the journal wrote at `position`, with the checksum its line carries."""
    return TurnRow(
        record.turn_id,
        record.namespace,
        record.session_id,
        record.turn_number,
        record.role,
        record.at,
        position,
        encode_record(record)[1],
    )


def encode_record(record: LogRecord) -> tuple[bytes, str]:
    body = record_to_dict(record)
    checksum = checksum_of(body)
    line = json.dumps({**body, "checksum": checksum}, ensure_ascii=False, separators=(",", ":"))
    return (line + "\n").encode("utf-8"), checksum


def is_tombstone(raw: bytes) -> bool:
    return raw.startswith(TOMBSTONE_PREFIX)


def encode_tombstone(record: LogRecord, erase_id: str, length: int) -> bytes:
    """The line that takes an erased record's place: its ids and time, no content, padded to `length` bytes. A
    record of a few words can be shorter than that whole tombstone (the erase id alone is 47 bytes): then fields
    are left out, the erase id first, down to the turn id, which every record is longer than."""
    body: dict[str, Any] = {
        "v": 1,
        "erased": erase_id,
        "turn_id": record.turn_id,
        "namespace": record.namespace,
        "session_id": record.session_id,
        "turn_number": record.turn_number,
        "role": record.role.value,
        "at": record.at.isoformat(),
    }
    for left_out in (None, "erased", "at", "role", "turn_number", "session_id", "namespace"):
        if left_out == "erased":
            body["erased"] = True
        elif left_out is not None:
            del body[left_out]
        line = json.dumps({**body, "checksum": checksum_of(body)}, ensure_ascii=False, separators=(",", ":"))
        raw = line.encode("utf-8")
        if len(raw) + 1 <= length:
            return raw + b" " * (length - len(raw) - 1) + b"\n"
    raise StorageError(f"A tombstone of {len(raw) + 1} bytes does not fit the {length}-byte record it replaces")


def decode_record(raw: bytes, where: str) -> LogRecord:
    if is_tombstone(raw):
        erase_id = json.loads(raw).get("erased")
        raise RecordErased(where, erase_id if isinstance(erase_id, str) else "unknown")
    try:
        data = json.loads(raw)
        stored = data.pop("checksum")
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecord(f"Log record at {where} is not a valid JSON record: {exc}") from exc
    if checksum_of(data) != stored:
        raise CorruptRecord(f"Log record at {where} fails its checksum")
    return LogRecord(
        turn_id=TurnId(data["turn_id"]),
        namespace=data["namespace"],
        session_id=data["session_id"],
        turn_number=int(data["turn_number"]),
        role=Role(data["role"]),
        content=data["content"],
        at=datetime.fromisoformat(data["at"]),
        emotional_context=EmotionalContext.from_mapping(data["emotional_context"]),
        checksum=stored,
        images=tuple(str(path) for path in data.get("images", ())),
        note=meta_from_json(data["note"]) if "note" in data else None,
    )


class JsonlJournal:
    """Append-only segments `logs/segment-NNNNNNNN.jsonl`; a record is addressed by (segment, offset, length).

    It also knows which of the records it appended are not yet indexed (`unsettled`): concurrent writers commit out
    of log order, so the manager asks `low_water()` where a recovery after a crash must start reading, and tells
    `settle()` which records a commit indexed."""

    def __init__(self, directory: Path, *, fsync: bool = True, segment_max_bytes: int = 64 << 20) -> None:
        self._dir = directory
        self._fsync = fsync
        self._max = segment_max_bytes
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="journal")
        self._segment = 0
        self._fd = -1
        self._size = 0
        self._closed = False
        self._unsettled: set[tuple[int, int]] = set()  # (segment, offset) of records appended, not yet settled
        self._end = (1, 0)  # where the next record goes: read from the event loop, written on the journal thread
        self._positions = threading.Lock()  # guards the two above: appends run on the journal's thread
        self._earlier_bytes = 0  # the size of every segment before the current one

    @classmethod
    async def open(cls, directory: Path, *, fsync: bool = True, segment_max_bytes: int = 64 << 20) -> JsonlJournal:
        journal = cls(directory, fsync=fsync, segment_max_bytes=segment_max_bytes)
        await journal._call(journal._open_sync)
        return journal

    async def _call(self, fn: Callable[..., T], /, *args: Any) -> T:
        if self._closed:
            raise ClosedError("Journal")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def segments(self) -> list[int]:
        found = (SEGMENT_RE.match(p.name) for p in self._dir.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def _open_sync(self) -> None:
        try:
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            for leftover in self._dir.glob(f"*{ERASING_SUFFIX}"):
                leftover.unlink()  # an erase's rewrite that a crash cut short: the segment itself is whole
            numbers = self.segments()
            self._segment = numbers[-1] if numbers else 1
            path = self._dir / segment_name(self._segment)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            self._size = self._repair_tail(path)
        except OSError as exc:
            raise StorageError(f"Cannot open the log in {self._dir}: {exc.strerror or exc}") from exc
        self._end = (self._segment, self._size)
        self._earlier_bytes = sum((self._dir / segment_name(n)).stat().st_size for n in numbers if n != self._segment)

    def _repair_tail(self, path: Path) -> int:
        """Cut a torn last line (a crash mid-write) and return the clean size."""
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):
            log.warning("journal: cutting a torn last record of %d bytes in %s", len(data) - keep, path.name)
        if keep > 0:
            start = data.rfind(b"\n", 0, keep - 1) + 1
            try:
                if not is_tombstone(data[start:keep]):
                    decode_record(data[start:keep], f"{path.name}:{start}")
            except CorruptRecord:
                log.warning("journal: cutting an unreadable last record at %s:%d", path.name, start)
                keep = start
        if keep < len(data):
            os.truncate(path, keep)
            os.fsync(self._fd)
        return keep

    async def append(self, record: LogRecord) -> LogPosition:
        raw, _ = encode_record(record)
        return await self._call(self._append_sync, raw)

    async def append_many(self, records: list[LogRecord]) -> list[LogPosition]:
        """Append a batch with one fsync at the end: every record is durable when this returns."""
        raws = [encode_record(r)[0] for r in records]
        return await self._call(self._append_many_sync, raws)

    def _append_many_sync(self, raws: list[bytes]) -> list[LogPosition]:
        positions = [self._write(raw) for raw in raws]
        if self._fsync and raws:
            os.fsync(self._fd)
        return positions

    def _append_sync(self, raw: bytes) -> LogPosition:
        position = self._write(raw)
        if self._fsync:
            os.fsync(self._fd)
        return position

    def _write(self, raw: bytes) -> LogPosition:
        if self._size and self._size + len(raw) > self._max:
            self._rotate()
        offset = self._size
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise StorageError(f"Cannot append to the log segment {self._segment}: {exc}") from exc
        self._size += len(raw)
        with self._positions:
            self._unsettled.add((self._segment, offset))
            self._end = (self._segment, self._size)
        return LogPosition(self._segment, offset, len(raw))

    def low_water(self, *, excluding: Iterable[LogPosition] = ()) -> tuple[int, int]:
        """(segment, offset) before which every record this journal appended is settled, leaving out `excluding`
        (the records the caller is committing now): where recovery must start if the process dies after that
        commit. With nothing unsettled, the end of the log."""
        left_out = {(p.segment, p.offset) for p in excluding}
        with self._positions:
            return min((p for p in self._unsettled if p not in left_out), default=self._end)

    def settle(self, positions: Iterable[LogPosition]) -> None:
        """These records are indexed: recovery need not read them again."""
        with self._positions:
            self._unsettled.difference_update((p.segment, p.offset) for p in positions)

    def _rotate(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
        self._earlier_bytes += self._size
        self._segment += 1
        path = self._dir / segment_name(self._segment)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = 0
        with self._positions:
            self._end = (self._segment, 0)
        dir_fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def read(self, position: LogPosition) -> LogRecord:
        return await self._call(self._read_sync, position)

    async def read_each(self, positions: Sequence[LogPosition]) -> list[LogRecord | None]:
        """The record at each position, in one hop to the journal's thread (a read each would queue each behind the
        appends); None where one cannot be read: erased meanwhile, or a damaged segment, which doctor reports."""
        return await self._call(self._read_each_sync, list(positions))

    def _read_each_sync(self, positions: list[LogPosition]) -> list[LogRecord | None]:
        records: list[LogRecord | None] = []
        for position in positions:
            try:
                records.append(self._read_sync(position))
            except StorageError as exc:
                log.debug("journal: the record at %s could not be read (%s)", position, exc)
                records.append(None)
        return records

    def _read_sync(self, position: LogPosition) -> LogRecord:
        path = self._dir / segment_name(position.segment)
        where = f"{path.name}:{position.offset}"
        try:
            with path.open("rb") as fh:
                fh.seek(position.offset)
                raw = fh.read(position.length)
        except OSError as exc:
            raise StorageError(f"Cannot read the log at {where}: {exc}") from exc
        if len(raw) != position.length or not raw.endswith(b"\n"):
            raise CorruptRecord(f"Log record at {where} is truncated ({len(raw)} of {position.length} bytes)")
        return decode_record(raw, where)

    async def scan(self, start: LogPosition | None = None) -> AsyncIterator[tuple[LogPosition, LogRecord]]:
        """Every record from `start` (inclusive) to the end, in log order, read in chunks on the journal's thread."""
        records = self._scan_sync(start)
        try:
            while chunk := await self._call(lambda: list(islice(records, SCAN_CHUNK))):
                for item in chunk:
                    yield item
        finally:
            if not self._closed:
                await self._call(records.close)

    def _scan_sync(self, start: LogPosition | None) -> Generator[tuple[LogPosition, LogRecord], None, None]:
        for number in self.segments():
            if start and number < start.segment:
                continue
            offset = start.offset if start and number == start.segment else 0
            with (self._dir / segment_name(number)).open("rb", buffering=SCAN_BUFFER) as fh:
                fh.seek(offset)
                for raw in fh:
                    if not raw.endswith(b"\n"):
                        break
                    position = LogPosition(number, offset, len(raw))
                    if not is_tombstone(raw):
                        yield position, decode_record(raw, f"{segment_name(number)}:{offset}")
                    offset += len(raw)

    async def erase(self, places: Iterable[tuple[LogPosition, str]], erase_id: str) -> int:
        """Replace each record at `places` (position, the turn id it must hold) by its tombstone, every segment
        rewritten atomically. Idempotent: a place that already holds a tombstone is left alone. Returns how many
        records were replaced. A place holding another turn means the caller's offsets are wrong: nothing is
        written and StorageError says where."""
        by_segment: dict[int, list[tuple[LogPosition, str]]] = {}
        for position, turn_id in places:
            by_segment.setdefault(position.segment, []).append((position, turn_id))
        replaced = 0
        for number, wanted in sorted(by_segment.items()):
            replaced += await self._call(self._erase_in_segment, number, wanted, erase_id)
        return replaced

    def _erase_in_segment(self, number: int, wanted: list[tuple[LogPosition, str]], erase_id: str) -> int:
        path = self._dir / segment_name(number)
        try:
            data = bytearray(path.read_bytes())
        except FileNotFoundError:
            return 0
        replaced = 0
        for position, turn_id in wanted:
            raw = bytes(data[position.offset : position.offset + position.length])
            where = f"{path.name}:{position.offset}"
            if is_tombstone(raw):
                continue
            record = decode_record(raw, where) if raw.endswith(b"\n") and len(raw) == position.length else None
            if record is None or record.turn_id != turn_id:
                raise StorageError(f"The log record at {where} is not turn {turn_id}: nothing was erased there")
            data[position.offset : position.offset + position.length] = encode_tombstone(
                record, erase_id, position.length
            )
            replaced += 1
        if replaced:
            self._replace_segment(path, bytes(data), current=number == self._segment)
        return replaced

    def _replace_segment(self, path: Path, data: bytes, *, current: bool) -> None:
        temporary = path.with_name(path.name + ERASING_SUFFIX)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        dir_fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        if current:  # the open descriptor still names the old file: appends must go to the new one
            os.close(self._fd)
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND, 0o600)

    async def contents(self, *, excluding: set[str]) -> list[str]:
        """The words of every record but tombstones and the turns in `excluding`, read without checking checksums
        (an erase's proof wants what the log holds, fast; doctor checks the checksums)."""
        return await self._call(self._contents_sync, excluding)

    def _contents_sync(self, excluding: set[str]) -> list[str]:
        found = []
        for number in self.segments():
            with (self._dir / segment_name(number)).open("rb", buffering=SCAN_BUFFER) as fh:
                for raw in fh:
                    if raw.endswith(b"\n") and not is_tombstone(raw):
                        try:
                            data = json.loads(raw)
                        except ValueError:
                            continue  # unreadable: doctor reports it; the scan still reads its bytes
                        if data.get("turn_id") not in excluding:
                            found.append(str(data.get("content", "")))
        return found

    def end_bytes(self) -> int:
        """The log's size as this journal has written it, read without touching the disk."""
        with self._positions:
            return self._earlier_bytes + self._end[1]

    def total_bytes(self) -> int:
        return sum((self._dir / segment_name(n)).stat().st_size for n in self.segments())

    async def aclose(self) -> None:
        if self._closed:
            return
        await self._call(self._close_sync)
        self._closed = True
        self._thread.shutdown(wait=True)

    def _close_sync(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
