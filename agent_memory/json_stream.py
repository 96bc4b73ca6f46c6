"""The items of a JSON file that is one large array, read one item at a time.

A chat export (ChatGPT's or Claude's `conversations.json`) or a benchmark file is a single JSON list that can run
to hundreds of megabytes. `array_items` decodes it item by item from a file (gzip when it ends in .gz, a file in a
zip when it ends in .zip), so memory holds the item being read and a read-ahead of CHUNK bytes, never the whole
document. Errors are InvalidInput and name the file and where: the line and column of malformed JSON, the byte and
line of text that is not UTF-8.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import json
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agent_memory.errors import InvalidInput

CHUNK = 1 << 20
"""Bytes read at a time; an item larger than the text buffered is read in reads as large as the buffer, so a long
item is decoded a bounded number of times over (the buffer at least doubles between two tries)."""
_WHITESPACE = " \t\n\r"
_ENDS_NUMBER = frozenset(_WHITESPACE + ",]}")
_KINDS = {"{": "an object", '"': "a string", "t": "a boolean", "f": "a boolean", "n": "null"}


READ_ERRORS = (OSError, EOFError, zlib.error, zipfile.BadZipFile)
"""What reading a file can raise beyond a decode: an I/O error, a truncated or corrupt gzip stream (BadGzipFile is an
OSError), a zip member whose checksum fails."""


@contextlib.contextmanager
def open_input(path: Path, member: str | None = None) -> Iterator[IO[bytes]]:
    """`path` opened for reading bytes: gunzipped when it ends in .gz; for a .zip (an export as downloaded), its file
    named `member` in any folder of it, or with no `member` its one JSON or JSONL file. InvalidInput when it cannot
    be opened, says why, and for a zip without the file, what the zip holds."""
    if path.suffix.lower() == ".zip":
        with _zip_member(path, member) as fh:
            yield fh
        return
    try:
        opened: Any = gzip.GzipFile(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError as exc:
        raise _cannot_open(path, exc) from None
    with opened:
        yield opened


def zip_holds(path: Path, member: str) -> bool:
    """Whether `path` is a readable .zip with a file named `member` in any folder (what open_input would open)."""
    if path.suffix.lower() != ".zip":
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return any(_named(info.filename, member) for info in archive.infolist() if not info.is_dir())
    except (OSError, zipfile.BadZipFile):
        return False  # open_input says what is wrong with it


def _named(name: str, member: str) -> bool:
    return name.rsplit("/", 1)[-1] == member


def _cannot_open(path: Path, exc: OSError) -> InvalidInput:
    if isinstance(exc, FileNotFoundError):
        return InvalidInput(f"Cannot read {path}: no such file")
    if isinstance(exc, IsADirectoryError):
        return InvalidInput(f"Cannot read {path}: it is a directory, not a file")
    return InvalidInput(f"Cannot read {path}: {exc.strerror or exc}")


@contextlib.contextmanager
def _zip_member(path: Path, member: str | None) -> Iterator[IO[bytes]]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InvalidInput(f"Cannot read {path}: not a zip file ({exc})") from None
    except OSError as exc:
        raise _cannot_open(path, exc) from None
    with archive:
        names = [info.filename for info in archive.infolist() if not info.is_dir()]
        if member:
            found = [name for name in names if _named(name, member)]
        else:
            found = [name for name in names if name.lower().endswith((".json", ".jsonl"))]
        if len(found) != 1:
            wanted = f"a file named {member}" if member else "one JSON or JSONL file"
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            has = f"{len(found)} of them" if found else f"none (it holds: {shown or 'nothing'})"
            raise InvalidInput(f"{path.name}: expected {wanted} in the zip, found {has}")
        try:
            opened = archive.open(found[0])
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:  # unknown compression, encrypted
            raise InvalidInput(f"Cannot read {found[0]} in {path}: {exc}") from None
        with opened:
            yield opened


def array_items(path: Path, what: str, *, member: str | None = None, chunk: int = CHUNK) -> Iterator[tuple[int, Any]]:
    """Each item of the JSON list in `path` (or in its zip's `member`: open_input), numbered from 1. `what` names the
    items in errors ("expected a JSON list of conversations"). A UTF-8 byte order mark is allowed. `chunk`: bytes
    read at a time."""
    with open_input(path, member) as raw:
        reader = _Reader(path, raw, chunk)
        if reader.next_char() != "[":
            found = reader.next_char()
            kind = "nothing" if found == "" else _KINDS.get(found, "a number" if found in "-0123456789" else "")
            if not kind:
                reader.malformed("expected '['")
            raise InvalidInput(f"{path.name}: expected a JSON list of {what}, got {kind}")
        reader.pos += 1
        number = 0
        if reader.next_char() == "]":
            reader.pos += 1
        else:
            while True:
                number += 1
                yield number, reader.value()
                separator = reader.next_char()
                reader.pos += 1
                if separator == "]":
                    break
                if separator != ",":
                    reader.pos -= 1
                    reader.malformed(f"expected ',' or ']' after item {number}")
        if reader.next_char() != "":
            reader.malformed("extra data after the list")


def _may_go_on(item: Any, text: str, end: int) -> bool:
    """True when `item` is a number that the text read so far may cut short ("-45" of "-4500.5"): one not followed
    by a character that ends a number. Every other JSON value ends with a character of its own."""
    number = isinstance(item, (int, float)) and not isinstance(item, bool)
    return number and (end == len(text) or text[end] not in _ENDS_NUMBER)


class _Reader:
    """A window of decoded text over the file, with the line and column of its first character kept, so an error
    anywhere can name its place in the file."""

    def __init__(self, path: Path, raw: IO[bytes], chunk: int) -> None:
        self.path, self.raw, self.chunk = path, raw, chunk
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()  # drops a byte order mark
        self.text, self.pos = "", 0
        self.line, self.column = 1, 0  # of self.text[0]: its line, and the characters before it on that line
        self.eof = False
        self._json = json.JSONDecoder()

    def next_char(self) -> str:
        """The next character that is not whitespace, left unread; "" at the end of the file."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text) or not self._more():
                return self.text[self.pos] if self.pos < len(self.text) else ""

    def value(self) -> Any:
        """The JSON value at the read position, read whole (more text is read until it is complete)."""
        self.next_char()
        self._drop_read()
        while True:
            try:
                item, end = self._json.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self._more(len(self.text) - self.pos):
                    continue
                self.pos = exc.pos
                self.malformed(exc.msg)
            if not _may_go_on(item, self.text, end) or not self._more(len(self.text) - self.pos):
                self.pos = end
                return item

    def malformed(self, message: str) -> None:
        before = self.text[: self.pos]
        newlines = before.count("\n")
        column = self.pos - before.rfind("\n") if newlines else self.column + self.pos + 1
        raise InvalidInput(f"{self.path.name} line {self.line + newlines} column {column}: malformed JSON ({message})")

    def _more(self, at_least: int = 0) -> bool:
        """Read on (at least as much as `at_least` characters, so a long item is tried again a bounded number of
        times); False at the end of the file."""
        if self.eof:
            return False
        try:
            chunk = self.raw.read(max(self.chunk, at_least))
        except READ_ERRORS as exc:
            raise InvalidInput(f"Cannot read {self.path}: {exc}") from exc
        self.eof = not chunk
        try:
            self.text += self.decoder.decode(chunk, final=self.eof)
        except UnicodeDecodeError as exc:
            bad = exc.object[exc.start] if exc.start < len(exc.object) else 0
            line = self.line + self.text.count("\n") + exc.object.count(b"\n", 0, exc.start)
            raise InvalidInput(f"{self.path.name} is not valid UTF-8 (byte 0x{bad:02x} on line {line})") from None
        return not self.eof

    def _drop_read(self) -> None:
        """Forget the text before the read position once it is a chunk long, keeping its line and column."""
        if self.pos < self.chunk:
            return
        gone = self.text[: self.pos]
        newlines = gone.count("\n")
        self.line += newlines
        self.column = self.pos - gone.rfind("\n") - 1 if newlines else self.column + self.pos
        self.text, self.pos = self.text[self.pos :], 0
