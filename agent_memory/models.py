"""Frozen value types shared by every layer. No I/O here."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NewType

from agent_memory.ids import new_id as new_id  # re-exported: ids were made here before ids.py
from agent_memory.note_models import NoteMeta

MemoryId = NewType("MemoryId", str)
TurnId = NewType("TurnId", str)
Vector = Sequence[float]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Role(enum.StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MemoryType(enum.StrEnum):
    SEMANTIC = "semantic"
    PREFERENCE = "preference"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"


class Tier(enum.StrEnum):
    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


class MemoryStatus(enum.StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    MERGED = "merged"
    ERASED = "erased"
    FORGOTTEN = "forgotten"


class Media(enum.StrEnum):
    """What a memory is of: text said in a turn, or an image (its CLIP vector in the image collection)."""

    TEXT = "text"
    IMAGE = "image"


class DecisionPath(enum.StrEnum):
    FAST = "fast"
    LLM = "llm"
    HEURISTIC = "heuristic"
    FALLBACK = "fallback"
    RULE = "rule"


@dataclass(frozen=True, slots=True)
class EmotionalContext:
    """Valence in [-1, 1], arousal in [0, 1]."""

    valence: float = 0.0
    arousal: float = 0.0

    def __post_init__(self) -> None:
        if not -1.0 <= self.valence <= 1.0:
            raise ValueError(f"valence must be within [-1, 1], got {self.valence}")
        if not 0.0 <= self.arousal <= 1.0:
            raise ValueError(f"arousal must be within [0, 1], got {self.arousal}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> EmotionalContext | None:
        if data is None:
            return None
        return cls(float(data.get("valence", 0.0)), float(data.get("arousal", 0.0)))

    def as_dict(self) -> dict[str, float]:
        return {"valence": self.valence, "arousal": self.arousal}


@dataclass(frozen=True, slots=True)
class TurnInput:
    """One conversation turn as an agent hands it over."""

    session_id: str
    turn_number: int
    content: str | bytes
    role: str = "user"
    emotional_context: EmotionalContext | Mapping[str, float] | None = None
    at: datetime | None = None
    namespace: str = "default"
    images: Sequence[bytes | Path] = ()
    """Images shared with the turn (encoded bytes or a file): each becomes an image memory linked to it."""
    note: NoteMeta | None = None
    """A note's label (note_models.py): the turn is a note an agent wrote on purpose, and is always kept."""


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One JSONL line of the raw log."""

    turn_id: TurnId
    namespace: str
    session_id: str
    turn_number: int
    role: Role
    content: str
    at: datetime
    emotional_context: EmotionalContext | None
    checksum: str = ""
    images: tuple[str, ...] = ()
    """The images shared with the turn, as the store keeps them ("images/<sha256>.<ext>"), never their bytes:
    enough for crash recovery to rebuild their memories from the files written before the log line."""
    note: NoteMeta | None = None
    """A note's label, in the log so that recovery rebuilds the note as it was written."""


@dataclass(frozen=True, slots=True)
class LogPosition:
    segment: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class TurnRow:
    turn_id: TurnId
    namespace: str
    session_id: str
    turn_number: int
    role: Role
    at: datetime
    position: LogPosition
    checksum: str


@dataclass(frozen=True, slots=True)
class SaveDecision:
    save: bool
    reason: str
    path: DecisionPath
    memory_type: MemoryType = MemoryType.EPISODIC
    confidence: float = 1.0
    importance: float = 0.5
    features: Mapping[str, float] = field(default_factory=dict)
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """What the decision saw besides its features: the emotion and its source, the threshold, a nearby gap, the
    LLM and its failure. Logged with the decision for outcome assessment and policy export."""
    policy: str = ""


