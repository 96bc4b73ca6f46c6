"""The agent loop's proof, short form (issue #21): 200 turns through AgentRuntime and a 4,000-token window over a
real MemoryManager and the local chat server (agent_memory/bench/runtime_proof.py; `scripts/bench_runtime.py
--proof` runs the 2,000-turn form). Facts stated in the first 100 turns are asked about at the end."""

from __future__ import annotations

from agent_memory.bench.runtime_proof import FACTS, UNKNOWN, prove, responder, script


async def test_facts_stated_early_are_recalled_after_200_turns_and_the_window_never_overflows() -> None:
    report = await prove(turns=200, facts=4)
    assert report.turns == 200 and len(report.recalls) == 4
    assert report.summaries > 0  # the window filled and was summarised: the facts left it, the memory kept them
    assert (report.overflows, report.over_limit, report.pinned_broken) == (0, 0, 0)
    assert report.max_tokens <= report.window_tokens
    for recall in report.recalls:
        assert recall.in_block, recall.fact  # the memory block sent upstream held the value
        assert recall.in_fact_ids, recall.fact  # and the ChatTurn names the fact
        assert recall.answered, recall.fact  # and the upstream, which answers only from its prompt, said it
    assert report.warnings == 0 and report.ok


def test_the_upstream_answers_a_question_only_from_what_its_prompt_holds() -> None:
    fact = FACTS[0]
    answer = responder([fact])
    told = {"messages": [{"role": "system", "content": "<memories>sister: Ilse</memories>"}, ask(fact.question)]}
    untold = {"messages": [{"role": "system", "content": "<memories>nothing</memories>"}, ask(fact.question)]}
    assert answer(told) == "Ilse" and answer(untold) == UNKNOWN


def test_the_script_states_each_fact_in_the_first_100_turns_and_asks_at_the_end() -> None:
    messages = script(2000, FACTS)
    assert len(messages) == 2000
    for fact in FACTS:
        (said,) = [n for n, text in enumerate(messages) if fact.statement in text]
        assert said < 100
    assert messages[-len(FACTS) :] == [f.question for f in FACTS]


def ask(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
