from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_memory.cognition.extraction import SimpleExtractor, common_words, proper_nouns
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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # imperatives and headings that open a list item are words people write in lower case, not names
        ("Tips:\n1. Consider the budget.\n2. Ensure you pack light.\n- Research local customs.", []),
        ("Root cause: the pool was too small. Fix: raise it. Done.", []),
        ("Warm-up first. Then stretch.", []),
        # a name opens a sentence as often as anything: a speaker's prefix, an address, a place
        ("Melanie: I went to Lisbon. Paris is next.", ["melanie", "lisbon", "paris"]),
        ("Jean-Luc called. Priya answered.", ["jean-luc", "priya"]),
        # a common word that is also a name is lost as an opener and found where else the text names it
        ("Python is fine here. We moved the jobs to Python.", ["python"]),
    ],
)
def test_a_sentence_opener_is_a_name_only_when_people_do_not_write_it_in_lower_case(
    text: str, expected: list[str]
) -> None:
    assert proper_nouns(text) == expected


def test_contractions_and_discourse_words_are_never_names() -> None:
    assert proper_nouns("Don't worry. You'll see. However, Tom Can't Stop won.") == ["tom", "stop"]


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


def test_the_shipped_word_list_is_what_the_vocabulary_gives() -> None:
    """The list is derived, not edited: scripts/common_words.py, from the cl100k_base file litellm ships."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "common_words.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "consider" in common_words() and "paris" not in common_words() and "melanie" not in common_words()
