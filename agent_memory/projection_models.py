"""What the rebuildable projections hold and answer: the vectors' points and hits, the graph's memories and walk
steps, and the outbox rows that feed both (DESIGN: SQLite and the log are the truth; Qdrant and Kuzu follow them).
Frozen value types, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent_memory.models import MemoryId, MemoryType, Vector


@dataclass(frozen=True, slots=True)
class VectorItem:
    memory_id: MemoryId
    vector: Vector
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Between:
    """A `where` value for a numeric payload field: at least `gte` and below `lt` (None leaves that side open)."""

    gte: float | None = None
    lt: float | None = None


@dataclass(frozen=True, slots=True)
class VectorHit:
    memory_id: MemoryId
    score: float


@dataclass(frozen=True, slots=True)
class GraphMemory:
    """What the graph projection holds of a memory: enough to link it, nothing to rank it."""

    memory_id: MemoryId
    namespace: str
    memory_type: MemoryType
    created_at: datetime
    session_id: str | None
    previous_in_session: MemoryId | None
    entities: tuple[str, ...]
    attached_to: MemoryId | None = None
    """For an image shared in a turn: that turn's memory (a RELATED_TO edge, weight 1.0), if the turn was kept."""
    links: tuple[tuple[str, str, float, datetime], ...] = ()
    """The link edges this memory owns, from memory_links: (target id, relation, weight, created_at)."""


@dataclass(frozen=True, slots=True)
class GraphStep:
    """One memory reached by a graph walk: from which seed, in how many hops, over which relation."""

    memory_id: str
    seed: str
    hops: int
    relation: str


@dataclass(frozen=True, slots=True)
class OutboxItem:
    outbox_id: int
    op: str
    memory_id: MemoryId
    attempts: int
    scope: str = "all"
    """"all": project the memory to the graph and the vectors; "vectors": to the vectors only; "payload": only its
    tier or status changed, which the vector payload carries and the graph does not."""
    vectors_done: bool = False
    """The row's vector part is applied (a read did it); the graph part is what is left."""
