"""A batch of memories as graph rows: the nodes and edges KuzuGraph upserts, or the CSV files a rebuild loads with
COPY. Pure: no Kuzu here."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agent_memory.projection_models import GraphMemory
from agent_memory.storage.cypher import ATTACHED_WEIGHT, CSV_HEADERS

Edge = tuple[str, str]


SESSION_KEYS = 2
"""The format of a Session node's id (records' projection_formats): 2 is `session_key`'s."""


def session_key(namespace: str, session_id: str) -> str:
    """A Session node's id: the namespace's length first, so no two (namespace, session) pairs share one ("team" +
    "x/chat" and "team/x" + "chat" did when the id was "namespace/session")."""
    return f"{len(namespace)}:{namespace}/{session_id}"


def naive_utc(at: datetime) -> datetime:
    """Kuzu drops a tzinfo without converting, so convert first; a naive time is taken to be UTC already."""
    return at if at.tzinfo is None else at.astimezone(UTC).replace(tzinfo=None)


@dataclass
class Projection:
    """What a batch of memories puts in the graph; upsert and rebuild both load this, so they agree."""

    memories: dict[str, tuple[str, str, datetime]] = field(default_factory=dict)  # id -> namespace, type, time
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> namespace, session_id
    entities: set[str] = field(default_factory=set)
    edges: dict[str, list[Edge]] = field(default_factory=lambda: {"MENTIONS": [], "IN_SESSION": [], "NEXT": []})
    attached: list[Edge] = field(default_factory=list)  # image -> its turn's memory (RELATED_TO)
    links: list[tuple[str, str, str, float, datetime]] = field(default_factory=list)  # memory_links rows


def project(memories: Iterable[GraphMemory]) -> Projection:
    p = Projection()
    for m in {m.memory_id: m for m in memories}.values():  # a repeated id: the last one wins
        p.memories[m.memory_id] = (m.namespace, str(m.memory_type), naive_utc(m.created_at))
        if m.session_id is not None:
            key = session_key(m.namespace, m.session_id)
            p.sessions[key] = (m.namespace, m.session_id)
            p.edges["IN_SESSION"].append((m.memory_id, key))
        names = list(dict.fromkeys(name for name in m.entities if name))
        p.entities.update(names)
        p.edges["MENTIONS"].extend((m.memory_id, name) for name in names)
        if m.previous_in_session is not None:
            p.edges["NEXT"].append((m.previous_in_session, m.memory_id))
        if m.attached_to is not None:
            p.attached.append((m.memory_id, m.attached_to))
        p.links.extend((m.memory_id, dst, rel, weight, naive_utc(at)) for dst, rel, weight, at in m.links)
    return p


def write_csvs(directory: Path, p: Projection) -> dict[str, Path]:
    """One CSV per non-empty table, nodes before rels; NEXT only where both ends are in the batch."""
    tables: dict[str, Sequence[tuple[str, ...]]] = {
        "Memory": [(i, ns, kind, at.isoformat(sep=" ")) for i, (ns, kind, at) in p.memories.items()],
        "Entity": [(name,) for name in sorted(p.entities)],
        "Session": [(key, *value) for key, value in p.sessions.items()],
        "MENTIONS": p.edges["MENTIONS"],
        "IN_SESSION": p.edges["IN_SESSION"],
        "NEXT": [(src, dst) for src, dst in p.edges["NEXT"] if src in p.memories],
        "RELATED_TO": [(src, dst, str(ATTACHED_WEIGHT), "true") for src, dst in p.attached if dst in p.memories]
        + [(src, dst, str(w), "false") for src, dst, rel, w, _ in p.links if rel == "RELATED_TO" and dst in p.memories],
        "EVOLVED_FROM": [(src, dst) for src, dst, rel, _, _ in p.links if rel == "EVOLVED_FROM" and dst in p.memories],
        "SUPERSEDES": [(src, dst) for src, dst, rel, _, _ in p.links if rel == "SUPERSEDES" and dst in p.memories],
        "DREAM_LINK": [
            (src, dst, str(w), at.isoformat(sep=" "))
            for src, dst, rel, w, at in p.links
            if rel == "DREAM_LINK" and dst in p.memories
        ],
    }
    files: dict[str, Path] = {}
    for table, rows in tables.items():
        if rows:
            files[table] = directory / f"{table}.csv"
            with files[table].open("w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh, lineterminator="\n")
                writer.writerow(CSV_HEADERS.get(table, ("name",) if table == "Entity" else ("from", "to")))
                writer.writerows(rows)
    return files
