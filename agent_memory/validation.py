"""Input checks at the API edge: every bad input gets a typed error before anything is written.

The ranges (the limits table in docs/daemon.md) keep every value within what the engines and the date arithmetic
take, so a value of the right type but out of range is an `InvalidInput` naming the field, the value and the
range, never an engine's error: JSON's exact integers end at 2**53 (SQLite's INTEGER at 2**63), a datetime's UTC
form must stay within years 1..9999 with room for the time words' arithmetic ("999 weeks ago", "next year"), and
a context budget sizes each layer's search."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_memory.errors import (
    ContentTooLarge,
    EmptyContent,
    InvalidEncoding,
    InvalidIdentifier,
    InvalidImage,
    InvalidInput,
)
from agent_memory.models import EmotionalContext, Role, TurnInput

IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")
IDENTIFIER_RULE = "1-128 characters of letters, digits and . _ : @ / -, starting with a letter or digit"
MAX_IMAGE_BYTES = 64 * 1024 * 1024
"""An encoded image larger than this is refused before it is read into memory twice (the pixel count is checked
when it is decoded: a decompression bomb is refused there)."""
MAX_TURN_NUMBER = 2**53 - 1
"""The largest integer every JSON parser holds exactly (a JavaScript number; the OpenAPI schema's float), well
within SQLite's 64-bit INTEGER."""
MAX_K = 1000
"""The most results one retrieval returns."""
MAX_BUDGET_TOKENS = 1_000_000
"""The largest context budget: each layer then searches budget/64 candidates (15,625)."""
MAX_PREPARED_TEXTS = 1024
"""The most texts embedded ahead of their turns that the write path keeps (`prepare_turns`: an import's next
batch, a live message), and so the most one call prepares."""
MAX_TURNS_PER_CALL = 1024
"""The most turns one `process_turns` call takes (one transaction), so its work on the event loop is bounded; a
larger history goes in batches (`agent-memory ingest` sends 64 at a time)."""
TURNS_PER_SLICE = 256
"""The turns a batch's loops on the event loop go through before they let other callers in (20-50 ms here)."""
EARLIEST_TIME = datetime(1000, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(8999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
TIME_RULE = "a timezone-aware time from 1000-01-01 to 8999-12-31 (UTC)"
SIGNATURES = (  # leading bytes -> the extension the store gives the file
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tif"),
    (b"MM\x00*", "tif"),
)


def check_identifier(field: str, value: object) -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise InvalidIdentifier(field, value, IDENTIFIER_RULE)
    return value


def check_content(content: object, *, max_bytes: int, limit_name: str = "max_content_bytes") -> str:
    """Decode, check UTF-8 and size; returns the text as it will be stored. `limit_name` is the config key the
    size error names."""
    if isinstance(content, bytes | bytearray | memoryview):
        raw = bytes(content)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEncoding(f"byte {exc.start}: {exc.reason}") from None
    elif isinstance(content, str):
        text = content
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidEncoding(f"character {exc.start} is a lone surrogate") from None
    else:
        raise InvalidInput(f"Turn content must be str or bytes, not {type(content).__name__}")
    if len(raw) > max_bytes:
        raise ContentTooLarge(len(raw), max_bytes, limit_name)
    if "\x00" in text:
        raise InvalidEncoding("it contains a NUL character")
    if not text.strip():
        raise EmptyContent()
    return text


def check_count(field: str, value: object, *, low: int, high: int) -> int:
    """`value` if it is an int (not a bool) from `low` to `high`, else InvalidInput naming the field, the value and
    the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer from {low}")
        raise InvalidInput(f"{field} must be {kind}, at most {high}; got {_shown(value)}")
    return value


def check_aware(field: str, value: object) -> datetime:
    """`value` in UTC if it is an aware datetime within EARLIEST_TIME..LATEST_TIME once in UTC."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"{field} must be a timezone-aware datetime, got {_shown(value)}")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-23:59 is in year 10000 once in UTC
        utc = None
    if utc is None or not EARLIEST_TIME <= utc <= LATEST_TIME:
        raise InvalidInput(f"{field} {value.isoformat()} is out of range: {TIME_RULE}")
    return utc


def check_time(at: object, *, default: datetime, field: str = "Turn time") -> datetime:
    if at is None:
        return default
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(f"{field} {_shown(at)} is not an ISO-8601 timestamp") from None
    if not isinstance(at, datetime):
        raise InvalidInput(f"{field} must be a datetime or ISO string, not {type(at).__name__}")
    if at.tzinfo is None:
        raise InvalidInput(f"{field} {at.isoformat()} has no timezone; pass an aware datetime (UTC)")
    return check_aware(field, at)


def _shown(value: object, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters (an int of 5,000 digits has no repr: Python refuses to make it)."""
    try:
        text = repr(value)
    except ValueError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_emotion(value: EmotionalContext | Mapping[str, Any] | None) -> EmotionalContext | None:
    if value is None or isinstance(value, EmotionalContext):
        return value
    try:
        return EmotionalContext.from_mapping(value)
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"Invalid emotional_context {value!r}: {exc}") from None


def check_images(images: object) -> tuple[bytes | Path, ...]:
    """A sequence of images, each encoded bytes or a pathlib.Path; the pixels are checked when they are decoded."""
    if images is None:
        return ()
    if isinstance(images, str | bytes | bytearray | Path) or not hasattr(images, "__iter__"):
        raise InvalidInput(f"images must be a list of bytes or pathlib.Path items, not {type(images).__name__}")
    items = tuple(images)
    for index, item in enumerate(items):
        if not isinstance(item, bytes | bytearray | Path):
            raise InvalidImage(f"#{index}", f"expected bytes or a pathlib.Path, got {type(item).__name__}")
    return tuple(bytes(i) if isinstance(i, bytearray) else i for i in items)


def read_image(index: int, item: bytes | Path) -> tuple[bytes, str]:
    """The image's bytes and a file name for it (blocking when it is a path: call it off the event loop)."""
    if isinstance(item, Path):
        try:
            size = item.stat().st_size
            if size <= MAX_IMAGE_BYTES:
                return item.read_bytes(), item.name
        except OSError as exc:
            raise InvalidImage(f"#{index} at {item}", exc.strerror or type(exc).__name__) from exc
        raise InvalidImage(f"#{index} at {item}", f"{size} bytes, over the limit of {MAX_IMAGE_BYTES}")
    if len(item) > MAX_IMAGE_BYTES:
        raise InvalidImage(f"#{index}", f"{len(item)} bytes, over the limit of {MAX_IMAGE_BYTES}")
    return item, ""


def image_extension(data: bytes) -> str:
    """The file extension for encoded image bytes, from their signature; 'img' for a format not listed."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return next((ext for signature, ext in SIGNATURES if data.startswith(signature)), "img")


def check_turn(turn: TurnInput, *, max_bytes: int, now: datetime) -> tuple[TurnInput, str, Role]:
    """The validated turn (with time and emotion normalised), its text and its role. `max_bytes` is the hard cap,
    `max_turn_bytes`: a turn under it but over `max_content_bytes` is taken, and remembered in chunks."""
    check_identifier("namespace", turn.namespace)
    check_identifier("session_id", turn.session_id)
    check_count("turn_number", turn.turn_number, low=0, high=MAX_TURN_NUMBER)
    try:
        role = Role(turn.role)
    except ValueError:
        raise InvalidInput(f"Unknown role {turn.role!r}; expected one of {[r.value for r in Role]}") from None
    text = check_content(turn.content, max_bytes=max_bytes, limit_name="max_turn_bytes")
    at = check_time(turn.at, default=now, field="at")
    emotion = check_emotion(turn.emotional_context)
    images = check_images(turn.images)
    normalised = TurnInput(
        turn.session_id, turn.turn_number, text, role.value, emotion, at, turn.namespace, images, note=turn.note
    )
    return normalised, text, role


def turn_from_mapping(data: Mapping[str, Any]) -> TurnInput:
    """A TurnInput from a JSON object, with a clear error for a missing or unknown key."""
    allowed = {"session_id", "turn_number", "content", "role", "emotional_context", "at", "namespace", "images"}
    if not isinstance(data, Mapping):
        raise InvalidInput(f"A turn must be a JSON object, not {type(data).__name__}")
    unknown = set(data) - allowed
    if unknown:
        raise InvalidInput(f"Unknown turn keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    missing = {"session_id", "turn_number", "content"} - set(data)
    if missing:
        raise InvalidInput(f"A turn is missing {sorted(missing)}")
    return TurnInput(**data)


def check_batch(count: int) -> None:
    """InvalidInput, naming the count, for a `process_turns` call over MAX_TURNS_PER_CALL turns."""
    if count > MAX_TURNS_PER_CALL:
        raise InvalidInput(
            f"{count} turns in one call, over the limit of {MAX_TURNS_PER_CALL}; send them in batches "
            "(agent-memory ingest sends 64 at a time); nothing was written"
        )
