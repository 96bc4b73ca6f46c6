"""Versioned facts (issue #20, seed "agent-memory"): (subject, attribute, value) with four times, as in Graphiti.

`remember_fact` states a value true from `valid_at` (default: now). The same value again is one more observation of
it. On a single-valued attribute a new value closes the one true at `valid_at`: its open-ended row is retired
(expired now) and recorded again ending at `valid_at`, and the new value runs until the next known value, if the
statement is about the past. Nothing is deleted, so `facts(as_of=X)` answers "what was true on X" and
`facts(known_at=X)` "what did we know on X". A multi-valued attribute (`facts.multi_valued`) holds its values side by
side. The plan is made inside the transaction that writes it (storage/fact_records.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from agent_memory.cognition.fact_extraction import Candidate
from agent_memory.errors import InvalidInput
from agent_memory.fact_extractors import SPEAKER, FactExtractor, HeuristicFactExtractor
from agent_memory.models import Fact, FactDecision, LogRecord, new_id
from agent_memory.storage.fact_records import FactPlan, Observed
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import check_aware, check_identifier

KEY_MAX, VALUE_MAX, SOURCE_MAX = 200, 1000, 200
CONFIDENCE = 0.8
"""The confidence of a fact an extractor found (a statement the caller makes itself is 1.0 by default)."""
_SPACE = re.compile(r"\s+")


def normalised(text: str) -> str:
    """A key as facts compare it: case folded, underscores and runs of whitespace one space ("allergic_to" is
    "Allergic  to")."""
    return _SPACE.sub(" ", text.replace("_", " ")).strip().casefold()


@dataclass(frozen=True, slots=True)
class Statement:
    namespace: str
    subject: str
    attribute: str
    value: str
    valid_at: datetime
    recorded_at: datetime
    confidence: float
    source: str | None


class Facts:
    """remember_fact, facts and fact_history over the records; the manager delegates to it."""

    def __init__(
        self,
        records: SqliteRecords,
        *,
        multi_valued: Iterable[str],
        clock: Callable[[], datetime],
        extractor: FactExtractor | None = None,
    ) -> None:
        self._records, self._clock = records, clock
        self._multi = frozenset(normalised(a) for a in multi_valued)
        self.extractor: FactExtractor = extractor or HeuristicFactExtractor()

    async def remember(
        self,
        subject: str,
        attribute: str,
        value: str,
        *,
        valid_at: datetime | None = None,
        source: str | None = None,
        confidence: float = 1.0,
        namespace: str = "default",
    ) -> Fact:
        """State a fact; returns the row that now holds the value (a new one, or the one observed again)."""
        now = self._clock()
        said = Statement(
            check_identifier("namespace", namespace),
            _key("subject", subject),
            _key("attribute", attribute),
            _text("value", value, VALUE_MAX),
            now if valid_at is None else check_aware("valid_at", valid_at),
            now,
            _confidence(confidence),
            None if source is None else _text("source", source, SOURCE_MAX),
        )
        return (await self._state(said))[0]

    async def _state(self, said: Statement) -> tuple[Fact, FactPlan]:
        multi = said.attribute in self._multi
        key = (said.namespace, said.subject, said.attribute)
        return await self._records.change_fact(key, said.recorded_at, lambda rows: plan(rows, said, multi=multi))

    async def observe(self, records: Sequence[LogRecord]) -> list[FactDecision]:
        """The write path's step: the facts each user turn states about its speaker, as the extractor finds them
        (fact_extractors.py: the offline rules or the LLM), each through the policy step (STORE, MERGE, SUPERSEDE
        or REJECT) and logged with its reason. The speaker of a user turn is the subject "user" (a namespace is one
        person's memory); an assistant's turn states no fact about the user (what it suggests is not what the user
        said)."""
        found = await self.extractor.candidates(records)
        now = self._clock()
        decisions = [await self._decide(record, candidate, now) for record, candidate in found]
        if decisions:
            await self._records.log_fact_decisions(decisions)
        return decisions

    async def _decide(self, record: LogRecord, candidate: Candidate, now: datetime) -> FactDecision:
        where = (record.namespace, record.turn_id, candidate.subject, normalised(candidate.attribute), candidate.value)
        if candidate.value.casefold() in {SPEAKER, "me", "myself"}:
            return FactDecision(*where, "REJECT", "the value is the speaker", candidate.rule, None, now)
        said = Statement(
            record.namespace, candidate.subject, normalised(candidate.attribute), candidate.value,
            candidate.valid_at or record.at, now, CONFIDENCE, record.turn_id,
        )  # fmt: skip
        fact, made = await self._state(said)
        action, reason = _action(made, said.attribute in self._multi)
        said_as = f': "{candidate.evidence}"' if candidate.evidence else ""
        reason = f"{reason} ({candidate.rule} rule{said_as})"
        return FactDecision(*where, action, reason, candidate.rule, fact.fact_id, now)

    async def facts(
        self,
        subject: str | None = None,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str = "default",
    ) -> list[Fact]:
        """The facts true at `as_of` as the store knew them at `known_at` (both default to now; `as_of` defaults
        to `known_at` when only that is given)."""
        check_identifier("namespace", namespace)
        known = self._clock() if known_at is None else check_aware("known_at", known_at)
        true_at = known if as_of is None else check_aware("as_of", as_of)
        wanted = None if subject is None else _key("subject", subject)
        return await self._records.facts_at(namespace, wanted, true_at=true_at, known_at=known)

    async def history(self, subject: str, attribute: str, *, namespace: str = "default") -> list[Fact]:
        """Every value the store holds for (subject, attribute), with its interval, in world order."""
        check_identifier("namespace", namespace)
        return await self._records.believed_history(namespace, _key("subject", subject), _key("attribute", attribute))


def plan(rows: list[Fact], said: Statement, *, multi: bool) -> FactPlan:
    """What a statement changes, given the rows now believed for its key (ordered by valid_at). Pure."""
    key, at = normalised(said.value), said.valid_at
    covering = [r for r in rows if r.valid_at <= at and (r.invalid_at is None or r.invalid_at > at)]
    same = next((r for r in covering if normalised(r.value) == key), None)
    if same is not None:
        return FactPlan(observe=Observed(same.fact_id, said.source, said.confidence), result=same.fact_id)
    new = _fact(said, at, None)
    if multi:
        return FactPlan(record=[new], result=new.fact_id)
    changed = FactPlan()
    if covering:  # the value true then ends where the new one starts (wholly replaced when both start together)
        old = covering[0]
        changed.expire.append(old.fact_id)
        if old.valid_at < at:
            changed.record.append(replace(old, fact_id=new_id(), invalid_at=at, recorded_at=said.recorded_at))
        new = replace(new, invalid_at=old.invalid_at)
    else:  # a statement about a time before every known value: it runs until the first of them
        later = min((r for r in rows if r.valid_at > at), key=lambda r: r.valid_at, default=None)
        if later is not None and normalised(later.value) == key:  # the same value, known from later: extend it
            changed.expire.append(later.fact_id)
            count, sources = later.observation_count + 1, _sources(later.sources, said.source)
            new = replace(new, invalid_at=later.invalid_at, observation_count=count, sources=sources)
        elif later is not None:
            new = replace(new, invalid_at=later.valid_at)
    changed.record.append(new)
    changed.result = new.fact_id
    return changed


def _action(made: FactPlan, multi: bool) -> tuple[str, str]:
    """What the plan did, as the policy step's action."""
    if made.observe is not None:
        return "MERGE", "the same value again: one more observation"
    if made.expire and not multi:
        return "SUPERSEDE", "a new value for a single-valued attribute closes the one true then"
    return "STORE", "a value the store did not hold" + (" (one of several)" if multi else "")


def _fact(said: Statement, valid_at: datetime, invalid_at: datetime | None) -> Fact:
    sources = (said.source,) if said.source else ()
    return Fact(
        new_id(), said.namespace, said.subject, said.attribute, said.value, valid_at, invalid_at,
        said.recorded_at, None, said.confidence, 1, sources,
    )  # fmt: skip


def _sources(known: tuple[str, ...], source: str | None) -> tuple[str, ...]:
    return known if source is None or source in known else (*known, source)


def _key(field: str, value: object) -> str:
    return normalised(_text(field, value, KEY_MAX))


def _text(field: str, value: object, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or "\x00" in value:
        raise InvalidInput(f"{field} must be non-empty text of at most {limit} characters, not {value!r}")
    return value.strip()


def _confidence(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise InvalidInput(f"confidence must be a number from 0 to 1, not {value!r}")
    return float(value)
