"""What the MCP tools answer (interfaces/mcp.py): the structured content each returns (its output schema), and the
text the model reads, built from the same items so that the two never disagree."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from agent_memory.models import Memory, RetrievalResult
from agent_memory.note_models import Note, NoteMeta


class Source(BaseModel):
    path: str | None = None
    commit: str | None = None
    line: int | None = None
    url: str | None = None


class Written(BaseModel):
    id: str = Field(description="the memory's id")
    revision: int = Field(description="its revision: pass it as expected_revision to change it")
    kind: str
    namespace: str


class BootSection(BaseModel):
    section: str
    id: str
    revision: int
    kind: str


class BootOut(BaseModel):
    text: str
    tokens: int
    budget_tokens: int
    handoff_id: str | None
    items: list[BootSection]
    omitted: int


class Recalled(BaseModel):
    id: str
    revision: int
    kind: str | None = Field(description="the note's kind; null for a memory of a conversation turn")
    text: str
    score: float
    source: Source | None = None
    layers: dict[str, int] | None = Field(default=None, description="with explain: each layer's rank")


class RecallOut(BaseModel):
    results: list[Recalled]
    tokens: int
    budget_tokens: int
    omitted: int


class HistoryEntry(BaseModel):
    revision: int
    text: str
    status: str
    began_at: datetime
    ended_at: datetime
    change: str
    agent: str | None
    reason: str | None


class MemoryOut(BaseModel):
    id: str
    revision: int
    status: str
    kind: str | None
    text: str
    namespace: str
    created_at: datetime
    superseded_by: str | None
    tags: list[str] = []
    agent: str | None = None
    source: Source | None = None
    stale: bool | None = Field(default=None, description="the source file changed since its commit (null: unknown)")
    stale_reason: str | None = None
    history: list[HistoryEntry] = []
    lineage: list[str] = Field(default=[], description="the memories this one was made from (a merge, a digest)")


class Listed(BaseModel):
    id: str
    revision: int
    kind: str
    text: str
    written_at: datetime
    tags: list[str]
    source: Source | None


class ListOut(BaseModel):
    notes: list[Listed]
    next_cursor: str | None


class Changed(BaseModel):
    id: str = Field(description="the memory as it is now (after supersede: the new one)")
    revision: int
    status: str
    replaced: str | None = Field(default=None, description="after supersede: the memory it replaced")


class FactOut(BaseModel):
    subject: str
    attribute: str
    value: str
    valid_at: datetime
    invalid_at: datetime | None
    recorded_at: datetime


class FactsOut(BaseModel):
    facts: list[FactOut]


class StatsOut(BaseModel):
    namespace: str
    notes: dict[str, int]
    memories: int
    data_dir: str
    daemon: str


def answer(text: str, out: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)], structured_content=out.model_dump(mode="json"))


def written_answer(note: Note, said: str) -> CallToolResult:
    out = Written(
        id=note.memory.memory_id,
        revision=note.memory.revision,
        kind=note.meta.kind.value,
        namespace=note.memory.namespace,
    )
    return answer(said, out)


def clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def source_of(meta: NoteMeta | None) -> Source | None:
    if meta is None or meta.source is None:
        return None
    return Source(**meta.source.as_dict())


def recalled(result: RetrievalResult, meta: NoteMeta | None, explain: bool) -> Recalled:
    memory = result.memory
    layers = {name: hit.rank for name, hit in result.layers.items() if hit.rank} if explain else None
    return Recalled(
        id=memory.memory_id,
        revision=memory.revision,
        kind=meta.kind.value if meta else None,
        text=memory.content,
        score=round(result.score, 4),
        source=source_of(meta),
        layers=layers,
    )


def recall_line(item: Recalled) -> str:
    where = ""
    if item.source is not None and (item.source.path or item.source.url):
        where = f" (source: {item.source.path or item.source.url}{f':{item.source.line}' if item.source.line else ''})"
    why = f" {{{', '.join(f'{k} #{v}' for k, v in item.layers.items())}}}" if item.layers else ""
    return f"- [{item.kind or 'turn'} {item.id} r{item.revision}] {clip(item.text, 1200)}{where}{why}"


def memory_out(memory: Memory, note: Note | None, history: Sequence[Any]) -> MemoryOut:
    meta = note.meta if note else None
    return MemoryOut(
        id=memory.memory_id,
        revision=memory.revision,
        status=memory.status.value,
        kind=meta.kind.value if meta else None,
        text=memory.content,
        namespace=memory.namespace,
        created_at=memory.created_at,
        superseded_by=memory.superseded_by,
        tags=list(meta.tags) if meta else [],
        agent=meta.agent if meta else None,
        source=source_of(meta),
        stale=note.stale if note else None,
        stale_reason=note.stale_reason if note else None,
        history=[
            HistoryEntry(
                revision=r.revision,
                text=r.content,
                status=r.status.value,
                began_at=r.began_at,
                ended_at=r.ended_at,
                change=r.change,
                agent=r.agent,
                reason=r.reason,
            )
            for r in history
        ],
        lineage=list(memory.lineage),
    )


def memory_text(out: MemoryOut) -> str:
    lines = [f"{out.kind or 'memory'} {out.id}, revision {out.revision}, {out.status}", out.text]
    if out.superseded_by:
        lines.append(f"superseded by {out.superseded_by}")
    if out.source is not None:
        lines.append(f"source: {out.source.model_dump(exclude_none=True)}")
    if out.stale is not None:
        lines.append(f"stale: {'yes' if out.stale else 'no'} ({out.stale_reason})")
    lines.extend(
        f"revision {e.revision} ({e.change} {e.ended_at:%Y-%m-%d %H:%M}): {clip(e.text, 300)}" for e in out.history
    )
    if out.lineage:
        lines.append(f"made from: {', '.join(out.lineage)}")
    return "\n".join(lines)
