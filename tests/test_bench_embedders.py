"""The embedder ceiling benchmark: its ranks, its measures and LoCoMo's turns as the protocol writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_memory.bench.embedders import (
    Ranked,
    Timing,
    figures,
    locomo_turns,
    open_model,
    rank,
    recall_at,
    reciprocal_rank,
    report,
)
from agent_memory.embeddings.text import Embedder


async def test_rank_puts_the_matching_text_first_with_the_real_model(embedder: Embedder) -> None:
    documents = [
        "The staging database runs Postgres 16 on port 5433.",
        "We had ramen for lunch near the office.",
        "Deploys go out on Tuesdays after the freeze lifts.",
    ]
    timing = Timing()
    ranks = await rank(
        embedder, documents, ["which port is the staging database on", "what did we eat"], [[0], [1]], timing
    )
    assert ranks == [(0,), (0,)]
    assert timing.documents == 3 and len(timing.query_seconds) == 2 and timing.document_seconds > 0


def test_notes_count_any_gold_note_and_locomo_counts_the_share_of_evidence() -> None:
    note = Ranked("set", "paraphrased", (3, 9))
    turn = Ranked("conv-1", "locomo", (3, 9))
    assert recall_at(note, 5, any_gold=True) == 1.0
    assert recall_at(turn, 5, any_gold=False) == 0.5
    assert recall_at(turn, 10, any_gold=False) == 1.0
    assert reciprocal_rank(note) == 0.25


def test_figures_and_the_paired_report() -> None:
    first = [Ranked("a", "paraphrased", (0,)), Ranked("a", "paraphrased", (7,)), Ranked("a", "literal", (0,))]
    second = [Ranked("a", "paraphrased", (0,)), Ranked("a", "paraphrased", (1,)), Ranked("a", "literal", (0,))]
    rows = figures(first)
    assert rows["paraphrased R@5"] == {"a": [1.0, 0.0]} and rows["literal R@5"] == {"a": [1.0]}
    summary = report(
        [
            {"model": "x", "name": "x", "dimension": 4, "rows": rows, "query_ms_p50": 1.0, "documents_per_second": 1.0},
            {
                "model": "y",
                "name": "y",
                "dimension": 4,
                "rows": figures(second),
                "query_ms_p50": 1.0,
                "documents_per_second": 1.0,
            },
        ]
    )
    better = summary["models"][1]["metrics"]["paraphrased R@5"]
    assert better["pooled"] == 1.0 and better["delta"] == 0.5
    assert "delta" not in summary["models"][0]["metrics"]["paraphrased R@5"]


def test_locomo_turns_as_the_protocol_writes_them() -> None:
    conversation = {
        "conversation": {
            "session_2": [{"speaker": "Mel", "dia_id": "D2:1", "text": "Back from camping."}],
            "session_1": [
                {"speaker": "Caro", "dia_id": "D1:1", "text": "Hi!"},
                {"speaker": "Mel", "dia_id": "D1:2", "text": "Look", "blip_caption": "a photo of a dog"},
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
        }
    }
    texts, where = locomo_turns(conversation)
    assert texts == ["Caro: Hi!", "Mel: Look [image: a photo of a dog]", "Mel: Back from camping."]
    assert where == {(1, 1): 0, (1, 2): 1, (2, 1): 2}


def test_a_folder_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not a sentence-transformers folder"):
        open_model(str(tmp_path))
