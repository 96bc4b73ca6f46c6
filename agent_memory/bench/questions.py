"""Benchmark questions with their gold evidence turns, read from the user's copy of LoCoMo or LongMemEval.

A gold turn is named by (namespace, session id, turn number), exactly as `datasets.py` ingests it, so a memory's
own session and turn number say whether it is evidence. Nothing of the data is copied or shipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from agent_memory.bench.datasets import namespace_of, parse_locomo_time, parse_longmemeval_time, read_json

TurnKey = tuple[str, str, int]
DIA_ID = re.compile(r"D:?(\d+):0*(\d+)")
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True, slots=True)
class Question:
    question_id: str
    category: str
    text: str
    namespace: str
    asked_at: datetime
    gold: frozenset[TurnKey]
    gold_sessions: frozenset[tuple[str, str]] = frozenset()


def locomo_questions(path: Path) -> Iterator[Question]:
    """Evidence dia_ids normalised with D:?(\\d+):0*(\\d+), unknown ids dropped; a question left with no evidence is
    not scored. Each question is asked a day after the conversation's last session."""
    for sample in read_json(path):
        conversation, namespace = sample["conversation"], namespace_of(sample["sample_id"])
        known: set[TurnKey] = set()
        last = None
        for key, turns in conversation.items():
            if re.fullmatch(r"session_\d+", key) and isinstance(turns, list):
                known.update((namespace, key, index) for index in range(len(turns)))
                started = parse_locomo_time(conversation[f"{key}_date_time"])
                last = max(last or started, started)
        asked_at = (last or datetime.now()) + timedelta(days=1)
        for index, qa in enumerate(sample["qa"]):
            raw = qa.get("evidence") or []
            found = (DIA_ID.findall(item) for item in ([raw] if isinstance(raw, str) else raw))
            gold = {(namespace, f"session_{s}", int(p) - 1) for ids in found for s, p in ids} & known
            if gold:
                category = LOCOMO_CATEGORIES.get(int(qa["category"]), str(qa["category"]))
                yield Question(
                    f"{sample['sample_id']}:{index}", category, qa["question"], namespace, asked_at, frozenset(gold)
                )


def longmemeval_questions(path: Path) -> Iterator[Question]:
    """Gold turns are those with has_answer in the answer sessions; asked at the question's own date."""
    for entry in read_json(path):
        namespace = namespace_of(entry["question_id"])
        answer_sessions = set(entry["answer_session_ids"])
        gold: set[TurnKey] = set()
        sessions = zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=True)
        for session_id, turns in sessions:
            if session_id in answer_sessions:
                gold.update(
                    (namespace, namespace_of(session_id), i) for i, turn in enumerate(turns) if turn.get("has_answer")
                )
        if gold:
            yield Question(
                entry["question_id"],
                entry["question_type"],
                entry["question"],
                namespace,
                parse_longmemeval_time(entry["question_date"]),
                frozenset(gold),
                frozenset((namespace, namespace_of(s)) for s in answer_sessions),
            )