@dataclass(frozen=True, slots=True)
class Extraction:
    entities: tuple[str, ...]
    keywords: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Memory:
    memory_id: MemoryId
    namespace: str
    memory_type: MemoryType
    content: str
    keywords: tuple[str, ...]
    entities: tuple[str, ...]
    created_at: datetime
    event_at: datetime
    last_accessed_at: datetime | None
    access_count: int
    generation: int
    tier: Tier
    status: MemoryStatus
    superseded_by: MemoryId | None
    valence: float
    arousal: float
    surprise: float
    importance: float
    confidence: float
    decay_score: float
    source_turn_id: TurnId | None
    session_id: str | None
    revision: int
    turn_number: int | None = None
    role: Role | None = None  # the role of the source turn
    media: Media = Media.TEXT
    media_sha256: str | None = None  # an image's bytes: their SHA-256 ...
    media_path: str | None = None  # ... and where the store keeps them, relative to data_dir ("images/<sha256>.png")
    logged_chars: int | None = None
    """How long its turn was as logged, in characters, when compression has cut its words; None while `content` is
    the turn's words as logged, or was never a turn's. `said_chars` reads the one that applies."""
    original: str | None = None
    """The words of the turn it was made from, read back from the log: filled by `get(memory_id, original=True)`
    only (a compressed memory holds its salient sentences; the log, every word)."""
    history_length: int | None = None
    """How many earlier revisions `history()` keeps: filled by `get()` only (None where a memory is read in bulk)."""
    lineage: tuple[MemoryId, ...] = ()
    """The memories it was superseded or merged into, in order, the last the current one: filled by `get()` only."""

    @property
    def said_chars(self) -> int:
        """Its length as said, in characters: the logged turn's once compression cut it, else its content's."""
        return len(self.content) if self.logged_chars is None else self.logged_chars


def fresh_memory(
    *,
    namespace: str,
    memory_type: MemoryType,
    content: str,
    keywords: Sequence[str],
    entities: Sequence[str],
    created_at: datetime,
    event_at: datetime,
    **fields: Any,
) -> Memory:
    """A memory as it is made: a new id, hot, active, never accessed, at full strength, generation 0, revision 1,
    neutral and half important unless `fields` say otherwise (any other Memory field, by name)."""
    made: dict[str, Any] = {
        "last_accessed_at": None,
        "access_count": 0,
        "generation": 0,
        "tier": Tier.HOT,
        "status": MemoryStatus.ACTIVE,
        "superseded_by": None,
        "valence": 0.0,
        "arousal": 0.0,
        "surprise": 0.0,
        "importance": 0.5,
        "confidence": 1.0,
        "decay_score": 1.0,
        "source_turn_id": None,
        "session_id": None,
        "revision": 1,
    }
    return Memory(
        memory_id=MemoryId(new_id()),
        namespace=namespace,
        memory_type=memory_type,
        content=content,
        keywords=tuple(keywords),
        entities=tuple(entities),
        created_at=created_at,
        event_at=event_at,
        **(made | fields),
    )


@dataclass(frozen=True, slots=True)
class TurnResult:
    turn_id: TurnId
    position: LogPosition
    saved: bool
    memory_id: MemoryId | None
    decision: SaveDecision
    image_memory_ids: tuple[MemoryId, ...] = ()
    """One image memory per image shared with the turn, in order; kept whatever the text's decision."""
    chunk_memory_ids: tuple[MemoryId, ...] = ()
    """A turn over max_content_bytes: the memories it was split into, in order (`memory_id` is the first)."""

    @property
    def reason(self) -> str:
        return self.decision.reason

    @property
    def chunks(self) -> int:
        """How many chunk memories the turn became: 0 for a turn remembered whole (or not at all)."""
        return len(self.chunk_memory_ids)


@dataclass(frozen=True, slots=True)
class LayerHit:
    """One search layer's opinion of one memory."""

    layer: str
    rank: int  # 1-based; 0 for a weighting signal that ranks nothing (mood)
    score: float


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    memory: Memory
    score: float
    rank: int
    layers: Mapping[str, LayerHit]

    def explain(self) -> str:
        parts = [
            f"{h.layer} {h.score:.2f}" if h.rank == 0 else f"{h.layer} #{h.rank} ({h.score:.3f})"
            for h in self.layers.values()
        ]
        return f"fused {self.score:.4f} from " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class RetrievalGap:
    """A question the memory could not answer: its topic stays open for a while, so a turn that fills it is kept."""

    gap_id: str
    namespace: str
    query: str
    keywords: tuple[str, ...]
    best_score: float | None  # the best semantic similarity found, below the relevance floor
    opened_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Fact:
    """(subject, attribute, value) in a namespace: true in the world from `valid_at` until `invalid_at` (None: still
    true), held by the store from `recorded_at` until `expired_at` (None: still held). Keys are normalised."""

    fact_id: str
    namespace: str
    subject: str
    attribute: str
    value: str
    valid_at: datetime
    invalid_at: datetime | None
    recorded_at: datetime
    expired_at: datetime | None
    confidence: float
    observation_count: int
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FactDecision:
    """What the policy step did with one candidate fact, and why (facts.py; logged in fact_decisions)."""

    namespace: str
    turn_id: str | None
    subject: str
    attribute: str
    value: str
    action: str  # STORE, MERGE, SUPERSEDE or REJECT
    reason: str
    rule: str
    fact_id: str | None
    decided_at: datetime


