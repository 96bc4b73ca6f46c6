from __future__ import annotations

import pytest

from agent_memory.cognition.extraction import SimpleExtractor, proper_nouns
from agent_memory.cognition.retrieval import fts_query
from agent_memory.cognition.save_decision import is_phatic
from agent_memory.scoring import reciprocal_rank_fusion


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ines lands at Lisbon airport on flight TP1334.", ["ines", "lisbon", "tp1334"]),
        ("Went to New York with Tom. Thinking of Maya!", ["new york", "tom", "maya"]),
        ("I think so. Yesterday was fine.", []),
        ("We met Dr. Carvalho in Alvalade", ["dr", "carvalho", "alvalade"]),
    ],
)
def test_proper_nouns(text: str, expected: list[str]) -> None:
    assert proper_nouns(text) == expected


def test_extractor_gives_entities_and_keywords() -> None:
    found = SimpleExtractor(max_keywords=5).extract(
        "My sister Ines gave me Piranesi by Susanna Clarke for my birthday."
    )
    assert "ines" in found.entities and "susanna clarke" in found.entities
    assert 0 < len(found.keywords) <= 5


@pytest.mark.parametrize("text", ["ok", "thanks!", "Thank you so much", "haha nice", "ok 👍", "...", "yes yes"])
def test_phatic_turns(text: str) -> None:
    assert is_phatic(text)


@pytest.mark.parametrize("text", ["ok, my flight is TP1334", "No, I moved to Porto", "thanks, Tom approved it"])
def test_turns_with_content_are_kept(text: str) -> None:
    assert not is_phatic(text)


def test_fts_query_quotes_words_and_drops_stopwords() -> None:
    assert fts_query('What did "Tom" say about the NEAR(x) OR budget?') == '"tom" OR "say" OR "near" OR "budget"'
    assert fts_query("the") == '"the"'
    assert fts_query("???") == ""


def test_rrf_sums_reciprocal_ranks_deterministically() -> None:
    fused = reciprocal_rank_fusion({"a": ["x", "y", "z"], "b": ["y", "x"]}, k=60)
    assert [i for i, _ in fused] == ["x", "y", "z"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    weighted = reciprocal_rank_fusion({"a": ["x"], "b": ["y"]}, k=60, weights={"b": 2.0})
    assert [i for i, _ in weighted] == ["y", "x"]
