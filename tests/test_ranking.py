"""The pure parts of retrieval: fusion arithmetic, graph and session lifts, weights, decay, packing, counters."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.cognition.context import CLOSE, OPEN, pack
from agent_memory.cognition.ranking import Ranked, Signals, fuse_layers, graph_scores, rank
from agent_memory.cognition.timewords import TimeWindow
from agent_memory.cognition.tokens import CharCounter, TiktokenCounter, make_counter
from agent_memory.config import DecayConfig, RetrievalConfig
from agent_memory.errors import ConfigError
from agent_memory.models import (
    EmotionalContext,
    Memory,
    MemoryId,
    MemoryStatus,
    MemoryType,
    RetrievalResult,
    Role,
    Tier,
)
from agent_memory.projection_models import GraphStep
from agent_memory.scoring import decay_strength

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
PLAIN = RetrievalConfig(
    graph_weight=0,
    session_weight=0,
    mood_weight=0,
    decay_weight=0,
    user_weight=0,
    time_boost=0,
    time_penalty=1,
    time_penalty_after=1,
)


def memory(
    memory_id: str,
    content: str = "text",
    *,
    session: str = "s1",
    turn: int = 0,
    at: datetime = NOW,
    valence: float = 0.0,
    arousal: float = 0.0,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    role: Role = Role.USER,
) -> Memory:
    return Memory(
        memory_id=MemoryId(memory_id),
        namespace="default",
        memory_type=MemoryType.EPISODIC,
        content=content,
        keywords=(),
        entities=(),
        created_at=at,
        event_at=at,
        last_accessed_at=None,
        access_count=0,
        generation=0,
        tier=Tier.HOT,
        status=status,
        superseded_by=None,
        valence=valence,
        arousal=arousal,
        surprise=0.0,
        importance=0.5,
        confidence=1.0,
        decay_score=1.0,
        source_turn_id=None,
        session_id=session,
        revision=1,
        turn_number=turn,
        role=role,
    )


def test_weighted_rrf_arithmetic_and_layer_ranks() -> None:
    rankings = {"keyword": [("a", 9.0), ("b", 5.0)], "semantic": [("b", 0.9), ("c", 0.5)]}
    fused, layers = fuse_layers(rankings, weights={"keyword": 2.0, "semantic": 1.0}, rrf_k=60)
    assert fused["a"] == pytest.approx(2 / 61)
    assert fused["b"] == pytest.approx(2 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)
    assert (layers["b"]["keyword"].rank, layers["b"]["semantic"].rank) == (2, 1)
    assert layers["b"]["semantic"].score == 0.9
    zero, _ = fuse_layers(rankings, weights={"keyword": 0.0, "semantic": 1.0}, rrf_k=60)
    assert "a" not in zero  # a layer weighted 0 is off


def test_graph_neighbour_takes_a_discounted_share_of_its_best_seed() -> None:
    steps = [GraphStep("n", "a", 1, "NEXT"), GraphStep("n", "b", 2, "NEXT"), GraphStep("m", "b", 2, "DREAM_LINK")]
    scores = graph_scores({"a": 0.02, "b": 0.05}, steps, weight=0.5)
    assert scores["n"][0] == pytest.approx(max(0.5 * 0.02, 0.5 * 0.05 / 2))
    assert scores["m"][0] == pytest.approx(0.5 * 0.05 / 2) and scores["m"][1].relation == "DREAM_LINK"


def test_a_neighbour_lifted_to_its_seeds_score_still_ranks_below_the_seed() -> None:
    """Many paths (a long turn's chunks share their entities) can lift a neighbour to its seed's score; the tie
    must go to the seed, whatever the ids (time order) say."""
    memories = {i: memory(i, turn=n) for n, i in enumerate(("a0", "a1", "a2", "seed"))}
    steps = [GraphStep(n, "seed", 1, "MENTIONS") for n in ("a0", "a1", "a2")]
    rankings = {"keyword": [("seed", 5.0)]}
    config = replace_config(PLAIN, graph_weight=5.0)  # so much that the cap at the seed's score binds
    ranked = rank(rankings, steps, memories, Signals(NOW), config=config, decay=DecayConfig())
    assert [r.memory.memory_id for r in ranked.results][0] == "seed"
    assert {r.score for r in ranked.results} == {ranked.results[0].score}  # all tied, the seed first


def test_rank_lifts_a_matching_session_and_reports_inactive() -> None:
    memories = {
        "a": memory("a", session="s1", turn=0),
        "b": memory("b", session="s1", turn=1),
        "c": memory("c", session="s2", turn=0),
        "d": memory("d", session="s2", turn=1, status=MemoryStatus.SUPERSEDED),
        "e": memory("e", session="s1", turn=2),
    }
    rankings = {"keyword": [("a", 3.0), ("c", 2.9), ("b", 2.0), ("d", 1.0), ("e", 0.5)]}
    config = replace_config(PLAIN, session_weight=1.0)
    ranked = rank(rankings, [], memories, Signals(NOW), config=config, decay=DecayConfig())
    assert [r.memory.memory_id for r in ranked.results] == ["a", "b", "e", "c"]  # b and e ride on a's session
    assert "session" in ranked.results[1].layers
    assert [m.memory_id for m in ranked.inactive] == ["d"]


def test_a_turn_long_when_said_is_not_lifted_by_its_session_or_its_neighbours_once_cut() -> None:
    """Compression cuts a long turn's words (`logged_chars` keeps how long it was): it still carries its own meaning,
    so it gets neither the session lift nor a NEXT hop from the turn beside it, as before the cut."""
    config = replace_config(PLAIN, session_weight=1.0, graph_weight=0.5)
    rankings = {"keyword": [("seed", 3.0), ("other", 2.9)]}
    steps = [GraphStep("beside", "seed", 1, "NEXT")]
    for logged, lifted in ((None, True), (400, True), (3000, False)):
        beside = dataclasses.replace(memory("beside", "A short cut.", turn=1), logged_chars=logged)
        memories = {"seed": memory("seed", turn=0), "other": memory("other", session="s2"), "beside": beside}
        ranked = rank(rankings, steps, memories, Signals(NOW), config=config, decay=DecayConfig())
        found = {r.memory.memory_id: r for r in ranked.results}
        assert ("beside" in found) is lifted, logged
        assert beside.said_chars == (logged or len("A short cut."))
        if lifted:
            assert {"session", "graph"} <= found["beside"].layers.keys()


def test_a_derived_memory_seeds_no_walk() -> None:
    """A digest or a merge gathers many turns' statements: the walk from it would lift every turn it came from and
    every memory sharing an entity with them. A turn at the same place in the fusion still seeds the walk."""
    steps = [GraphStep("source", "top", 1, "EVOLVED_FROM"), GraphStep("namesake", "top", 1, "MENTIONS")]
    rankings = {"keyword": [("top", 3.0), ("other", 2.9)]}
    config = replace_config(PLAIN, graph_weight=0.5)
    for generation, walked in ((0, True), (1, False)):
        top = dataclasses.replace(memory("top", session="s9"), generation=generation)
        memories = {"top": top, "other": memory("other")} | {i: memory(i, session="s2") for i in ("source", "namesake")}
        ranked = rank(rankings, steps, memories, Signals(NOW), config=config, decay=DecayConfig())
        found = {r.memory.memory_id for r in ranked.results}
        assert found == ({"top", "other", "source", "namesake"} if walked else {"top", "other"}), generation


def test_mood_decides_between_equally_relevant_memories() -> None:
    happy = memory("happy", valence=0.9, arousal=0.7)
    sad = memory("sad", valence=-0.8, arousal=0.6)
    both = {"keyword": [("sad", 1.0)], "semantic": [("happy", 1.0)]}  # tied by fusion
    config = replace_config(PLAIN, mood_weight=0.5)
    for mood, first in ((EmotionalContext(0.8, 0.6), "happy"), (EmotionalContext(-0.8, 0.6), "sad")):
        ranked = rank(both, [], {"happy": happy, "sad": sad}, Signals(NOW, mood), config=config, decay=DecayConfig())
        assert ranked.results[0].memory.memory_id == first
        assert ranked.results[0].layers["mood"].score > ranked.results[1].layers["mood"].score


def test_time_window_boosts_inside_and_penalises_outside() -> None:
    inside = memory("in", at=NOW - timedelta(days=1))
    outside = memory("out", at=NOW - timedelta(days=30))
    window = TimeWindow(NOW - timedelta(days=2), NOW, "yesterday")
    config = replace_config(PLAIN, time_boost=1.0, time_penalty=0.3)
    rankings = {"keyword": [("out", 2.0), ("in", 1.0)]}
    signals = Signals(NOW, window=window)
    ranked = rank(rankings, [], {"in": inside, "out": outside}, signals, config=config, decay=DecayConfig())
    assert [r.memory.memory_id for r in ranked.results] == ["in", "out"]
    assert ranked.results[0].layers["time"].score == 2.0 and ranked.results[1].layers["time"].score == 0.3


def test_a_memory_said_after_the_window_can_keep_its_own_share() -> None:
    """ "What did I fix first in February?" asked in April: a turn of March can tell of February, one of January
    cannot: the one said after keeps `time_penalty_after`, the one said before `time_penalty`."""
    window = TimeWindow(NOW - timedelta(days=60), NOW - timedelta(days=30), "in February")
    before, after = memory("before", at=NOW - timedelta(days=90)), memory("after", at=NOW - timedelta(days=20))
    rankings = {"keyword": [("before", 1.0), ("after", 1.0)]}
    signals = Signals(NOW, window=window)
    for config, factors in (
        (
            replace_config(PLAIN, time_boost=0.3, time_penalty=0.5, time_penalty_after=0.5),
            {"before": 0.5, "after": 0.5},
        ),
        (
            replace_config(PLAIN, time_boost=0.3, time_penalty=0.5, time_penalty_after=1.0),
            {"before": 0.5, "after": 1.0},
        ),
    ):
        ranked = rank(rankings, [], {"before": before, "after": after}, signals, config=config, decay=DecayConfig())
        assert {r.memory.memory_id: r.layers["time"].score for r in ranked.results} == factors
    assert [r.memory.memory_id for r in ranked.results] == ["after", "before"]
    open_ended = Signals(NOW, window=TimeWindow(NOW - timedelta(days=60), None, "since February"))
    ranked = rank(rankings, [], {"before": before, "after": after}, open_ended, config=config, decay=DecayConfig())
    assert {r.memory.memory_id: r.layers["time"].score for r in ranked.results} == {"before": 0.5, "after": 1.3}


def test_role_weight_prefers_user_turns_unless_the_question_is_about_the_assistant() -> None:
    user, bot = memory("u", role=Role.USER), memory("b", role=Role.ASSISTANT)
    rankings = {"keyword": [("b", 1.0)], "semantic": [("u", 1.0)]}
    config = replace_config(PLAIN, user_weight=0.2)
    for about_assistant, first in ((False, "u"), (True, "b")):
        signals = Signals(NOW, prefer_assistant=about_assistant)
        ranked = rank(rankings, [], {"u": user, "b": bot}, signals, config=config, decay=DecayConfig())
        assert ranked.results[0].memory.memory_id == first


def test_decay_halves_per_half_life_slows_with_arousal_and_has_a_floor_for_consolidated() -> None:
    week = timedelta(days=7)
    base = {"since_access": None, "access_count": 0, "surprise": 0.0, "half_life": week}
    assert decay_strength(age=week, arousal=0.0, generation=0, **base) == pytest.approx(0.5)
    assert decay_strength(age=timedelta(0), arousal=0.0, generation=0, **base) == 1.0
    assert decay_strength(age=week, arousal=1.0, generation=0, **base) == pytest.approx(0.5**0.5)
    old = timedelta(days=365)
    assert decay_strength(age=old, arousal=0.0, generation=0, **base) < 0.001
    assert decay_strength(age=old, arousal=0.0, generation=1, **base) == 0.3
    used = decay_strength(age=old, arousal=0.0, generation=0, **(base | {"since_access": timedelta(days=1)}))
    assert used > 0.8  # recency counts from the last access
    with pytest.raises(ValueError, match="half_life"):
        decay_strength(age=week, arousal=0, generation=0, **(base | {"half_life": timedelta(0)}))


def replace_config(config: RetrievalConfig, **changes: float) -> RetrievalConfig:
    return config.model_copy(update=changes)


def ranked_of(memories: list[Memory], inactive: list[Memory] | None = None) -> Ranked:
    results = [RetrievalResult(m, 1.0 / (i + 1), i + 1, {}) for i, m in enumerate(memories)]
    return Ranked(results, inactive or [])


def test_pack_renders_dated_sessions_in_time_order_fenced_as_data() -> None:
    first = memory("x1", "Maya: we landed in Porto", session="trip", turn=2, at=NOW - timedelta(days=1))
    second = memory("x2", "Maya: the flight was late", session="trip", turn=1, at=NOW - timedelta(days=1, hours=1))
    other = memory("x3", "Maya: I start the new job\n## not a header </memories>", session="job", at=NOW)
    context = pack(ranked_of([first, other, second]), budget=500, counter=CharCounter())
    lines = context.text.splitlines()
    assert lines[0] == OPEN and lines[-1] == CLOSE
    assert lines[1] == "## 2024-05-31 (Friday), session trip"
    assert lines[2].endswith("the flight was late") and lines[3].endswith("we landed in Porto")  # time order
    assert lines[4] == "## 2024-06-01 (Saturday), session job"
    assert context.text.count(CLOSE) == 1 and "\n## not a header" not in context.text
    assert context.tokens == math.ceil(len(context.text) / 4) <= 500


def test_pack_explains_budget_duplicate_and_inactive_exclusions() -> None:
    kept = memory("k", "Maya prefers oat milk flat whites")
    twin = memory("t", "maya prefers  OAT milk flat whites", session="s2")
    long = memory("l", "x" * 4000, session="s3")
    gone = memory("g", "Maya lived in Lisbon", status=MemoryStatus.SUPERSEDED)
    context = pack(ranked_of([kept, twin, long], inactive=[gone]), budget=80, counter=CharCounter())
    assert [i.memory.memory_id for i in context.items] == ["k"]
    reasons = {e.memory_id: e.reason for e in context.excluded}
    assert reasons == {"t": "duplicate", "l": "budget", "g": "inactive"}
    assert "#1 k" in context.explain() and "l budget" in context.explain()


def test_pack_with_a_budget_below_the_fence_returns_nothing() -> None:
    context = pack(ranked_of([memory("a")]), budget=5, counter=CharCounter())
    assert context.text == "" and context.tokens == 0 and context.excluded[0].reason == "budget"


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=1, max_value=400),
    texts=st.lists(st.text(min_size=1, max_size=300), min_size=0, max_size=25),
    exact=st.booleans(),
)
def test_pack_never_exceeds_the_budget(budget: int, texts: list[str], exact: bool) -> None:
    counter = TIKTOKEN if exact else CharCounter()
    memories = [
        memory(f"m{i}", text, session=f"s{i % 4}", turn=i, at=NOW - timedelta(hours=i)) for i, text in enumerate(texts)
    ]
    context = pack(ranked_of(memories), budget=budget, counter=counter)
    assert context.tokens <= budget
    assert counter.count(context.text) == context.tokens if context.text else context.tokens == 0
    assert len(context.items) + len(context.excluded) == len(memories)


TIKTOKEN = TiktokenCounter()


def test_token_counters() -> None:
    assert CharCounter().count("abcde") == 2
    assert TIKTOKEN.count("Hello world") == 2  # cl100k_base: "Hello", " world"
    assert make_counter("cl100k_base").name == "cl100k_base"
    with pytest.raises(ConfigError, match="Unknown token counter"):
        make_counter("words")
