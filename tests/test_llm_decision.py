"""The save decision with an LLM: through litellm to a real OpenAI-compatible server on 127.0.0.1 (tests/llm_server.py).
Good verdicts decide; every kind of failure falls back to the heuristic, is logged, and loses no turn."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from llm_server import (
    ChatCompletionsServer,
    Reply,
    failing,
    hang_up,
    slow,
    truncated,
    turn_indices,
    verdicts,
    wrong_type,
)

from agent_memory import MemoryManager, TurnInput
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.models import DecisionPath, MemoryType

pytest_plugins = ["llm_server"]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
FACT = "My brother Tomas moved to Porto and works at a bakery there."


def answering(**overrides: Any) -> Callable[[dict[str, Any]], Reply]:
    return lambda request: Reply(json.dumps(verdicts(turn_indices(request), **overrides)))


@pytest.fixture
async def with_llm(
    judging_config: Config, embedder: Embedder, llm_server: ChatCompletionsServer
) -> AsyncIterator[tuple[MemoryManager, ChatCompletionsServer]]:
    config = judging_config.model_copy(update={"llm": llm_server.llm_config()})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        yield manager, llm_server


async def open_with(config: Config, embedder: Embedder, **llm: Any) -> MemoryManager:
    manager = MemoryManager(config.model_copy(update={"llm": config.llm.model_copy(update=llm)}), embedder=embedder)
    await manager.initialize()
    return manager


async def test_a_good_verdict_decides(with_llm: tuple[MemoryManager, ChatCompletionsServer]) -> None:
    manager, server = with_llm
    server.responder = answering(memory_type="preference", importance=0.8, reason="a lasting preference")
    result = await manager.process_turn("s1", 0, FACT, at=T0)
    assert result.saved and result.decision.path is DecisionPath.LLM
    assert "openai/test-model: a lasting preference" in result.reason and result.decision.confidence == 0.9
    memory = await manager.get(result.memory_id)
    assert memory.memory_type is MemoryType.PREFERENCE and memory.importance == 0.8
    assert len(server.requests) == 1 and FACT in server.requests[0]["messages"][-1]["content"]
    assert result.decision.inputs["llm"] == "openai/test-model"


async def test_a_confident_drop_and_a_doubtful_keep_are_both_held_to_the_threshold(
    with_llm: tuple[MemoryManager, ChatCompletionsServer],
) -> None:
    manager, server = with_llm
    server.responder = answering(save=False, confidence=0.9)
    dropped = await manager.process_turn("s1", 0, FACT, at=T0)
    server.responder = answering(save=True, confidence=0.45)
    doubtful = await manager.process_turn("s1", 1, "Tomas also plays the cello in a small orchestra.", at=T0)
    assert not dropped.saved and dropped.decision.confidence == pytest.approx(0.1)
    assert not doubtful.saved and doubtful.decision.path is DecisionPath.LLM
    assert (await manager.read_turn(dropped.turn_id)).content == FACT  # not kept, never lost


async def test_phatic_and_fast_path_turns_never_reach_the_llm(
    with_llm: tuple[MemoryManager, ChatCompletionsServer],
) -> None:
    manager, server = with_llm
    await manager.process_turn("s1", 0, "thanks!", at=T0)
    fast = await manager.process_turn("s1", 1, "we won", at=T0, emotional_context={"valence": 0.9, "arousal": 0.9})
    assert fast.decision.path is DecisionPath.FAST and server.requests == []


@pytest.mark.parametrize(
    ("responder", "expected"),
    [
        (truncated, "answer"),
        (wrong_type, "confidence"),
        (failing, "InternalServerError"),
        (hang_up, "openai/test-model"),
        (slow(5.0), "no answer within"),
    ],
    ids=["truncated", "wrong-type", "http-500", "hang-up", "slow"],
)
async def test_every_failure_falls_back_to_the_heuristic_and_is_logged(
    with_llm: tuple[MemoryManager, ChatCompletionsServer], responder: Any, expected: str
) -> None:
    manager, server = with_llm
    server.responder = responder
    result = await manager.process_turn("s1", 0, FACT, at=T0)
    assert result.decision.path is DecisionPath.FALLBACK and result.saved  # the heuristic keeps this fact
    failure = result.decision.inputs["llm_failure"]
    assert expected.lower() in failure.lower() and result.reason.startswith("LLM failed")
    assert (await manager.read_turn(result.turn_id)).content == FACT
    rows = await manager.records._fetch("SELECT path, inputs FROM save_decisions WHERE turn_id = ?", (result.turn_id,))
    assert rows[0][0] == "fallback" and json.loads(rows[0][1])["llm_failure"] == failure


async def test_a_retry_after_a_failure_still_gets_the_verdict(
    judging_config: Config, embedder: Embedder, llm_server: ChatCompletionsServer
) -> None:
    from llm_server import fails_first

    llm_server.responder = fails_first(1)
    config = judging_config.model_copy(update={"llm": llm_server.llm_config(max_retries=1)})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        result = await manager.process_turn("s1", 0, FACT, at=T0)
    assert result.decision.path is DecisionPath.LLM and len(llm_server.requests) == 2


async def test_turns_are_judged_in_batches(
    judging_config: Config, embedder: Embedder, llm_server: ChatCompletionsServer
) -> None:
    config = judging_config.model_copy(update={"llm": llm_server.llm_config(batch_size=3)})
    texts = [f"My colleague number {i} is called Ana{i} and lives in Braga." for i in range(5)]
    async with MemoryManager.open(config, embedder=embedder) as manager:
        results = await manager.process_turns([TurnInput("s1", i, t, at=T0) for i, t in enumerate(texts)])
    assert sorted(len(turn_indices(r)) for r in llm_server.requests) == [2, 3]  # sent together: any order
    assert all(r.decision.path is DecisionPath.LLM for r in results)


async def test_the_llm_scores_emotion_unless_the_caller_did(
    judging_config: Config, embedder: Embedder, llm_server: ChatCompletionsServer
) -> None:
    llm_server.responder = answering(valence=-0.6, arousal=0.7)
    config = judging_config.model_copy(update={"llm": llm_server.llm_config(score_emotion=True)})
    async with MemoryManager.open(config, embedder=embedder) as manager:
        scored = await manager.process_turn("s1", 0, FACT, at=T0)
        given = await manager.process_turn(
            "s1", 1, "Tomas is getting married in June.", at=T0, emotional_context={"valence": 0.8, "arousal": 0.5}
        )
        scored_memory, given_memory = await manager.get(scored.memory_id), await manager.get(given.memory_id)
    assert (scored_memory.valence, scored_memory.arousal) == (-0.6, 0.7)
    assert scored.decision.inputs["emotion"]["source"] == "llm"
    assert (given_memory.valence, given_memory.arousal) == (0.8, 0.5)
    assert given.decision.inputs["emotion"]["source"] == "caller"


async def test_an_open_gap_lowers_the_bar_for_the_llm_too(
    with_llm: tuple[MemoryManager, ChatCompletionsServer],
) -> None:
    manager, server = with_llm
    await manager.retrieve("When is my dentist appointment?")
    server.responder = answering(save=True, confidence=0.4)
    near = await manager.process_turn("s1", 0, "dentist appointment moved to next Tuesday", at=T0)
    far = await manager.process_turn("s1", 1, FACT, at=T0)
    assert near.saved and near.decision.inputs["threshold"] == pytest.approx(0.35)
    assert not far.saved and far.decision.inputs["threshold"] == 0.5
