"""A transcript's speakers: which labels are speakers, a question read for them, and the ranking that follows, on the
real engines. A namespace without speaker labels must rank exactly as it did before."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory import MemoryManager, TurnInput
from agent_memory.cognition.digest import Statement, render
from agent_memory.cognition.speakers import named, said_by, transcript_speakers, without_names
from agent_memory.config import load_config
from agent_memory.errors import ConfigError
from agent_memory.speakers import TranscriptSpeakers

NOW = datetime(2026, 3, 20, 18, 0, tzinfo=UTC)
QUESTION = "What activities does Melanie partake in?"
CHAT = [
    "Caroline: Hey Melanie! How have you been lately?",
    "Melanie: Busy week at work, but I'm off to go swimming with the kids this afternoon.",
    "Caroline: Yep, Melanie! Being ourselves is such a great feeling.",
    "Melanie: I signed up for a pottery class, it calms me down.",
    "Caroline: Thanks, Melanie! Your support means a lot to me.",
    "Caroline: I went to a support group meeting yesterday.",
    "Melanie: We went camping in the mountains last weekend.",
    "Caroline: Aw Melanie, that's so sweet of you!",
    "Caroline: I'm researching adoption agencies this month.",
    "Melanie: The kids loved the dinosaur exhibit at the museum.",
]
OFF = {"speaker_weight": 0.0, "neutral_speakers": False}


async def say(manager: MemoryManager, session: str, lines: list[str], namespace: str = "default") -> list[str]:
    turns = [
        TurnInput(session, i, text, at=NOW + timedelta(minutes=i), namespace=namespace) for i, text in enumerate(lines)
    ]
    return [r.memory_id or "" for r in await manager.process_turns(turns)]


def test_two_frequent_labels_make_a_transcript() -> None:
    assert transcript_speakers({"Melanie": 6, "Caroline": 4, "": 10}, 20) == ("Melanie", "Caroline")
    assert transcript_speakers({"Note": 12, "": 3}, 15) == ()  # one frequent label names no one in particular
    assert transcript_speakers({"Melanie": 60, "Caroline": 39, "Priya": 4}, 103) == ("Melanie", "Caroline")  # < 5%
    assert transcript_speakers({"Jo": 2, "Bo": 2}, 4) == ()  # too few memories to tell
    assert transcript_speakers({"Q": 40, "A": 40}, 80) == ()  # questions and answers, not people


def test_a_question_names_a_speaker_by_the_whole_name() -> None:
    speakers = ("Caroline", "Melanie")
    assert named(QUESTION, speakers) == ("Melanie",)
    assert named("What do Melanie's kids like?", speakers) == ("Melanie",)
    assert named("What did Caroline and Melanie both paint?", speakers) == speakers
    assert named("What do Melanies like?", speakers) == () and named("what does melanie like?", speakers) == ()
    common = ("Will", "Melanie")  # a name that is also a word people write in lower case, where it opens a sentence
    assert named("Will Caroline visit?", common) == () and named("Did she ask? Will it rain?", common) == ()
    assert named("What did Will say?", common) == ("Will",) and named("Melanie: will Will come?", common) == common
    assert named("What does Melanie like?", ("MELANIE", "JOHN")) == ("MELANIE",)  # a script's labels, in capitals
    assert named("When will she come?", ("WILL", "JOHN")) == () and named("Did WILL call?", ("WILL",)) == ("WILL",)
    assert without_names("What does Melanie like?", ["MELANIE"]) == "What does like?"


def test_the_vector_layers_question_leaves_the_names_out() -> None:
    assert without_names(QUESTION, ["Melanie"]) == "What activities does partake in?"
    assert without_names("What do Melanie's kids like?", ["Melanie"]) == "What do kids like?"
    assert without_names("Melanie?", ["Melanie"]) == "Melanie?"  # nothing would be left to embed
    assert without_names("  What   did I say? ", []) == "  What   did I say? "


def test_who_said_a_memory() -> None:
    assert said_by("Melanie: I run.") == "Melanie"
    assert said_by("[6 Jul] Caroline: I paint. … [9 Jul] Caroline: I paint lakes.") == "Caroline"  # a merge
    digest = render("Melanie", [Statement("m1", "Melanie", NOW, "I signed up for a pottery class.")])
    assert said_by(digest) == "Melanie"
    assert said_by("I went swimming with the kids.") == "" and said_by("no label: here") == ""
    assert said_by("Caroline: quoting her, in their own words:\nfine") == "Caroline"  # a turn, not a digest


async def test_a_question_about_a_speaker_ranks_what_they_said_first(manager: MemoryManager) -> None:
    """The other speaker's "Thanks, Melanie!" holds the name too; embedded with the question, it ranked first."""
    shipped = manager.config.retrieval
    ids = await say(manager, "s1", CHAT)
    melanie = {ids[i] for i, line in enumerate(CHAT) if line.startswith("Melanie:")}
    later = NOW + timedelta(days=1)
    ranked = await manager.retrieve(QUESTION, k=10, now=later)
    assert {r.memory.memory_id for r in ranked[:4]} == melanie
    assert all(("speaker" in r.layers) == (r.memory.memory_id in melanie) for r in ranked)
    assert ranked[0].layers["speaker"].score == pytest.approx(1.6)
    both = "What did Caroline and Melanie talk about?"  # two speakers named: no one to lift
    assert not any("speaker" in r.layers for r in await manager.retrieve(both, k=10, now=later))
    manager.configure_retrieval(shipped.model_copy(update=OFF))
    before = await manager.retrieve(QUESTION, k=10, now=later)
    assert before[0].memory.content.startswith("Caroline: Yep, Melanie!")


