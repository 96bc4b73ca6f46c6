"""Notes: what a coding agent writes on purpose (a decision, a finding, a handoff), and the boot context made of them.

A note is a turn with a label. It goes through the log like any turn, so the log stays the truth for what was
written and a crash between the log and SQLite is finished by recovery with the label intact; it always becomes a
memory (the agent chose to keep it), and its kind, tags, source and author sit beside the memory in the `notes`
table (migration 0024). Pure value types, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent_memory.errors import InvalidInput

if TYPE_CHECKING:
    from agent_memory.models import Memory


class NoteKind(enum.StrEnum):
    DECISION = "decision"
    FACT = "fact"
    FINDING = "finding"
    PROCEDURE = "procedure"
    PREFERENCE = "preference"
    NOTE = "note"
    HANDOFF = "handoff"
    WORKLOG = "worklog"


ALL_KINDS = tuple(kind.value for kind in NoteKind)
WRITABLE_KINDS = tuple(kind.value for kind in NoteKind if kind not in (NoteKind.HANDOFF, NoteKind.WORKLOG))
"""What `memory_write` takes; a handoff has its own call, a worklog is the Stop hook's."""
MAX_TAGS = 16
MAX_TAG_CHARS = 64
MAX_SOURCE_CHARS = 4096
MAX_NOTE_STEPS = 50
"""A handoff's next steps, and its warnings, at most."""


@dataclass(frozen=True, slots=True)
class NoteSource:
    """Where a note came from: a file (and the commit it was read at, and a line), or a URL."""

    path: str | None = None
    commit: str | None = None
    line: int | None = None
    url: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (("path", self.path), ("commit", self.commit), ("line", self.line), ("url", self.url))
            if v is not None
        }


@dataclass(frozen=True, slots=True)
class NoteMeta:
    """The label a note's log record carries (`"note"` in its JSON line) and its row in `notes` repeats."""

    kind: NoteKind
    tags: tuple[str, ...] = ()
    source: NoteSource | None = None
    agent: str | None = None

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind.value}
        if self.tags:
            body["tags"] = list(self.tags)
        if self.source is not None and self.source.as_dict():
            body["source"] = self.source.as_dict()
        if self.agent:
            body["agent"] = self.agent
        return body


def note_meta(
    kind: str | NoteKind,
    *,
    tags: Sequence[str] = (),
    source: NoteSource | Mapping[str, Any] | None = None,
    agent: str | None = None,
    allowed: Sequence[str] = ALL_KINDS,
) -> NoteMeta:
    """A checked label: a known kind, at most 16 short tags, a source of the four known fields. Raises
    InvalidInput saying which part is wrong."""
    value = kind.value if isinstance(kind, NoteKind) else kind
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(f"kind: {value!r} is not one of {', '.join(allowed)}")
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise InvalidInput("tags: expected a list of strings")
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"tags: {len(tags)} given, at most {MAX_TAGS}")
    clean: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip() or len(tag) > MAX_TAG_CHARS or "\x00" in tag:
            raise InvalidInput(f"tags: {tag!r} is not a tag (1-{MAX_TAG_CHARS} characters of text)")
        if tag.strip() not in clean:
            clean.append(tag.strip())
    if agent is not None and (not isinstance(agent, str) or len(agent) > MAX_TAG_CHARS or "\x00" in agent):
        raise InvalidInput(f"agent: {agent!r} is not a name (at most {MAX_TAG_CHARS} characters)")
    return NoteMeta(NoteKind(value), tuple(clean), _source(source), agent or None)


def _source(source: NoteSource | Mapping[str, Any] | None) -> NoteSource | None:
    if source is None or isinstance(source, NoteSource):
        return source
    if not isinstance(source, Mapping):
        raise InvalidInput("source: expected an object with path, commit, line and url")
    unknown = set(source) - {"path", "commit", "line", "url"}
    if unknown:
        raise InvalidInput(
            f"source: unknown field(s) {', '.join(sorted(map(str, unknown)))}; known: path, commit, line, url"
        )
    texts: dict[str, str | None] = {}
    for name in ("path", "commit", "url"):
        value = source.get(name)
        if value is not None and (
            not isinstance(value, str) or not value or len(value) > MAX_SOURCE_CHARS or "\x00" in value
        ):
            raise InvalidInput(f"source.{name}: expected text of 1-{MAX_SOURCE_CHARS} characters")
        texts[name] = value
    commit = texts["commit"]
    if commit is not None and not (4 <= len(commit) <= 64 and all(c in "0123456789abcdefABCDEF" for c in commit)):
        raise InvalidInput(f"source.commit: {commit!r} is not a commit hash (4-64 hex digits)")
    line = source.get("line")
    if line is not None and (isinstance(line, bool) or not isinstance(line, int) or not 1 <= line <= 10_000_000):
        raise InvalidInput(f"source.line: {line!r} is not a line number (1-10000000)")
    if not any(v is not None for v in (*texts.values(), line)):
        return None
    return NoteSource(texts["path"], commit, line, texts["url"])


def meta_from_json(data: Mapping[str, Any]) -> NoteMeta:
    """A label read back from the log or the notes table (written by `as_dict`)."""
    source = data.get("source")
    return NoteMeta(
        NoteKind(data["kind"]),
        tuple(data.get("tags", ())),
        NoteSource(**source) if source else None,
        data.get("agent"),
    )


@dataclass(frozen=True, slots=True)
class Note:
    """A memory written as a note, with its label. `stale` says the source file changed since its commit (None:
    unknown, as when there is no source, no commit or no git repository)."""

    memory: Memory
    meta: NoteMeta
    written_at: datetime
    stale: bool | None = None
    stale_reason: str | None = None


@dataclass(frozen=True, slots=True)
class NotePage:
    notes: list[Note]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class BootItem:
    section: str
    memory_id: str
    revision: int
    kind: NoteKind
    text: str


@dataclass(frozen=True, slots=True)
class Boot:
    """The boot context: its text (what an agent reads, inside `budget_tokens` counted with cl100k_base), the
    items it holds, and what was left out for the budget."""

    text: str
    tokens: int
    budget_tokens: int
    items: list[BootItem] = field(default_factory=list)
    omitted: int = 0
    handoff_id: str | None = None