@dataclass(frozen=True, slots=True)
class ContextFact:
    """A fact in a context's "known facts" block, and why it is there."""

    fact: Fact
    reason: str


@dataclass(frozen=True, slots=True)
class Revision:
    """An earlier revision of a memory: what it said (and its status) from `began_at` until the change at `ended_at`
    that made the next revision, and who made that change and why."""

    memory_id: MemoryId
    revision: int
    content: str
    status: MemoryStatus
    began_at: datetime
    ended_at: datetime
    change: str  # "update" (content changed in place) or "supersede" (a new memory replaced it)
    agent: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Disagreement:
    store: str
    kind: str
    ids: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.ids[:5]) + (" ..." if len(self.ids) > 5 else "")
        return f"{self.store}: {self.kind} ({len(self.ids)}): {shown}"


@dataclass(frozen=True, slots=True)
class DoctorReport:
    memories: int
    turns: int
    pending_outbox: int
    disagreements: tuple[Disagreement, ...]
    repaired: tuple[str, ...] = ()

    @property
    def consistent(self) -> bool:
        return not self.disagreements


@dataclass(frozen=True, slots=True)
class Reply:
    """The turn logged just after a memory's turn in its session, which the save decision did not keep: shown under
    the memory in a context ("Did you ski in Banff?" kept, "Yes, in July!" not). Read from the log (replies.py)."""

    turn_id: TurnId
    session_id: str
    turn_number: int
    role: Role
    at: datetime
    content: str


@dataclass(frozen=True, slots=True)
class ContextItem:
    """A memory that made it into a rendered context, with why it ranked where it did."""

    result: RetrievalResult
    tokens: int  # what its rendered line costs (its session header is counted with the first item), reply included
    reply: Reply | None = None
    """The turn after the memory's, not kept on its own, rendered under it (`retrieval.context_replies`)."""

    @property
    def memory(self) -> Memory:
        return self.result.memory


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A candidate left out of a context, and why: 'budget', 'duplicate' or 'inactive'."""

    memory_id: MemoryId
    rank: int
    score: float
    reason: str


@dataclass(frozen=True, slots=True)
class Context:
    """The rendered memory block for a prompt: never more than `budget` tokens by `counter`."""

    text: str
    tokens: int
    budget: int
    counter: str
    items: tuple[ContextItem, ...]
    excluded: tuple[Exclusion, ...]
    facts: tuple[ContextFact, ...] = ()
    """The "known facts" the text opens with (cognition/fact_block.py), each with why it is there."""

    @property
    def source_turn_ids(self) -> list[TurnId]:
        return [i.memory.source_turn_id for i in self.items if i.memory.source_turn_id is not None]

    def explain(self) -> str:
        lines = [
            f"{self.tokens}/{self.budget} tokens ({self.counter}), {len(self.facts)} facts, {len(self.items)} items"
        ]
        lines += [f"  * fact {c.fact.subject} | {c.fact.attribute} = {c.fact.value}: {c.reason}" for c in self.facts]
        lines += [f"  + #{i.result.rank} {i.memory.memory_id} {i.result.explain()}" for i in self.items]
        lines += [f"  - #{e.rank} {e.memory_id} {e.reason}" for e in self.excluded]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a sleep job, as its report row says."""

    run_id: int
    job: str
    started_at: datetime
    finished_at: datetime | None
    status: str
    """"running", "ok" or "failed"."""
    counts: Mapping[str, Any]
    error: str | None


@dataclass(frozen=True, slots=True)
class Compaction:
    """One merge as its history row tells it."""

    compaction_id: int
    namespace: str
    status: str  # trial, accepted, rejected
    merged_into: str | None
    source_ids: tuple[str, ...]
    method: str  # extractive or llm
    queries: tuple[str, ...]
    replay_before: float | None
    replay_after: float | None
    reason: str
    started_at: datetime
    finished_at: datetime | None
