"""A context shows a memory's reply: the next turn of its session, which the save decision did not keep, read back
from the log when it is about the question (replies.py). Real engines, the shipped save decision."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory import MemoryManager, TurnInput
from agent_memory.bench.harness import ask
from agent_memory.bench.questions import Question
from agent_memory.cognition.context import pack
from agent_memory.cognition.ranking import Ranked
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import ConfigError
from agent_memory.interfaces.client import _CONTEXT, _context
from agent_memory.interfaces.http import context_json
from agent_memory.models import Context
from agent_memory.replies import about

NOW = datetime(2026, 3, 20, 18, 0, tzinfo=UTC)
CHAT = [
    "Sam: Nah, no changes for me. Still enjoying my soda and candy every day, although I know it's not the best habit.",
    "Evan: Yeah, breaking habits can be tough. Have you considered swapping soda for flavored seltzer water?",
    "Sam: I adopted a rescue dog named Biscuit last Saturday and we walk along the river every morning.",
    "Evan: I finished my watercolor painting of the lake and it is hanging in the community exhibit now.",
]
ASKED = "What did Evan suggest Sam drink instead of soda?"


async def talk(manager: MemoryManager) -> list[str | None]:
    """The memory of each turn, None where the save decision did not keep it (turn 1, the reply)."""
    turns = [TurnInput("s1", i, text, at=NOW + timedelta(minutes=i)) for i, text in enumerate(CHAT)]
    results = await manager.process_turns(turns)
    kept = [r.memory_id for r in results]
    assert kept[0] is not None and kept[1] is None, f"the save decision kept {kept}: the test needs turn 1 dropped"
    return kept


def with_replies(manager: MemoryManager, count: int) -> None:
    manager.configure_retrieval(manager.config.retrieval.model_copy(update={"context_replies": count}))


async def test_a_kept_turn_brings_the_reply_it_was_not_kept_with(judging: MemoryManager) -> None:
    kept = await talk(judging)
    context = await judging.context(ASKED, now=NOW + timedelta(days=1))
    (item,) = [i for i in context.items if i.memory.memory_id == kept[0]]
    assert item.reply is not None and item.reply.turn_number == 1 and item.reply.content == CHAT[1]
    assert item.reply.session_id == "s1" and item.reply.at == NOW + timedelta(minutes=1)
    lines = context.text.splitlines()
    assert lines[lines.index(f"[18:00] {CHAT[0]}") + 1] == f"[18:01] {CHAT[1]}"  # on the line under its memory
    count = judging.token_counter.count
    assert item.tokens >= count(f"[18:00] {CHAT[0]}\n") + count(f"[18:01] {CHAT[1]}\n")  # the reply is paid for
    assert context.tokens == count(context.text) <= context.budget

    with_replies(judging, 0)  # off: the memory alone, as before
    without = await judging.context(ASKED, now=NOW + timedelta(days=1))
    assert all(i.reply is None for i in without.items) and CHAT[1] not in without.text
    assert [i.memory.memory_id for i in without.items] == [i.memory.memory_id for i in context.items]


async def test_a_reply_is_shown_only_when_it_is_about_the_question(judging: MemoryManager) -> None:
    kept = await talk(judging)
    context = await judging.context("How often does Sam have candy?", now=NOW + timedelta(days=1))
    assert kept[0] in [i.memory.memory_id for i in context.items]  # the memory, not its reply: no word in common
    assert all(i.reply is None for i in context.items) and CHAT[1] not in context.text
    assert about({"soda"}, CHAT[1]) and not about({"evan"}, CHAT[1])  # a speaker's label is not a word of the reply
    assert not about({"candy"}, CHAT[1]) and about({"candy"}, "Pass the candy.")


async def test_a_reply_longer_than_a_local_turn_is_not_shown(judging: MemoryManager) -> None:
    await talk(judging)
    limit = len(CHAT[1])
    for most, shown in ((limit, True), (limit - 1, False)):  # retrieval.locality_max_chars, as for the session lift
        judging.configure_retrieval(judging.config.retrieval.model_copy(update={"locality_max_chars": most}))
        context = await judging.context(ASKED, now=NOW + timedelta(days=1))
        assert any(i.reply for i in context.items) is shown and (CHAT[1] in context.text) is shown


async def test_only_the_first_candidates_bring_a_reply(judging: MemoryManager) -> None:
    kept = await talk(judging)
    ranked = (await judging.recall(ASKED, now=NOW + timedelta(days=1))).ranked
    at = [r.memory.memory_id for r in ranked.results].index(kept[0])
    with_replies(judging, at)  # the memory is just past the first `context_replies`
    assert all(i.reply is None for i in (await judging.context(ASKED, now=NOW + timedelta(days=1))).items)
    with_replies(judging, at + 1)
    assert any(i.reply for i in (await judging.context(ASKED, now=NOW + timedelta(days=1))).items)


async def test_a_reply_that_does_not_fit_is_left_out_and_its_memory_kept(judging: MemoryManager) -> None:
    kept = await talk(judging)
    ranked = (await judging.recall(ASKED, now=NOW + timedelta(days=1))).ranked
    replies = await judging.replies_of(ranked, ASKED, "default")
    assert set(replies) == {kept[0]}
    alone = Ranked([r for r in ranked.results if r.memory.memory_id == kept[0]], [])
    count = judging.token_counter

    def packed(budget: int) -> Context:
        return pack(alone, budget=budget, counter=count, replies=replies)

    both = packed(2048)
    assert both.items[0].reply == replies[kept[0]] and both.tokens == count.count(both.text)
    short = packed(both.tokens - 1)  # room for the memory, not for its reply
    assert [i.memory.memory_id for i in short.items] == [kept[0]] and short.items[0].reply is None
    assert CHAT[1] not in short.text and short.tokens <= both.tokens - 1


async def test_as_of_before_the_reply_and_an_erased_reply_show_none(judging_config: Config, embedder: Embedder) -> None:
    clock = {"now": NOW}
    async with MemoryManager.open(judging_config, embedder=embedder, clock=lambda: clock["now"]) as manager:
        said = []
        for i, text in enumerate(CHAT):  # each turn logged a minute after the one before
            clock["now"] = NOW + timedelta(minutes=i)
            said += await manager.process_turns([TurnInput("s1", i, text, at=clock["now"])])
        assert said[0].memory_id is not None and said[1].memory_id is None
        clock["now"] = NOW + timedelta(days=1)
        between = NOW + timedelta(seconds=30)  # the memory was known then; its reply was not yet said
        early = await manager.context(ASKED, as_of=between)
        assert [i.memory.memory_id for i in early.items] == [said[0].memory_id] and early.items[0].reply is None
        assert (await manager.context(ASKED)).items[0].reply is not None

        erased = await manager.erase(reason="the user asked", turn_ids=[said[1].turn_id])
        assert erased.proof.hits == 0
        after = await manager.context(ASKED)
        assert all(i.reply is None for i in after.items) and "seltzer" not in after.text
        assert (await manager.doctor()).consistent


async def test_a_reply_in_the_context_counts_as_its_turn_found(judging: MemoryManager) -> None:
    await talk(judging)
    question = Question(
        "q1", "single-hop", ASKED, "default", NOW + timedelta(days=1), frozenset({("default", "s1", 1)})
    )
    scores, _ = await ask(judging, [question], budgets=[2048])
    assert scores[2048].rows[0]["recall"] == 1.0  # the dropped turn, shown as a reply
    with_replies(judging, 0)
    scores, _ = await ask(judging, [question], budgets=[2048])
    assert scores[2048].rows[0]["recall"] == 0.0  # no memory holds it


def test_the_setting_refuses_what_it_cannot_mean() -> None:
    for bad in ("-1", "101", "many"):
        with pytest.raises(ConfigError, match="context_replies"):
            load_config(environ={"AGENT_MEMORY__RETRIEVAL__CONTEXT_REPLIES": bad})
    assert load_config(environ={"AGENT_MEMORY__RETRIEVAL__CONTEXT_REPLIES": "0"}).retrieval.context_replies == 0


async def test_the_http_context_carries_each_items_reply(judging: MemoryManager) -> None:
    kept = await talk(judging)
    context = await judging.context(ASKED, now=NOW + timedelta(days=1))
    data = json.loads(json.dumps(context_json(context)))
    items = {item["memory"]["memory_id"]: item for item in data["items"]}  # as POST /v1/context answers
    reply = items[kept[0]]["reply"]
    assert reply["content"] == CHAT[1] and reply["turn_number"] == 1 and reply["session_id"] == "s1"
    assert all(item["reply"] is None for memory_id, item in items.items() if memory_id != kept[0])
    back = _CONTEXT.validate_python(_context(data))  # as DaemonClient.context() reads the answer
    assert [i.reply for i in back.items] == [i.reply for i in context.items]
