"""Readers that turn conversation files into TurnInputs: our JSONL, LoCoMo, LongMemEval, and ChatGPT's and
Claude's exports (chat_exports.py).

The benchmark files are read from wherever the user keeps them; nothing of them is copied or shipped.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from agent_memory.chat_exports import EXPORT_FILE, chatgpt_turns, claude_turns
from agent_memory.errors import InvalidInput
from agent_memory.json_stream import READ_ERRORS, array_items, open_input, zip_holds
from agent_memory.models import TurnInput
from agent_memory.validation import turn_from_mapping

LOCOMO_TIME = "%I:%M %p on %d %B, %Y"


def read_json(path: Path) -> Any:
    """The JSON document in `path` (gzip when it ends in .gz, the one JSON file of a .zip; a UTF-8 byte order mark is
    allowed). InvalidInput names the file and, for bad bytes or bad JSON, the line."""
    with open_input(path) as fh:
        raw = _read_all(path, fh)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InvalidInput(f"{path.name} is not valid UTF-8 (byte 0x{raw[exc.start]:02x} on line {line})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path.name} line {exc.lineno} column {exc.colno}: malformed JSON ({exc.msg})") from None


def read_jsonl(path: Path) -> Iterator[TurnInput]:
    """One turn per line (blank lines skipped; a UTF-8 byte order mark is allowed). InvalidInput names the line."""
    with open_input(path) as fh:
        for number, raw in enumerate(_lines(path, fh), 1):
            line = _decode_line(path, number, raw[3:] if number == 1 and raw.startswith(codecs.BOM_UTF8) else raw)
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path.name} line {number}: malformed JSON ({exc.msg}){_hint(line)}") from None
            try:
                yield turn_from_mapping(data)
            except InvalidInput as exc:
                raise InvalidInput(f"{path.name} line {number}: {exc}{_hint(line)}") from None


def _hint(line: str) -> str:
    """For a line that opens a JSON list: the formats that are one (a chat export is the likeliest)."""
    if not line.lstrip().startswith("["):
        return ""
    return (
        "; this file looks like one JSON list, not JSONL: a ChatGPT or Claude export's conversations.json is read "
        "with --format chatgpt or --format claude"
    )


def _lines(path: Path, fh: IO[bytes]) -> Iterator[bytes]:
    try:
        yield from fh
    except READ_ERRORS as exc:
        raise InvalidInput(f"Cannot read {path}: {exc}") from exc


def _read_all(path: Path, fh: IO[bytes], size: int = -1) -> bytes:
    try:
        return fh.read(size)
    except READ_ERRORS as exc:
        raise InvalidInput(f"Cannot read {path}: {exc}") from exc


def _decode_line(path: Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
        raise InvalidInput(f"{path.name} line {number}: not valid UTF-8 ({where})") from None


def _entries(path: Path, what: str) -> Iterator[tuple[int, Any]]:
    """The numbered entries of a benchmark file, which is a JSON list of `what`, read one at a time."""
    return array_items(path, what)


def _malformed(path: Path, what: str, exc: Exception) -> InvalidInput:
    """An entry whose shape is not the benchmark's: a missing key, a wrong type, a bad date."""
    detail = f"missing key {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
    return InvalidInput(f"{path.name}, {what}: {detail}")


def locomo_turns(path: Path) -> Iterator[TurnInput]:
    """Each LoCoMo sample becomes a namespace; a turn is "{speaker}: {text}" plus its shared image caption.
    Both speakers are people, so both speak as users."""
    for position, sample in _entries(path, "conversations"):
        try:
            turns = list(_locomo_sample(sample))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _malformed(path, f"conversation {position}", exc) from None
        yield from turns


def _locomo_sample(sample: dict[str, Any]) -> Iterator[TurnInput]:
    conversation = sample["conversation"]
    for number in _session_numbers(conversation):
        started = parse_locomo_time(conversation[f"session_{number}_date_time"])
        for index, turn in enumerate(conversation[f"session_{number}"]):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            yield TurnInput(
                session_id=f"session_{number}",
                turn_number=index,
                content=text,
                role="user",  # two people talking, neither an assistant; the speaker is in the text
                at=started + timedelta(seconds=30 * index),
                namespace=namespace_of(sample["sample_id"]),
            )


