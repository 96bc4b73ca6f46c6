from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_memory.errors import ClosedError, CorruptRecord
from agent_memory.models import EmotionalContext, LogPosition, LogRecord, Role, TurnId
from agent_memory.storage.journal import JsonlJournal, segment_name


def record(n: int, content: str = "") -> LogRecord:
    return LogRecord(
        TurnId(f"turn-{n}"),
        "default",
        "s1",
        n,
        Role.USER,
        content or f"turn number {n} — café ✓",
        datetime(2026, 3, 1, 12, n % 60, tzinfo=UTC),
        EmotionalContext(0.5, 0.25) if n % 2 else None,
    )


async def test_append_returns_offsets_that_read_back(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path)
    positions = [await journal.append(record(n)) for n in range(5)]
    assert [p.offset for p in positions] == sorted(p.offset for p in positions)
    assert positions[1].offset == positions[0].offset + positions[0].length
    for n, position in enumerate(positions):
        back = await journal.read(position)
        assert back.turn_id == f"turn-{n}" and back.content == record(n).content
        assert back.emotional_context == record(n).emotional_context
    await journal.aclose()


async def test_read_each_reads_in_one_hop_and_leaves_out_what_cannot_be_read(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path)
    positions = [await journal.append(record(n)) for n in range(4)]
    assert await journal.erase([(positions[1], "turn-1")], "erase-1") == 1
    missing = LogPosition(positions[3].segment + 1, 0, 10)  # a segment that does not exist
    back = await journal.read_each([positions[2], positions[1], missing, positions[0]])
    assert [r.turn_id if r else None for r in back] == ["turn-2", None, None, "turn-0"]
    assert await journal.read_each([]) == []
    await journal.aclose()


async def test_every_line_carries_ids_time_emotion_and_checksum(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path)
    await journal.append(record(1))
    await journal.aclose()
    line = json.loads((tmp_path / segment_name(1)).read_text().splitlines()[0])
    assert {
        "turn_id",
        "namespace",
        "session_id",
        "turn_number",
        "role",
        "content",
        "at",
        "emotional_context",
        "checksum",
    } <= set(line)
    assert line["emotional_context"] == {"valence": 0.5, "arousal": 0.25}


async def test_segments_rotate_and_stay_addressable(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path, segment_max_bytes=4096)
    positions = await journal.append_many([record(n, "x" * 900) for n in range(12)])
    assert len({p.segment for p in positions}) >= 3
    assert [r.turn_id for _, r in [item async for item in journal.scan()]] == [f"turn-{n}" for n in range(12)]
    assert (await journal.read(positions[-1])).turn_id == "turn-11"
    await journal.aclose()


async def test_torn_last_line_is_cut_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = await JsonlJournal.open(tmp_path)
    good = await journal.append(record(1))
    await journal.aclose()
    path = tmp_path / segment_name(1)
    with path.open("ab") as fh:
        fh.write(b'{"v":1,"turn_id":"turn-2","content":"half a reco')
    with caplog.at_level(logging.WARNING):
        journal = await JsonlJournal.open(tmp_path)
    assert "torn" in caplog.text
    assert path.stat().st_size == good.length
    after = await journal.append(record(3))
    assert after.offset == good.length
    assert [r.turn_id for _, r in [i async for i in journal.scan()]] == ["turn-1", "turn-3"]
    await journal.aclose()


async def test_a_complete_but_corrupt_last_line_is_cut_too(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path)
    good = await journal.append(record(1))
    await journal.aclose()
    with (tmp_path / segment_name(1)).open("ab") as fh:
        fh.write(b'{"not": "a record"}\n')
    journal = await JsonlJournal.open(tmp_path)
    assert (tmp_path / segment_name(1)).stat().st_size == good.length
    await journal.aclose()


async def test_a_tampered_record_fails_its_checksum(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path)
    position = await journal.append(record(1, "the original words"))
    await journal.append(record(2))
    path = tmp_path / segment_name(1)
    path.write_bytes(path.read_bytes().replace(b"original", b"modified"))
    with pytest.raises(CorruptRecord, match="checksum"):
        await journal.read(position)
    with pytest.raises(CorruptRecord, match="truncated"):
        await journal.read(LogPosition(1, position.offset, position.length + 10_000))
    await journal.aclose()


async def test_closed_journal_refuses_work(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path)
    await journal.aclose()
    with pytest.raises(ClosedError):
        await journal.append(record(1))


async def test_scan_reads_a_long_log_in_chunks_and_from_a_position(tmp_path: Path) -> None:
    journal = await JsonlJournal.open(tmp_path, segment_max_bytes=64 * 1024)
    positions = await journal.append_many([record(n) for n in range(5000)])
    seen = [r.turn_number async for _, r in journal.scan()]
    assert seen == list(range(5000))
    tail = [r.turn_number async for _, r in journal.scan(positions[4321])]
    assert tail == list(range(4321, 5000))
    async for _ in journal.scan():  # stopping early closes the reader and leaves the journal usable
        break
    assert (await journal.read(positions[-1])).turn_number == 4999
    await journal.aclose()
