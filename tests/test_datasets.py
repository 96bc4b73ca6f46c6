"""Benchmark readers, on tiny files written here in the benchmarks' formats (no benchmark data is shipped)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

from agent_memory.bench.datasets import locomo_turns, longmemeval_turns


def test_locomo_reader(tmp_path: Path) -> None:
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2_date_time": "9:00 am on 9 May, 2023",
            "session_3_date_time": "9:00 am on 10 May, 2023",  # a date with no session is ignored
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo!"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Look", "blip_caption": "a red kite"},
            ],
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Back again"}],
        },
        "qa": [],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    turns = list(locomo_turns(path))
    assert [(t.session_id, t.turn_number) for t in turns] == [("session_1", 0), ("session_1", 1), ("session_2", 0)]
    assert turns[1].content == "Bo: Look [image: a red kite]" and turns[1].role == "user"
    assert turns[0].at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC) and turns[0].namespace == "conv-x"


def test_longmemeval_reader_reads_gzip_and_skips_empty_turns(tmp_path: Path) -> None:
    entry = {
        "question_id": "q 1",
        "question_type": "single-session-user",
        "question": "?",
        "answer": "",
        "question_date": "2023/05/30 (Tue) 10:00",
        "answer_session_ids": ["s_a"],
        "haystack_session_ids": ["s_a", "s_b"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 08:00"],
        "haystack_sessions": [
            [{"role": "user", "content": "I adopted a cat", "has_answer": True}, {"role": "assistant", "content": ""}],
            [{"role": "user", "content": "Any tips for tea?"}],
        ],
    }
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump([entry], fh)
    turns = list(longmemeval_turns(path))
    assert [(t.session_id, t.turn_number, t.role) for t in turns] == [("s_a", 0, "user"), ("s_b", 0, "user")]
    assert turns[0].namespace == "q-1" and turns[0].at == datetime(2023, 5, 20, 2, 21, tzinfo=UTC)


def test_longmemeval_repeated_session_is_ingested_once(tmp_path: Path) -> None:
    same = [{"role": "user", "content": "I adopted a cat"}]
    entry = {
        "question_id": "q1",
        "haystack_session_ids": ["s_a", "s_a", "s_a"],
        "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/01 (Mon) 17:00", "2023/05/02 (Tue) 09:00"],
        "haystack_sessions": [same, same, [{"role": "user", "content": "Other turns, same id"}]],
    }
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([entry]), encoding="utf-8")
    turns = list(longmemeval_turns(path))
    assert [(t.session_id, t.content) for t in turns] == [("s_a", "I adopted a cat"), ("s_a:1", "Other turns, same id")]
