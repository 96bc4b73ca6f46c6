"""Where the write path's candidate facts come from (issue #20): the offline rules, or an LLM with the rules as its
fallback (`facts.extractor`). This only finds candidates; facts.py's policy step decides what each does to the
store and logs it, whichever extractor found it.

The speaker of a user turn is the subject "user" (a namespace is one person's memory); an assistant's turn states
nothing about the user, whichever extractor reads it. The LLM is asked once per prompt-sized group of a
process_turns batch (llm/fact_prompt.py), the groups in flight together under the client's semaphore. A group
whose answer fails as a whole (the call, a timeout, an answer that is not the JSON asked for) is read by the
offline rules instead, with a warning: its turns are stored either way, and its facts still go through the policy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from agent_memory.cognition.fact_extraction import Candidate, extract
from agent_memory.config import FactsConfig
from agent_memory.errors import ConfigError, LLMError
from agent_memory.llm.client import LiteLLMClient
from agent_memory.llm.fact_prompt import FactTurn, StatedFact, ask_facts, batches
from agent_memory.models import LogRecord, Role

log = logging.getLogger(__name__)
SPEAKER = "user"
"""The subject of what a user turn says about its speaker ("I", "my")."""
LLM_RULE = "llm"
"""The rule of every candidate the LLM found, so its decisions say where it came from."""

Found = list[tuple[LogRecord, Candidate]]


class FactExtractor(Protocol):
    """Finds the candidate facts a batch of turns states, each with the turn it came from, in turn order."""

    name: str

    async def candidates(self, records: Sequence[LogRecord]) -> Found: ...


class HeuristicFactExtractor:
    """The offline first-person rules (cognition/fact_extraction.py), over the user turns only."""

    name = "heuristic"

    async def candidates(self, records: Sequence[LogRecord]) -> Found:
        users = [r for r in records if r.role is Role.USER]
        if not users:
            return []
        return await asyncio.to_thread(_extract_all, users)  # dateparser, behind the time words, is slow


def _extract_all(records: Sequence[LogRecord]) -> Found:
    return [(r, c) for r in records for c in extract(r.content, subject=SPEAKER, now=r.at)]


class LLMFactExtractor:
    """The configured LLM, asked for the user's own facts as validated JSON; the rules read a group it failed on.

    `dropped` counts the entries refused one by one since start, `fallbacks` the groups the rules took over."""

    name = "llm"

    def __init__(self, client: LiteLLMClient, fallback: HeuristicFactExtractor) -> None:
        self._client, self._fallback = client, fallback
        self.dropped = 0
        self.fallbacks = 0

    async def candidates(self, records: Sequence[LogRecord]) -> Found:
        turns = [FactTurn(r.role.value, r.content, r.at) for r in records]
        groups = [[records[i] for i in group] for group in batches(turns)]
        found = await asyncio.gather(*(self._group(group) for group in groups))
        return [pair for part in found for pair in part]

    async def _group(self, group: Sequence[LogRecord]) -> Found:
        turns = [FactTurn(r.role.value, r.content, r.at) for r in group]
        try:
            answer = await ask_facts(self._client, turns)
        except LLMError as exc:
            self.fallbacks += 1
            log.warning("LLM fact extraction failed on %d turns, the offline rules read them: %s", len(group), exc)
            return await self._fallback.candidates(group)
        if answer.dropped:
            self.dropped += len(answer.dropped)
            total = len(answer.dropped) + len(answer.facts)
            log.warning(
                "LLM fact answer: %d of %d entries dropped, the rest kept: %s",
                len(answer.dropped),
                total,
                "; ".join(answer.dropped)[:600],
            )
        return _unique([(group[fact.turn], _candidate(fact)) for fact in answer.facts])


def _candidate(fact: StatedFact) -> Candidate:
    return Candidate(SPEAKER, fact.attribute, fact.value, LLM_RULE, fact.valid_at, fact.evidence)


def _unique(found: Found) -> Found:
    """One candidate per (turn, attribute, value): a model that repeats itself observes nothing twice."""
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for record, candidate in found:
        attribute = " ".join(candidate.attribute.replace("_", " ").casefold().split())
        key = (record.turn_id, attribute, " ".join(candidate.value.casefold().split()))
        if key not in seen:
            seen.add(key)
            kept.append((record, candidate))
    return kept


def make_fact_extractor(config: FactsConfig, llm: LiteLLMClient | None) -> FactExtractor:
    """`facts.extractor`: "heuristic", "llm" (a model is needed), or "auto" (the LLM when one is configured)."""
    rules = HeuristicFactExtractor()
    if config.extractor == "heuristic":
        return rules
    if llm is not None and llm.enabled:
        return LLMFactExtractor(llm, rules)
    if config.extractor == "llm":
        raise ConfigError("facts.extractor is 'llm' but no LLM is configured (llm.model is empty)")
    return rules