def _session_numbers(conversation: dict[str, Any]) -> list[int]:
    found = (re.fullmatch(r"session_(\d+)", key) for key in conversation)
    return sorted(int(m.group(1)) for m in found if m)


def parse_locomo_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), LOCOMO_TIME).replace(tzinfo=UTC)


def longmemeval_turns(path: Path) -> Iterator[TurnInput]:
    """Each LongMemEval question's haystack becomes a namespace named after the question id. A haystack can list
    the same session twice (identical turns, another time): it is ingested once; a reused id with other turns
    gets a suffix."""
    for position, entry in _entries(path, "questions"):
        try:
            turns = list(_longmemeval_question(entry))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _malformed(path, f"question {position}", exc) from None
        yield from turns


def _longmemeval_question(entry: dict[str, Any]) -> Iterator[TurnInput]:
    namespace = namespace_of(entry["question_id"])
    seen: dict[str, Any] = {}
    sessions = zip(entry["haystack_session_ids"], entry["haystack_dates"], entry["haystack_sessions"], strict=True)
    for raw_id, date, turns in sessions:
        if seen.get(raw_id) == turns:
            continue
        session_id = namespace_of(raw_id if raw_id not in seen else f"{raw_id}:{len(seen)}")
        seen.setdefault(raw_id, turns)
        started = parse_longmemeval_time(date)
        for index, turn in enumerate(turns):
            if not (turn.get("content") or "").strip():
                continue
            yield TurnInput(
                session_id=session_id,
                turn_number=index,
                content=turn["content"],
                role=turn["role"],
                at=started + timedelta(seconds=30 * index),
                namespace=namespace,
            )


def parse_longmemeval_time(text: str) -> datetime:
    """'2023/05/20 (Sat) 02:21' -> an aware UTC datetime."""
    cleaned = re.sub(r"\s*\([A-Za-z]+\)\s*", " ", text).strip()
    return datetime.strptime(cleaned, "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def namespace_of(raw: str) -> str:
    return re.sub(r"[^A-Za-z0-9._:@/-]", "-", str(raw))[:128] or "default"


FORMAT_KEYS = {  # the keys that name a format in the first item of a JSON list
    "chatgpt": {"mapping"},
    "claude": {"chat_messages"},
    "locomo": {"conversation", "qa"},
    "longmemeval": {"haystack_sessions"},
}


def detect_format(path: Path) -> str:
    """The reader for `path` (`ingest --format auto`): a file that does not open a JSON list is JSONL (whose reader
    names any fault by its line); a list is told by its first item's keys; a .zip holding a conversations.json is an
    export. InvalidInput for a list whose first item is none of the formats, or an empty one."""
    member = EXPORT_FILE if zip_holds(path, EXPORT_FILE) else None
    with open_input(path, member) as fh:
        start = _read_all(path, fh, 4096).removeprefix(codecs.BOM_UTF8).lstrip(b" \t\r\n")
    if not start.startswith(b"["):
        return "jsonl"
    first = next(iter(array_items(path, "items", member=member)), None)
    if first is None:
        raise InvalidInput(f"{path.name} is an empty JSON list: nothing to ingest")
    keys = set(first[1]) if isinstance(first[1], dict) else set()
    for name, marks in FORMAT_KEYS.items():
        if marks <= keys:
            return name
    shown = f"an item with keys {sorted(keys)[:8]}" if keys else f"a {type(first[1]).__name__}"
    raise InvalidInput(
        f"{path.name} is a JSON list whose first item ({shown}) is not a ChatGPT or Claude conversation, a LoCoMo "
        "conversation or a LongMemEval question; name its format with --format"
    )


READERS = {
    "jsonl": read_jsonl,
    "chatgpt": chatgpt_turns,
    "claude": claude_turns,
    "locomo": locomo_turns,
    "longmemeval": longmemeval_turns,
}
