"""The save decision over turns already drafted: keep every turn (`save.keep_all`), a note as written, or ask the
policy controller, and the LLM about the turns its fast path leaves open; any failure of the LLM falls back to the
heuristic. Each namespace's keep share (habituation) is kept here. Everything a decision saw is put beside it.

A component the write path (write_path.py) is given; the signals it decides on are the write path's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from agent_memory.cognition.salience import TextFeatures
from agent_memory.cognition.save_decision import is_phatic
from agent_memory.config import Config
from agent_memory.errors import LLMError
from agent_memory.llm.client import LiteLLMClient
from agent_memory.llm.prompts import JudgedTurn, judge_turns
from agent_memory.models import DecisionPath, EmotionalContext, LogRecord, MemoryType, SaveDecision
from agent_memory.note_models import NoteKind
from agent_memory.policy.controller import Policy, TurnSignals, Verdict
from agent_memory.policy.habituation import KeepShare
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import TURNS_PER_SLICE

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Draft:
    """One turn on its way through the decision."""

    record: LogRecord
    text: TextFeatures
    phatic: bool
    emotion: EmotionalContext
    emotion_source: str
    entities: tuple[str, ...]
    vector: np.ndarray | None = None
    signals: TurnSignals | None = None
    previous: str | None = None
    """What was said just before this turn in its session (kept or not)."""
    earlier: list[tuple[str, bytes | None]] | None = None
    """(content, vector) of the memories just before this turn in its session, read while the model works; None
    when the batch itself holds enough turns before it."""
    kept: bool = False
    """It became a memory (its vector then counts in the novelty of the turns after it)."""


class SaveDecider:
    """`policy` decides; `llm`, when given, is asked first about the turns the policy's fast path leaves open."""

    def __init__(self, config: Config, policy: Policy, llm: LiteLLMClient | None, records: SqliteRecords) -> None:
        self.config, self.policy, self.llm, self.records = config, policy, llm, records
        self.keep_share = KeepShare(config.save)

    async def decide(self, drafts: Sequence[Draft]) -> list[SaveDecision]:
        """Each turn's decision, in order. A note is kept, never judged; `save.keep_all` keeps every turn but a
        phatic one; otherwise the policy decides, and the LLM (when configured) is asked about the turns its fast
        path leaves open."""
        notes = {id(d): note_decision(d) for d in drafts if d.record.note is not None}
        if notes:  # written on purpose: kept, never judged; the other turns of the batch are judged as ever
            judged = iter(await self.decide([d for d in drafts if id(d) not in notes]))
            return [notes[id(d)] if id(d) in notes else next(judged) for d in drafts]
        if self.config.save.keep_all:
            return [self._keep_all(d) for d in drafts]
        asked = [d for d in drafts if d.signals and not d.phatic and self.policy.fast_path(d.signals) is None]
        verdicts, failures = await self._ask_llm(asked)
        decisions = []
        for index, draft in enumerate(drafts):
            if index and index % TURNS_PER_SLICE == 0:
                await asyncio.sleep(0)  # a large batch lets other callers in between its slices
            assert draft.signals is not None
            namespace = draft.record.namespace
            if not self.keep_share.known(namespace):
                self.keep_share.warm(
                    namespace, await self.records.recent_keep_scores(namespace, self.keep_share.window)
                )
            draft.signals = replace(draft.signals, habituation=self.keep_share.bar(namespace))
            verdict, failure = verdicts.get(id(draft)), failures.get(id(draft))
            decision = self.policy.should_save(draft.signals, verdict, llm_failure=failure)
            if not draft.phatic:
                self.keep_share.record(namespace, decision.confidence)
            decisions.append(replace(decision, inputs=self._inputs(draft, failure), policy=self.policy.version))
        return decisions

    def _keep_all(self, draft: Draft) -> SaveDecision:
        assert draft.signals is not None
        if draft.phatic:
            return self.policy.should_save(draft.signals)
        reason = "kept: save.keep_all is on (an archive: every turn but a phatic one)"
        features = draft.signals.features()
        return SaveDecision(
            True,
            reason,
            DecisionPath.RULE,
            MemoryType.EPISODIC,
            1.0,
            0.5,
            features,
            self._inputs(draft, None),
            "keep-all",
        )

    async def _ask_llm(self, drafts: Sequence[Draft]) -> tuple[dict[int, Verdict], dict[int, str]]:
        """One call per llm.batch_size turns, all in flight together (the client's semaphore bounds them)."""
        if self.llm is None or not drafts:
            return {}, {}
        size = self.config.llm.batch_size
        groups = [drafts[i : i + size] for i in range(0, len(drafts), size)]
        answers = await asyncio.gather(*(self._judge(group) for group in groups))
        verdicts: dict[int, Verdict] = {}
        failures: dict[int, str] = {}
        for group, answer in zip(groups, answers, strict=True):
            for draft, outcome in zip(group, answer, strict=True):
                if isinstance(outcome, Verdict):
                    verdicts[id(draft)] = outcome
                else:
                    failures[id(draft)] = outcome
        return verdicts, failures

    async def _judge(self, group: Sequence[Draft]) -> list[Verdict | str]:
        assert self.llm is not None
        with_emotion = self.config.llm.score_emotion
        turns = [
            JudgedTurn(d.record.role.value, d.record.content, d.record.session_id, d.record.at, None) for d in group
        ]
        try:
            answers = await judge_turns(self.llm, turns, with_emotion=with_emotion)
        except LLMError as exc:
            log.warning("LLM save decision failed, the heuristic decides instead: %s", exc)
            return [str(exc)[:300]] * len(group)
        out: list[Verdict | str] = []
        for draft, answer in zip(group, answers, strict=True):
            if (
                with_emotion
                and draft.emotion_source != "caller"
                and answer.valence is not None
                and answer.arousal is not None
            ):
                draft.emotion, draft.emotion_source = EmotionalContext(answer.valence, answer.arousal), "llm"
            kind = MemoryType(answer.memory_type)
            out.append(Verdict(answer.save, answer.confidence, kind, answer.importance, answer.reason, self.llm.model))
        return out

    def _inputs(self, draft: Draft, failure: str | None) -> dict[str, Any]:
        assert draft.signals is not None
        inputs: dict[str, Any] = {
            "emotion": {**draft.emotion.as_dict(), "source": draft.emotion_source},
            "threshold": round(self.policy.threshold(draft.signals), 4),
            "habituation": round(draft.signals.habituation, 4),
            "gap_id": draft.signals.gap_id,
            "llm": self.llm.model if self.llm is not None else None,
        }
        if failure:
            inputs["llm_failure"] = failure
        return inputs


NOTE_MEMORY_TYPES = {
    NoteKind.DECISION: MemoryType.SEMANTIC,
    NoteKind.FACT: MemoryType.SEMANTIC,
    NoteKind.FINDING: MemoryType.SEMANTIC,
    NoteKind.PROCEDURE: MemoryType.PROCEDURAL,
    NoteKind.PREFERENCE: MemoryType.PREFERENCE,
}
"""A note's memory type by its kind; a plain note, a handoff and a worklog are episodes."""


def phatic(record: LogRecord) -> bool:
    """A note is never phatic: "thanks, that fixed it" written as a finding was meant to be kept."""
    return record.note is None and is_phatic(record.content)


def note_decision(draft: Draft) -> SaveDecision:
    assert draft.record.note is not None
    kind = draft.record.note.kind
    features = draft.signals.features() if draft.signals else {}
    return SaveDecision(
        True,
        f"written as a {kind.value} note",
        DecisionPath.RULE,
        NOTE_MEMORY_TYPES.get(kind, MemoryType.EPISODIC),
        1.0,
        0.8 if kind in NOTE_MEMORY_TYPES else 0.6,
        features,
        policy="note",
    )
