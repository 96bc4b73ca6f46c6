"""Outcome assessment and the policy export, with a controlled clock on the real engines."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory import MemoryManager, TurnInput
from agent_memory.config import Config, SaveConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.policy.outcomes import label_dropped, label_kept, label_retrieval, similar
from agent_memory.sleep.jobs import run_job

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SAVE_KEYS = {
    "kind",
    "decision_id",
    "turn_id",
    "memory_id",
    "namespace",
    "role",
    "decided_at",
    "path",
    "save",
    "memory_type",
    "confidence",
    "importance",
    "reason",
    "features",
    "inputs",
    "policy",
    "outcome",
    "outcome_at",
}
RETRIEVAL_KEYS = {
    "kind",
    "retrieval_id",
    "namespace",
    "query",
    "at",
    "k",
    "result_ids",
    "features",
    "outcome",
    "outcome_at",
}


def test_the_labels() -> None:
    assert label_kept(True) == "useful" and label_kept(False) == "unused"
    gaps = [["dentist", "appointment"], ["tax return"]]
    assert label_dropped("when was the Dentist appointment again?", gaps) == "missed"
    assert label_dropped("I filed the tax return today", gaps) == "missed"  # a phrase counts when all its words do
    assert (
        label_dropped("the appointment with the vet", [["dentist", "appointment", "tuesday", "clinic"]]) == "not_needed"
    )
    assert (
        label_dropped("the dentist and the appointment", [["dentist", "appointment", "tuesday", "clinic"]]) == "missed"
    )
    assert similar("Where does Ines live?", "where does ines live now") and not similar(
        "Where does Ines live?", "Tom's job"
    )
    assert label_retrieval(0, "q", []) == "miss"
    assert label_retrieval(3, "Where does Ines live?", ["Where is Ines living now?"]) == "unhelpful"
    assert label_retrieval(3, "Where does Ines live?", ["What is Tom's job?"]) == "helpful"


@pytest.fixture
def clock() -> list[datetime]:
    return [T0]


@pytest.fixture
async def strict(judging_config: Config, embedder: Embedder, clock: list[datetime]) -> MemoryManager:
    config = judging_config.model_copy(update={"save": SaveConfig(save_confidence_threshold=0.9)})
    async with MemoryManager.open(config, embedder=embedder, clock=lambda: clock[0]) as manager:
        yield manager


async def test_assess_labels_decisions_after_their_window_and_retrievals_after_theirs(
    strict: MemoryManager, clock: list[datetime], tmp_path: Path
) -> None:
    texts = [
        "My sister Ines lives in Berlin and works as an architect at Foster and Partners since 2019.",
        "My manager Tom Okafor moved the Harbor launch to June 3, 2026, after the review on May 12.",
        "My daughter Lena starts school at Riverside Elementary on September 4th, 2026.",
        "wait, when was the dentist appointment again?",
        "ok",
    ]
    results = await strict.process_turns([TurnInput("s1", i, t, at=T0) for i, t in enumerate(texts)])
    assert [r.saved for r in results] == [True, True, True, False, False]
    clock[0] = T0 + timedelta(hours=1)
    await strict.retrieve("Where does Ines live?", k=1)
    clock[0] = T0 + timedelta(hours=1, minutes=2)
    await strict.retrieve("Where does Ines live now?", k=1)
    clock[0] = T0 + timedelta(hours=2)
    await strict.retrieve("When is my dentist appointment?", k=1)
    assert len(await strict.open_gaps()) == 1

    early = await run_job(strict, "assess", now=T0 + timedelta(days=1))
    assert early.counts == {"retrieval:helpful": 2, "retrieval:unhelpful": 1}  # decisions wait for their window
    late = await run_job(strict, "assess", now=T0 + timedelta(days=15))
    # the Ines questions returned her memory; the dentist question (k=1) returned one of the other two
    assert late.counts == {"save:useful": 2, "save:unused": 1, "save:missed": 1, "save:not_needed": 1}
    rows = await strict.records._fetch("SELECT outcome FROM save_decisions ORDER BY decision_id")
    outcomes = [r[0] for r in rows]
    assert outcomes[0] == "useful" and sorted(outcomes[1:3]) == ["unused", "useful"]
    assert outcomes[3:] == ["missed", "not_needed"]
    again = await run_job(strict, "assess", now=T0 + timedelta(days=16))
    assert again.counts == {}  # labelled once

    run = await run_job(strict, "export", out=tmp_path / "policy.jsonl")
    assert run.status == "ok" and run.counts["save"] == 5 and run.counts["retrieval"] == 3
    lines = [json.loads(line) for line in (tmp_path / "policy.jsonl").read_text().splitlines()]
    saves = [x for x in lines if x["kind"] == "save"]
    retrievals = [x for x in lines if x["kind"] == "retrieval"]
    assert all(set(x) == SAVE_KEYS for x in saves) and all(set(x) == RETRIEVAL_KEYS for x in retrievals)
    assert saves[0]["features"]["names"] >= 2 and saves[0]["inputs"]["emotion"]["source"] == "lexicon"
    assert [x["outcome"] for x in retrievals] == ["unhelpful", "helpful", "helpful"]
    assert [x["query"] for x in retrievals][0] == "Where does Ines live?"


async def test_export_leaves_out_unlabelled_decisions_unless_asked(strict: MemoryManager, tmp_path: Path) -> None:
    await strict.process_turn("s1", 0, "My sister Ines lives in Berlin and works as an architect since 2019.", at=T0)
    labelled = await run_job(strict, "export", out=tmp_path / "labelled.jsonl")
    everything = await run_job(strict, "export", out=tmp_path / "all.jsonl", labelled_only=False)
    assert labelled.counts["save"] == 0 and (tmp_path / "labelled.jsonl").read_text() == ""
    assert everything.counts["save"] == 1 and json.loads((tmp_path / "all.jsonl").read_text())["outcome"] is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["all.jsonl", "labelled.jsonl"]  # no partial


def test_assess_and_export_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "mem")
    sample = str(Path(__file__).resolve().parents[1] / "data" / "sample_conversation.jsonl")
    assert main(["--data-dir", data, "ingest", sample]) == 0
    assert main(["--data-dir", data, "assess", "--now", "2027-01-01T00:00:00"]) == 0
    assert "assess ok" in capsys.readouterr().out
    out = tmp_path / "policy.jsonl"
    assert main(["--data-dir", data, "export", "policy", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 54 and {x["outcome"] for x in lines} <= {"useful", "unused", "missed", "not_needed"}
    assert {x["path"] for x in lines} >= {"rule", "heuristic"}
