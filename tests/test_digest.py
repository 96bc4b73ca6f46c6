from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from agent_memory.cognition.digest import THE_USER, Statement, Topic, assign, group, render, statements
from agent_memory.models import Role

MAY = datetime(2023, 5, 8, 12, tzinfo=UTC)
JULY = datetime(2023, 7, 15, 9, tzinfo=UTC)


def test_a_speaker_says_what_they_did_like_and_plan() -> None:
    content = (
        "Melanie: Wow, that's great! I just signed up for a pottery class yesterday. I love painting sunsets. "
        "Have you tried it? We're going to the beach next week. [image: a photo of a cup with a dog face on it]"
    )
    found = statements("m1", content, Role.USER, MAY)
    assert [s.text for s in found] == [
        "I just signed up for a pottery class yesterday.",
        "I love painting sunsets.",
        "We're going to the beach next week.",
    ]
    assert {(s.memory_id, s.speaker, s.at) for s in found} == {("m1", "Melanie", MAY)}


def test_an_unlabelled_user_speaks_for_the_user_and_an_assistant_gives_none() -> None:
    (mine,) = statements("m2", "I moved to Porto in March.", Role.USER, MAY)
    assert mine.speaker == THE_USER
    assert statements("m3", "I recommended three hotels near the river.", Role.ASSISTANT, MAY) == []
    assert statements("m4", "How was the trip? Sounds great!", Role.USER, MAY) == []


def test_a_compression_cut_ends_a_statement() -> None:
    """Compression joins the sentences it keeps with " … " (cognition/compress.py); a sentence break needs a capital
    after it, so the mark once glued a kept statement to the next kept sentence, whatever that said."""
    cut = (
        "I signed up for the board examination. I am going to ask you 86 questions. … This standard supports "
        "workflow between machines and scanners. … I passed the first part in March. …"
    )
    assert [s.text for s in statements("m5", cut, Role.USER, MAY)] == [
        "I signed up for the board examination.",
        "I am going to ask you 86 questions.",
        "I passed the first part in March.",
    ]
    assert [s.text for s in statements("m6", "… I moved to Porto in March.", Role.USER, MAY)] == [
        "I moved to Porto in March."
    ]


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_statements_group_by_topic_in_time_order() -> None:
    pottery, beach = unit(1, 0, 0), unit(0, 1, 0)
    vectors = np.stack([pottery, beach, unit(1, 0.2, 0), unit(0, 1, 0.1), unit(0, 0, 1)])
    assert group(vectors, threshold=0.5, max_size=5) == [[0, 2], [1, 3]]  # the lone third topic is no digest
    assert group(vectors, threshold=0.5, max_size=5, min_size=1) == [[0, 2], [1, 3], [4]]
    assert group(vectors, threshold=0.999, max_size=5) == []  # nothing close enough


def test_a_full_group_sends_the_next_statement_elsewhere() -> None:
    vectors = np.stack([unit(1, 0), unit(1, 0.01), unit(1, 0.02), unit(1, 0.03)])
    assert group(vectors, threshold=0.5, max_size=2) == [[0, 1], [2, 3]]


def test_a_digest_reads_dated_oldest_first() -> None:
    members = [Statement("b", "the user", JULY, "I ran the Lisbon 10k."), Statement("a", "the user", MAY, "I run.")]
    assert (
        render("the user", members)
        == "The user, in their own words:\n- 2023-05-08: I run.\n- 2023-07-15: I ran the Lisbon 10k."
    )


def test_topics_come_out_the_same_in_one_call_or_several() -> None:
    generator = np.random.default_rng(3)
    raw = generator.standard_normal((40, 8)).astype(np.float32)
    vectors = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    whole: list[Topic] = []
    at_once = assign(whole, vectors, threshold=0.2, max_size=4)
    parts: list[Topic] = []
    in_steps = [
        i
        for start in (0, 7, 25)
        for i in assign(parts, vectors[start : {0: 7, 7: 25, 25: 40}[start]], threshold=0.2, max_size=4)
    ]
    assert at_once == in_steps and len(whole) == len(parts) > 1
    assert [t.size for t in whole] == [t.size for t in parts] and max(t.size for t in whole) <= 4
    for a, b in zip(whole, parts, strict=True):
        assert np.allclose(a.total, b.total)
    assert sum(t.size for t in whole) == 40


def test_a_statement_said_again_is_shown_once_at_its_first_date() -> None:
    preamble = "I am preparing for my clinical informatics board examination."
    members = [
        Statement("c", "the user", JULY, preamble),
        Statement("a", "the user", MAY, preamble),
        Statement("b", "the user", MAY, "I am going to ask you 86 questions."),
        Statement("d", "the user", JULY, "i am preparing for my clinical  informatics board examination."),
    ]
    assert render("the user", members) == (
        f"The user, in their own words:\n- 2023-05-08: {preamble}\n- 2023-05-08: I am going to ask you 86 questions."
    )