async def test_without_speaker_labels_nothing_changes(manager: MemoryManager) -> None:
    """A user's own turns, and notes that often open with one label: no transcript, the same ranking to the score."""
    shipped = manager.config.retrieval
    await say(manager, "own", [line.split(": ", 1)[1] for line in CHAT] + ["Melanie is my sister."])
    await say(manager, "notes", [f"Note: {line.split(': ', 1)[1]}" for line in CHAT], namespace="notes")
    later = NOW + timedelta(days=1)
    for namespace in ("default", "notes"):
        on = await manager.retrieve(QUESTION, k=20, now=later, namespace=namespace)
        manager.configure_retrieval(shipped.model_copy(update=OFF))
        off = await manager.retrieve(QUESTION, k=20, now=later, namespace=namespace)
        manager.configure_retrieval(shipped)
        assert [(r.memory.memory_id, r.score) for r in on] == [(r.memory.memory_id, r.score) for r in off]
        assert len(on) >= 10


async def test_speakers_are_counted_as_they_are_stored_and_forgotten_by_an_erase(manager: MemoryManager) -> None:
    speakers = TranscriptSpeakers(manager.records)
    assert await speakers.of("default") == ()
    ids = await say(manager, "s1", CHAT)
    assert await speakers.of("default") == ("Caroline", "Melanie")  # six turns and four
    assert await speakers.of("elsewhere") == ()
    said = ["Priya: I joined the choir.", "Priya: We sang at the harbour.", "Priya: Rehearsals are on Tuesdays."]
    priya = (await say(manager, "s2", [*said, "Melanie: Priya sings well."]))[:3]
    assert await speakers.of("default") == ("Caroline", "Melanie", "Priya")  # read since the last count
    wired = manager.speakers  # the manager's own, which its erase must empty
    assert "Priya" in await wired.of("default")
    await manager.erase(reason="test", memory_ids=priya)
    assert "Priya" not in await wired.of("default")
    assert len(ids) == len(CHAT)


async def test_a_count_under_way_when_an_erase_drops_the_counts_is_not_kept(manager: MemoryManager) -> None:
    await say(manager, "s1", CHAT)
    speakers = TranscriptSpeakers(manager.records)
    counting = asyncio.create_task(speakers.of("default"))
    await asyncio.sleep(0)  # the count now waits on SQLite
    speakers.drop()
    assert await counting == ()  # what it read before the drop is thrown away
    assert await speakers.of("default") == ("Caroline", "Melanie")  # and counted again from the start


def test_the_settings_refuse_a_negative_weight() -> None:
    with pytest.raises(ConfigError, match="retrieval.speaker_weight"):
        load_config(environ={"AGENT_MEMORY__RETRIEVAL__SPEAKER_WEIGHT": "-0.1"})
    with pytest.raises(ConfigError, match="retrieval.neutral_speakers"):
        load_config(environ={"AGENT_MEMORY__RETRIEVAL__NEUTRAL_SPEAKERS": "sometimes"})
    assert load_config(environ={"AGENT_MEMORY__RETRIEVAL__SPEAKER_WEIGHT": "0"}).retrieval.speaker_weight == 0.0
