"""The policy controller: the one place where agent-memory decides what to keep, how to search and what to
compact. Version 1 is a hand-written heuristic; its inputs and outputs are plain data and every decision it takes
is logged with them, so a learned policy trained on the exported log can replace it behind the same methods.

Hard constraints live here, not in the callers, so no policy can break them: a fast-path generation-0 memory is
never compacted, and no decision this controller takes ever deletes a raw log (the log is only ever rewritten by
an explicit `erase`, which is the user's act, not a policy's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agent_memory.cognition.salience import TextFeatures, memory_type_of
from agent_memory.config import DecayConfig, RetrievalConfig, SaveConfig
from agent_memory.models import DecisionPath, Memory, MemoryType, Role, SaveDecision
from agent_memory.scoring import memory_strength


@dataclass(frozen=True, slots=True)
class TurnSignals:
    """Everything the save decision sees about one turn."""

    text: TextFeatures
    role: Role
    phatic: bool
    valence: float
    arousal: float
    emotion_source: str
    """"caller" (the agent said so, and that always wins), "lexicon" (VADER and cues) or "llm"."""
    novelty: float
    """1 - the best cosine to a stored memory in the namespace (1.0 in an empty store)."""
    session_surprise: float
    """1 - the mean cosine to the turns just before it in its session (0.5 for a session's first turn)."""
    surprise: float
    gap_id: str | None = None
    """The open retrieval gap this turn is close to, if any."""
    answers_question: bool = False
    """The turn before it in its session asked something: a reply to a question usually carries the answer."""
    habituation: float = 0.0
    """The keep score only the best save.max_keep_share of the namespace's recent turns reached (policy/habituation.py)."""

    def features(self) -> dict[str, float]:
        """The numbers a learned policy trains on (logged with the decision)."""
        return {
            **self.text.as_dict(),
            "assistant": float(self.role is Role.ASSISTANT),
            "phatic": float(self.phatic),
            "valence": self.valence,
            "arousal": self.arousal,
            "novelty": round(self.novelty, 4),
            "session_surprise": round(self.session_surprise, 4),
            "surprise": round(self.surprise, 4),
            "near_gap": float(self.gap_id is not None),
            "answers_question": float(self.answers_question),
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """An LLM's answer for one turn, already validated: whether to keep it and how sure it is."""

    save: bool
    confidence: float
    memory_type: MemoryType
    importance: float
    reason: str
    model: str

    @property
    def keep_probability(self) -> float:
        """How likely the turn is worth keeping: the confidence of a "save", the complement of a "drop"."""
        return self.confidence if self.save else 1.0 - self.confidence


@dataclass(frozen=True, slots=True)
class SalienceWeights:
    """The heuristic's weights on the logit scale, one per kind of evidence that a turn is worth keeping.

    Set by hand from what each feature means, then the bias and a few weights tuned on the LoCoMo and LongMemEval
    dev splits (share of turns kept against share of gold evidence turns kept) and checked against the
    independently labelled set in tests/data/save_labels.jsonl; docs/benchmarks.md has the figures."""

    bias: float = -0.95
    names: float = 0.55
    numbers: float = 0.45
    time_refs: float = 0.7
    preference: float = 1.6
    plan: float = 0.9
    self_fact: float = 1.2
    event: float = 1.2
    procedure: float = 0.9
    length: float = 0.55
    first_person: float = 0.35
    question: float = -1.2
    reaction: float = -0.6
    boilerplate: float = -1.1
    assistant: float = -1.0
    emotion: float = 0.6
    novelty: float = 0.8
    answer: float = 1.2
    caps: dict[str, int] = field(default_factory=lambda: {"names": 3, "numbers": 2, "time_refs": 2, "self_fact": 2})


def surprise_of(novelty: float, session_surprise: float, *, novelty_weight: float) -> float:
    """How unexpected a turn is: new against the whole store, and unlike what was just said in its session."""
    return novelty_weight * novelty + (1.0 - novelty_weight) * session_surprise


class Policy(Protocol):
    """What a policy must answer; `HeuristicPolicy` is v1, a learned one trained on `agent-memory export policy`
    plugs in through `MemoryManager(policy=...)`."""

    version: str

    def threshold(self, signals: TurnSignals) -> float: ...
    def fast_path(self, signals: TurnSignals) -> str | None: ...
    def should_save(
        self, signals: TurnSignals, verdict: Verdict | None = None, *, llm_failure: str | None = None
    ) -> SaveDecision: ...
    def retrieval_config(self, *, budget_tokens: int | None = None, k: int | None = None) -> dict[str, Any]: ...
    def may_compact(self, memory: Memory, *, fast_path: bool) -> bool: ...
    def compaction_priority(self, memory: Memory, *, fast_path: bool, now: datetime, decay: DecayConfig) -> float: ...


class HeuristicPolicy:
    """Policy v1. `should_save`, `retrieval_config` and `compaction_priority` are its whole interface."""

    version = "heuristic-v1"

    def __init__(self, save: SaveConfig, retrieval: RetrievalConfig, weights: SalienceWeights | None = None) -> None:
        self.save = save
        self.retrieval = retrieval
        self.weights = weights or SalienceWeights()

    # ----- the save decision -------------------------------------------------------------------------

    def threshold(self, signals: TurnSignals) -> float:
        """The bar a turn must reach: the fixed one, or the namespace's habituated one where nearly every turn
        clears that; lower near an open retrieval gap, where something was already missed."""
        base = max(self.save.save_confidence_threshold, signals.habituation)
        return base * self.save.gap_threshold_reduction if signals.gap_id else base

    def fast_path(self, signals: TurnSignals) -> str | None:
        """Why a turn is kept without deliberation (an intense or a startling moment), or None."""
        if signals.phatic:
            return None
        if signals.arousal >= self.save.fast_path_arousal:
            return f"fast path: arousal {signals.arousal:.2f} >= {self.save.fast_path_arousal}"
        if signals.surprise >= self.save.fast_path_surprise:
            return f"fast path: surprise {signals.surprise:.2f} >= {self.save.fast_path_surprise}"
        return None

    def should_save(
        self, signals: TurnSignals, verdict: Verdict | None = None, *, llm_failure: str | None = None
    ) -> SaveDecision:
        """Phatic turns are dropped, intense or startling ones kept at once; then the LLM's verdict when there is
        one, else the heuristic's salience, is held against the threshold."""
        features = signals.features()
        if signals.phatic:
            return SaveDecision(
                False,
                "phatic: only greetings, thanks or acknowledgement",
                DecisionPath.RULE,
                MemoryType.EPISODIC,
                1.0,
                0.0,
                features,
            )
        kind = memory_type_of(signals.text)
        fast = self.fast_path(signals)
        if fast is not None:
            return SaveDecision(True, fast, DecisionPath.FAST, kind, 1.0, self._importance(signals, 0.8), features)
        bar = self.threshold(signals)
        if verdict is not None:
            keep = verdict.keep_probability
            reason = f"{verdict.model}: {verdict.reason} (keep {keep:.2f} vs threshold {bar:.2f})"
            return SaveDecision(
                keep >= bar, reason, DecisionPath.LLM, verdict.memory_type, keep, verdict.importance, features
            )
        salience = self.salience(signals)
        path = DecisionPath.FALLBACK if llm_failure else DecisionPath.HEURISTIC
        why = f"salience {salience:.2f} vs threshold {bar:.2f}: {self._explain(signals)}"
        if llm_failure:
            why = f"LLM failed ({llm_failure}); {why}"
        return SaveDecision(salience >= bar, why, path, kind, salience, self._importance(signals, salience), features)

    def salience(self, signals: TurnSignals) -> float:
        """The heuristic's probability that a turn is worth keeping, from its evidence on a logit scale."""
        w, t = self.weights, signals.text
        informative = t.names + t.numbers + t.time_refs + t.preference + t.plan + t.self_fact + t.event + t.procedure
        z = (
            w.bias
            + sum(getattr(w, name) * min(getattr(t, name), cap) for name, cap in w.caps.items())
            + w.preference * min(t.preference, 1)
            + w.plan * min(t.plan, 1)
            + w.event * min(t.event, 2)
            + w.procedure * min(t.procedure, 1)
            + w.length * math.log1p(t.words) / math.log1p(40)
            + w.first_person * min(t.first_person, 2) / 2
            + w.question * t.question_share * (1.0 if informative == 0 else 0.4)
            + w.reaction * t.reaction_share * (1.0 if informative == 0 else 0.5)
            + w.boilerplate * min(t.boilerplate, 2)
            + w.assistant * (signals.role is Role.ASSISTANT)
            + w.emotion
            * max(abs(signals.valence), signals.arousal)
            * (signals.emotion_source == "caller" or t.first_person > 0)
            + w.novelty * signals.novelty
            + w.answer * signals.answers_question
        )
        return 1.0 / (1.0 + math.exp(-z))

    def _importance(self, signals: TurnSignals, salience: float) -> float:
        return round(min(1.0, 0.6 * salience + 0.25 * signals.arousal + 0.15 * abs(signals.valence)), 4)

    def _explain(self, signals: TurnSignals) -> str:
        t = signals.text
        found = [
            f"{n} {label}"
            for n, label in (
                (t.names, "names"),
                (t.numbers, "numbers"),
                (t.time_refs, "time words"),
                (t.preference, "preferences"),
                (t.plan, "plans"),
                (t.self_fact, "facts about the speaker"),
                (t.event, "events"),
                (t.procedure, "instructions"),
            )
            if n
        ]
        if t.reaction_share:
            found.append(f"{t.reaction_share:.0%} reaction")
        if t.question_share:
            found.append(f"{t.question_share:.0%} question")
        found.append(f"novelty {signals.novelty:.2f}")
        return ", ".join(found)

    # ----- retrieval and compaction ------------------------------------------------------------------

    def retrieval_config(self, *, budget_tokens: int | None = None, k: int | None = None) -> dict[str, Any]:
        """Search settings for one query: past 2,048 tokens a budget needs a deeper pool per layer (one candidate
        per 64 tokens), or it stays half empty (LoCoMo at 8,192 tokens filled 3,765 with 50 per layer). The `k`
        best need only the best fused candidates read and weighed: three per result, at least `retrieve_finalists`
        (`finalists` is None for a context, which weighs them all)."""
        limit = self.retrieval.candidate_limit
        if budget_tokens is not None:
            limit = max(limit, budget_tokens // 64)
        finalists = None if k is None else max(self.retrieval.retrieve_finalists, 3 * k)
        return {"candidate_limit": limit, "finalists": finalists, "graph_depth": self.retrieval.graph_depth}

    def may_compact(self, memory: Memory, *, fast_path: bool) -> bool:
        """Hard rule: a generation-0 memory kept on the fast path stays as it was said."""
        return not (fast_path and memory.generation == 0)

    def compaction_priority(self, memory: Memory, *, fast_path: bool, now: datetime, decay: DecayConfig) -> float:
        """How much a memory wants consolidating, 0..1: faded, unimportant, calm memories first; never a
        protected one (0.0)."""
        if not self.may_compact(memory, fast_path=fast_path):
            return 0.0
        strength = memory_strength(memory, now, decay)
        return round((1.0 - strength) * (1.0 - 0.5 * memory.importance) * (1.0 - 0.5 * memory.arousal), 4)
