from __future__ import annotations

import pytest

from agent_memory.cognition.keyphrases import STOP, key_phrases

TURN = (
    "Caroline went to an LGBTQ support group yesterday. The support group meets in Lisbon every Friday, "
    "and Caroline says it changed her year. I might go with Caroline next time."
)


def test_names_acronyms_and_repeated_phrases_are_key() -> None:
    found = key_phrases(TURN, 8)
    assert found[0] == "lgbtq support"  # an acronym next to a repeated word, in the first sentence
    assert {"support group", "lgbtq", "caroline"} <= set(found)
    assert "year" not in found and "time" not in found  # once each, late, lower case


def test_phrases_are_lower_case_bounded_and_free_of_stopwords_at_their_edges() -> None:
    found = key_phrases(TURN, 5)
    assert len(found) == 5
    for phrase in found:
        assert phrase == phrase.lower()
        words = phrase.split()
        assert 1 <= len(words) <= 2
        assert words[0] not in STOP and words[-1] not in STOP


def test_a_phrase_never_spans_punctuation() -> None:
    found = key_phrases("I bought apples, oranges and a kettle; pears - plums", 20)
    assert "apples oranges" not in found
    assert "kettle pears" not in found and "pears plums" not in found
    assert {"apples", "oranges", "kettle", "pears", "plums"} <= set(found)


def test_near_duplicates_of_a_better_phrase_are_left_out() -> None:
    text = "The garden party was lovely. Garden parties are my favourite; the garden party next week too."
    found = key_phrases(text, 8)
    assert "garden party" in found
    assert "garden parties" not in found  # character ratio 0.86 to "garden party"
    assert len(found) == len(set(found))


@pytest.mark.parametrize("text", ["", "   ", "and the of it", "42 7 3", "!!!"])
def test_nothing_to_key_gives_nothing(text: str) -> None:
    assert key_phrases(text, 8) == ()


def test_one_word_and_no_limit() -> None:
    assert key_phrases("Porto", 8) == ("porto",)
    assert key_phrases(TURN, 0) == ()


def test_curly_apostrophes_read_as_straight_ones() -> None:
    assert key_phrases("Charlotte’s Web was her favourite book.", 3) == key_phrases(
        "Charlotte's Web was her favourite book.", 3
    )
