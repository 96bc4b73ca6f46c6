"""Readers that turn conversation files into TurnInputs: our JSONL, LoCoMo and LongMemEval.

The benchmark files are read from wherever the user keeps them; nothing of them is copied or shipped.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_memory.errors import InvalidInput
from agent_memory.models import TurnInput
from agent_memory.validation import turn_from_mapping

LOCOMO_TIME = "%I:%M %p on %d %B, %Y"


def read_json(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def read_jsonl(path: Path) -> Iterator[TurnInput]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path.name} line {number}: malformed JSON ({exc.msg})") from None
            try:
                yield turn_from_mapping(data)
            except InvalidInput as exc:
                raise InvalidInput(f"{path.name} line {number}: {exc}") from None


def locomo_turns(path: Path) -> Iterator[TurnInput]:
    """Each LoCoMo sample becomes a namespace; a turn is "{speaker}: {text}" plus its shared image caption.
    Both speakers are people, so both speak as users."""
    for sample in read_json(path):
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
    for entry in read_json(path):
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


READERS = {"jsonl": read_jsonl, "locomo": locomo_turns, "longmemeval": longmemeval_turns}
