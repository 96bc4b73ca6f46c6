"""The graph projection in embedded Kuzu: memories, entities and sessions, and the edges between them.

Kuzu blocks, so every call runs on one owner thread. Kuzu 0.11 behaviours the queries below are shaped by:
- Only `{id: $param}` finds a node through the primary-key index; a key bound by UNWIND (`{id: row.id}`) scans
  the table, and two such patterns in one MATCH make a cross product (quadratic). So each batched statement is
  written for one row and `_batch` runs it per row for a few rows, once with UNWIND for many; edges in bulk go
  through `COPY rel FROM (UNWIND ...)` (fast, but it makes the commit checkpoint, so not for a few rows).
- MERGE of a node then MERGE of an edge to it in one UNWIND links rows to the wrong nodes; COPY and CREATE append
  duplicates. So an upsert deletes the edges a memory owns and creates them again, nodes first.
- An aware datetime parameter loses its offset unconverted (12:00+02:00 is stored as 12:00): times go in as naive UTC.
- A failed statement inside a manual transaction rolls the transaction back by itself.
- An empty list parameter cannot be typed, so a statement with nothing to do is not sent.
- COPY from a CSV file reads an empty field as NULL, and quoted newlines only when reading serially.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import kuzu

from agent_memory.errors import ClosedError, StorageError, StoreLocked
from agent_memory.models import GraphMemory, GraphStep, MemoryId

T = TypeVar("T")
Edge = tuple[str, str]
Row = dict[str, Any]

NODE_TABLES = {
    "Memory": "id STRING PRIMARY KEY, namespace STRING, type STRING, created_at TIMESTAMP",
    "Entity": "name STRING PRIMARY KEY",
    "Session": "id STRING PRIMARY KEY, namespace STRING, session_id STRING",
}
REL_TABLES = {
    "MENTIONS": "FROM Memory TO Entity",
    "RELATED_TO": "FROM Memory TO Memory, weight DOUBLE",
    "NEXT": "FROM Memory TO Memory",
    "IN_SESSION": "FROM Memory TO Session",
    "EVOLVED_FROM": "FROM Memory TO Memory",
    "DREAM_LINK": "FROM Memory TO Memory, weight DOUBLE, created_at TIMESTAMP",
}
CSV_HEADERS = {
    "Memory": ("id", "namespace", "type", "created_at"),
    "Session": ("id", "namespace", "session_id"),
    "RELATED_TO": ("from", "to", "weight", "attached"),
    "DREAM_LINK": ("from", "to", "weight", "created_at"),
}
WALK_RELS = ("NEXT", "EVOLVED_FROM", "RELATED_TO", "DREAM_LINK")  # Memory to Memory, strongest first
LABEL_RANK = {label: rank for rank, label in enumerate((*WALK_RELS, "IN_SESSION", "MENTIONS"))}
INDEX_LOOKUPS = 16  # up to this many rows, one indexed query per row beats one scanning UNWIND
ATTACHED_WEIGHT = 1.0  # the RELATED_TO edge from an image to the memory of the turn it was shared in

# Written for one row; `_batch` reads `$key` as `row.key` when it runs them over many rows with UNWIND.
CREATE_MEMORY = "CREATE (:Memory {id: $id, namespace: $namespace, type: $type, created_at: $created_at})"
CREATE_MEMORIES = "COPY Memory FROM (UNWIND $rows AS row RETURN row.id, row.namespace, row.type, row.created_at)"
UPDATE_MEMORY = "MATCH (m:Memory {id: $id}) SET m.namespace = $namespace, m.type = $type, m.created_at = $created_at"
MERGE_SESSION = "MERGE (s:Session {id: $key}) SET s.namespace = $namespace, s.session_id = $session_id"
MERGE_ENTITY = "MERGE (:Entity {name: $name})"
EXISTING = "MATCH (m:Memory {id: $id}) RETURN m.id"
# The edges a memory owns, replaced on every upsert: its entities, its session, and the NEXT edge into it.
UNLINK = {
    "MENTIONS": "MATCH (:Memory {id: $id})-[r:MENTIONS]->(x:Entity) DELETE r RETURN x.name",
    "IN_SESSION": "MATCH (:Memory {id: $id})-[r:IN_SESSION]->(x:Session) DELETE r RETURN x.id",
    "NEXT": "MATCH (:Memory {id: $id})<-[r:NEXT]-(:Memory) DELETE r",
}
LINK = {
    "MENTIONS": "MATCH (a:Memory {id: $src}), (b:Entity {name: $dst}) CREATE (a)-[:MENTIONS]->(b)",
    "IN_SESSION": "MATCH (a:Memory {id: $src}), (b:Session {id: $dst}) CREATE (a)-[:IN_SESSION]->(b)",
    "NEXT": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:NEXT]->(b)",
}
LINK_MANY = "COPY {rel} FROM (UNWIND $rows AS row RETURN row.src, row.dst)"
# An image owns one RELATED_TO edge, marked `attached`, to its turn's memory: replaced on upsert; the other
# RELATED_TO edges stay. The column came after the table, so a graph made before it gains it on open.
ADD_ATTACHED = "ALTER TABLE RELATED_TO ADD IF NOT EXISTS attached BOOLEAN DEFAULT false"
UNLINK_ATTACHED = "MATCH (:Memory {id: $id})-[r:RELATED_TO]->(:Memory) WHERE r.attached DELETE r"
LINK_ATTACHED = (
    "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:RELATED_TO {weight: $weight, attached: true}]->(b)"
)
LINK_ATTACHED_MANY = "COPY RELATED_TO FROM (UNWIND $rows AS row RETURN row.src, row.dst, row.weight, row.attached)"
# The link edges a memory owns (memory_links: dream exploration, consolidation), replaced when it is re-projected.
UNLINK_OWNED = {
    "DREAM_LINK": "MATCH (:Memory {id: $id})-[r:DREAM_LINK]->(:Memory) DELETE r",
    "EVOLVED_FROM": "MATCH (:Memory {id: $id})-[r:EVOLVED_FROM]->(:Memory) DELETE r",
    "RELATED_TO": "MATCH (:Memory {id: $id})-[r:RELATED_TO]->(:Memory) WHERE r.attached IS NULL OR NOT r.attached DELETE r",
}
LINK_OWNED = {
    "DREAM_LINK": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) "
    "CREATE (a)-[:DREAM_LINK {weight: $weight, created_at: $at}]->(b)",
    "EVOLVED_FROM": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:EVOLVED_FROM]->(b)",
    "RELATED_TO": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) "
    "CREATE (a)-[:RELATED_TO {weight: $weight, attached: false}]->(b)",
}
DROP_ORPHANS = {  # an entity or session nobody points to goes, so an erased memory leaves no names behind
    "MENTIONS": "MATCH (x:Entity {name: $key}) WHERE NOT EXISTS { MATCH (x)<-[:MENTIONS]-() } DELETE x",
    "IN_SESSION": "MATCH (x:Session {id: $key}) WHERE NOT EXISTS { MATCH (x)<-[:IN_SESSION]-() } DELETE x",
}
DELETE_MEMORY = "MATCH (m:Memory {id: $id}) DETACH DELETE m"
WALK = f"MATCH (:Memory {{id: $id}})-[r:{'|'.join(WALK_RELS)}]-(b:Memory) RETURN b.id, label(r)"
SHARED = (
    "MATCH (a:Memory {id: $id})-[r:MENTIONS|IN_SESSION]->()<-[:MENTIONS|IN_SESSION]-(b:Memory) "
    "WHERE b.id <> $id RETURN DISTINCT b.id, label(r)"
)
LINK_RELS = ("EVOLVED_FROM", "RELATED_TO", "DREAM_LINK")  # the edges only the graph holds (sleep jobs write them)
EXPAND = f"MATCH (a:Memory {{id: $id}})-[r:{'|'.join(LINK_RELS)}*1..$depth]-(b:Memory) RETURN b.id, length(r), properties(rels(r), '_label')"
# An image's attached edge does not count: the records answer that hop (an image and its turn share a source turn).
COUNT_LINKS = f"MATCH ()-[r:{'|'.join(LINK_RELS)}]->() WHERE r.attached IS NULL OR NOT r.attached RETURN count(r)"
ENTITIES = "MATCH (:Memory {id: $id})-[:MENTIONS]->(e:Entity) RETURN e.name ORDER BY e.name"
# Serial reading allows quoted newlines; NUL as the null string keeps an empty field an empty string.
COPY_CSV = "COPY {table} FROM '{path}' (header=true, parallel=false, null_strings=['\\u0000'])"

_open_paths: set[Path] = set()
_open_paths_lock = threading.Lock()


def _claim(path: Path) -> None:
    with _open_paths_lock:
        if path in _open_paths:
            raise StorageError(f"The graph at {path} is already open in this process; close it first")
        _open_paths.add(path)


def _release(path: Path) -> None:
    with _open_paths_lock:
        _open_paths.discard(path)


def _schema() -> list[str]:
    nodes = [f"CREATE NODE TABLE IF NOT EXISTS {name}({columns})" for name, columns in NODE_TABLES.items()]
    rels = [f"CREATE REL TABLE IF NOT EXISTS {name}({columns})" for name, columns in REL_TABLES.items()]
    return [*nodes, *rels, ADD_ATTACHED]


def _naive_utc(at: datetime) -> datetime:
    """Kuzu drops a tzinfo without converting, so convert first; a naive time is taken to be UTC already."""
    return at if at.tzinfo is None else at.astimezone(UTC).replace(tzinfo=None)


@dataclass
class _Projection:
    """What a batch of memories puts in the graph; upsert and rebuild both load this, so they agree."""

    memories: dict[str, tuple[str, str, datetime]] = field(default_factory=dict)  # id -> namespace, type, time
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> namespace, session_id
    entities: set[str] = field(default_factory=set)
    edges: dict[str, list[Edge]] = field(default_factory=lambda: {"MENTIONS": [], "IN_SESSION": [], "NEXT": []})
    attached: list[Edge] = field(default_factory=list)  # image -> its turn's memory (RELATED_TO)
    links: list[tuple[str, str, str, float, datetime]] = field(default_factory=list)  # memory_links rows


def _project(memories: Iterable[GraphMemory]) -> _Projection:
    p = _Projection()
    for m in {m.memory_id: m for m in memories}.values():  # a repeated id: the last one wins
        p.memories[m.memory_id] = (m.namespace, str(m.memory_type), _naive_utc(m.created_at))
        if m.session_id is not None:
            key = f"{m.namespace}/{m.session_id}"
            p.sessions[key] = (m.namespace, m.session_id)
            p.edges["IN_SESSION"].append((m.memory_id, key))
        names = list(dict.fromkeys(name for name in m.entities if name))
        p.entities.update(names)
        p.edges["MENTIONS"].extend((m.memory_id, name) for name in names)
        if m.previous_in_session is not None:
            p.edges["NEXT"].append((m.previous_in_session, m.memory_id))
        if m.attached_to is not None:
            p.attached.append((m.memory_id, m.attached_to))
        p.links.extend((m.memory_id, dst, rel, weight, _naive_utc(at)) for dst, rel, weight, at in m.links)
    return p


def _write_csvs(directory: Path, p: _Projection) -> dict[str, Path]:
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


def _first_labels(rows: Iterable[list[Any]]) -> dict[str, str]:
    """Each node once, with its strongest relation label."""
    best: dict[str, str] = {}
    for node, label in rows:
        if node not in best or LABEL_RANK[label] < LABEL_RANK[best[node]]:
            best[node] = label
    return best


def _last_label(labels: Any) -> str:
    return str(labels[-1]) if isinstance(labels, list) and labels else "RELATED_TO"


def _rank(entry: tuple[int, str]) -> tuple[int, int]:
    return entry[0], LABEL_RANK[entry[1]]


class KuzuGraph:
    """The graph store over one Kuzu database at `directory / "graph.kuzu"`, driven from a single owner thread."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kuzu")
        self._db: kuzu.Database | None = None
        self._conn: kuzu.Connection | None = None
        self._prepared: dict[str, kuzu.PreparedStatement] = {}  # parsing and planning cost more than running
        self._links: int | None = None  # how many link edges exist; None = not counted since the last change
        self._closed = False

    @classmethod
    async def open(cls, directory: Path) -> KuzuGraph:
        graph = cls(directory / "graph.kuzu")
        try:
            await graph._submit("open", graph._open_sync, directory)
        except BaseException:
            graph._closed = True
            graph._thread.shutdown(wait=False)
            raise
        return graph

    def _open_sync(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = (directory / "graph.kuzu").resolve()
        _claim(self._path)
        try:
            self._db = kuzu.Database(str(self._path))
            self._conn = kuzu.Connection(self._db)
            for statement in _schema():
                self._run(statement)
        except BaseException as exc:
            self._close_sync()
            if isinstance(exc, RuntimeError) and "Could not set lock" in str(exc):
                raise StoreLocked(str(self._path), None) from exc
            raise

    async def _submit(self, op: str, fn: Callable[..., T], /, *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        except (RuntimeError, OSError, csv.Error) as exc:  # Kuzu raises RuntimeError for every engine failure
            raise StorageError(f"Graph {op} failed for {self._path}: {exc}") from exc

    async def _call(self, op: str, fn: Callable[..., T], /, *args: Any) -> T:
        if self._closed:
            raise ClosedError("KuzuGraph")
        return await self._submit(op, fn, *args)

    def _run(self, query: str, **params: Any) -> list[list[Any]]:
        if any(isinstance(value, list) and not value for value in params.values()):
            return []  # nothing to do, and Kuzu cannot type an empty list parameter
        if self._conn is None:
            raise ClosedError("KuzuGraph")
        statement: str | kuzu.PreparedStatement = query
        if params:
            statement = self._prepared.get(query) or self._prepared.setdefault(
                query, kuzu.PreparedStatement(self._conn, query)
            )
        result = self._conn.execute(statement, params)
        return cast("list[list[Any]]", (result[-1] if isinstance(result, list) else result).get_all())

    def _batch(self, query: str, rows: list[Row], *, many: str = "") -> list[list[Any]]:
        """Run a one-row `query` for each row: indexed, row by row, for a few; for many, one UNWIND (or `many`)."""
        if len(rows) <= INDEX_LOOKUPS:
            return [out for row in rows for out in self._run(query, **row)]
        return self._run(many or "UNWIND $rows AS row " + query.replace("$", "row."), rows=rows)

    def _transaction(self, fn: Callable[[], T]) -> T:
        self._run("BEGIN TRANSACTION")
        try:
            value = fn()
        except BaseException:
            with contextlib.suppress(RuntimeError):  # Kuzu has already rolled back after a failed statement
                self._run("ROLLBACK")
            raise
        self._run("COMMIT")
        return value

    async def upsert_memories(self, memories: Sequence[GraphMemory]) -> None:
        """Add or replace memories with their session, entities and NEXT edge, in one transaction.
        Applying a batch twice is a no-op; a NEXT edge whose previous memory is not in the graph is left out."""
        if memories:
            await self._call("upsert", self._transaction, lambda: self._upsert_sync(_project(memories)))

    def _upsert_sync(self, p: _Projection) -> None:
        present = self._present(
            [
                *p.memories,
                *(src for src, _ in p.edges["NEXT"]),
                *(dst for _, dst in p.attached),
                *(x[1] for x in p.links),
            ]
        )
        old = [{"id": i} for i in p.memories if i in present]
        previous = {rel: self._batch(query, old) for rel, query in UNLINK.items()}  # before writing: scans stay fast
        # Sweep orphans now, before any edge is created: after a COPY-loaded rebuild, Kuzu 0.11's NOT EXISTS did not
        # see an IN_SESSION edge re-created in the same transaction and tried to delete a linked session. A session
        # or entity swept here that the batch still uses is merged back just below.
        self._drop_orphans(previous)
        rows = [{"id": i, "namespace": ns, "type": kind, "created_at": at} for i, (ns, kind, at) in p.memories.items()]
        self._batch(CREATE_MEMORY, [row for row in rows if row["id"] not in present], many=CREATE_MEMORIES)
        self._batch(UPDATE_MEMORY, [row for row in rows if row["id"] in present])
        sessions = [{"key": k, "namespace": ns, "session_id": sid} for k, (ns, sid) in p.sessions.items()]
        self._batch(MERGE_SESSION, sessions)
        self._batch(MERGE_ENTITY, [{"name": name} for name in sorted(p.entities)])
        next_edges = [(src, dst) for src, dst in p.edges["NEXT"] if src in present or src in p.memories]
        for rel, pairs in {**p.edges, "NEXT": next_edges}.items():
            self._batch(LINK[rel], [{"src": s, "dst": d} for s, d in pairs], many=LINK_MANY.format(rel=rel))
        self._link_attached(p, present)
        self._relink(p, present)

    def _relink(self, p: _Projection, present: set[str]) -> None:
        """Replace the link edges of the memories that own some (memory_links only grows, and a deleted memory
        takes its edges with it, so a memory without links has none to replace)."""
        if not p.links:
            return
        self._links = None
        owners = [{"id": i} for i in dict.fromkeys(src for src, *_ in p.links) if i in present]
        for query in UNLINK_OWNED.values():
            self._batch(query, owners)
        for src, dst, rel, weight, at in p.links:
            if dst in present or dst in p.memories:
                extra = {"weight": weight, "at": at} if rel == "DREAM_LINK" else {}
                extra = {"weight": weight} if rel == "RELATED_TO" else extra  # Kuzu refuses unused parameters
                self._run(LINK_OWNED[rel], src=src, dst=dst, **extra)

    def _link_attached(self, p: _Projection, present: set[str]) -> None:
        """Replace each image's RELATED_TO edge to its turn's memory (when that memory is in the graph)."""
        self._batch(UNLINK_ATTACHED, [{"id": s} for s, _ in p.attached if s in present])
        rows = [
            {"src": s, "dst": d, "weight": ATTACHED_WEIGHT} for s, d in p.attached if d in present or d in p.memories
        ]
        if len(rows) > INDEX_LOOKUPS:
            self._run(LINK_ATTACHED_MANY, rows=[{**row, "attached": True} for row in rows])
        else:
            self._batch(LINK_ATTACHED, rows)

    def _present(self, ids: list[str]) -> set[str]:
        """Which of these memories are in the graph: by index for a few ids, from one scan of all ids for many."""
        if len(ids) > INDEX_LOOKUPS:
            return {row[0] for row in self._run("MATCH (m:Memory) RETURN m.id")} & set(ids)
        return {row[0] for row in self._batch(EXISTING, [{"id": i} for i in dict.fromkeys(ids)])}

    def _drop_orphans(self, previous: dict[str, list[list[Any]]]) -> None:
        for rel, query in DROP_ORPHANS.items():
            self._batch(query, [{"key": key} for key in dict.fromkeys(row[0] for row in previous[rel])])

    async def delete_memories(self, ids: Iterable[MemoryId]) -> None:
        """DETACH DELETE these memories (unknown ids are ignored), then their orphaned entities and sessions."""
        unique = [{"id": str(i)} for i in dict.fromkeys(ids)]
        if unique:
            await self._call("delete", self._transaction, lambda: self._delete_sync(unique))

    def _delete_sync(self, ids: list[Row]) -> None:
        self._links = None
        previous = {rel: self._batch(UNLINK[rel], ids) for rel in DROP_ORPHANS}
        self._batch(DELETE_MEMORY, ids)
        self._drop_orphans(previous)

    async def memory_ids(self) -> set[str]:
        rows = await self._call("memory_ids", self._run, "MATCH (m:Memory) RETURN m.id")
        return {row[0] for row in rows}

    async def entities(self, memory_id: MemoryId) -> list[str]:
        """The names of the entities a memory mentions, sorted."""
        rows = await self._call("entities", lambda: self._run(ENTITIES, id=str(memory_id)))
        return [row[0] for row in rows]

    async def counts(self) -> dict[str, int]:
        """Rows per node table and per rel table, keyed by table name."""
        return await self._call("counts", self._counts_sync)

    def _counts_sync(self) -> dict[str, int]:
        nodes = {t: self._run(f"MATCH (n:{t}) RETURN count(n)")[0][0] for t in NODE_TABLES}
        rels = {t: self._run(f"MATCH ()-[r:{t}]->() RETURN count(r)")[0][0] for t in REL_TABLES}
        return {name: int(count) for name, count in (nodes | rels).items()}

    async def neighbours(self, memory_id: MemoryId, *, depth: int = 1) -> list[tuple[str, str]]:
        """Memories within `depth` Memory-to-Memory hops (either direction), plus those sharing an entity or a
        session (at depth 1); each with the label of the relation that first reached it. Nearest first, then the
        strongest relation (NEXT, EVOLVED_FROM, RELATED_TO, DREAM_LINK, IN_SESSION, MENTIONS), then by id."""
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        return await self._call("neighbours", self._neighbours_sync, str(memory_id), depth)

    def _neighbours_sync(self, start: str, depth: int) -> list[tuple[str, str]]:
        if depth == 0:
            return []
        found = self._walk(start, depth)
        for node, label in _first_labels(self._run(SHARED, id=start)).items():
            found[node] = min(found.get(node, (1, label)), (1, label), key=_rank)
        ordered = sorted(found.items(), key=lambda item: (*_rank(item[1]), item[0]))
        return [(node, label) for node, (_, label) in ordered]

    def _walk(self, start: str, depth: int) -> dict[str, tuple[int, str]]:
        """Breadth-first over Memory-to-Memory edges: node -> (hops, label of the edge that reached it)."""
        reached: dict[str, tuple[int, str]] = {}
        frontier = [start]
        for hops in range(1, depth + 1):
            step = {n: label for n, label in self._step(frontier).items() if n != start and n not in reached}
            reached.update((n, (hops, label)) for n, label in step.items())
            frontier = sorted(step)
        return reached

    def _step(self, frontier: list[str]) -> dict[str, str]:
        return _first_labels(self._batch(WALK, [{"id": node} for node in frontier]))

    async def expand(self, seeds: Sequence[str], *, depth: int) -> list[GraphStep]:
        """Walk out from `seeds` over the edges only the graph holds (EVOLVED_FROM, RELATED_TO, DREAM_LINK), up to
        `depth` hops. Each reached memory once, nearest first, attributed to the seed it was reached from.

        Session order and shared entities are answered by the records (SQLite) in well under a millisecond;
        here each query costs ~2.5 ms at 100k memories (Kuzu 0.11), so the walk is skipped while no such edge exists.
        """
        if depth <= 0 or not seeds or not await self._call("links", self._has_links):
            return []
        return await self._call("expand", self._expand_sync, list(dict.fromkeys(seeds)), depth)

    def _has_links(self) -> bool:
        if self._links is None:
            self._links = int(self._run(COUNT_LINKS)[0][0])
        return self._links > 0

    def _expand_sync(self, seeds: list[str], depth: int) -> list[GraphStep]:
        reached: dict[str, GraphStep] = {}
        for seed in seeds:
            for node, hops, labels in self._run(EXPAND.replace("$depth", str(depth)), id=seed):
                step = GraphStep(node, seed, int(hops), _last_label(labels))
                if node not in seeds and (node not in reached or step.hops < reached[node].hops):
                    reached[node] = step
        return sorted(reached.values(), key=lambda s: (s.hops, s.memory_id))

    async def rebuild(self, memories: Sequence[GraphMemory]) -> None:
        """Replace the whole graph with `memories`, bulk-loaded from CSV files; on failure the old graph stays."""
        await self._call("rebuild", self._rebuild_sync, memories)

    def _rebuild_sync(self, memories: Sequence[GraphMemory]) -> None:
        self._links = None
        with tempfile.TemporaryDirectory(prefix="agent-memory-graph-") as tmp:
            files = _write_csvs(Path(tmp), _project(memories))
            self._transaction(lambda: self._reload(files))

    def _reload(self, files: dict[str, Path]) -> None:
        self._prepared.clear()  # plans name the tables dropped below
        for table in [*REL_TABLES, *NODE_TABLES]:
            self._run(f"DROP TABLE IF EXISTS {table}")
        for statement in _schema():
            self._run(statement)
        for table, path in files.items():
            quoted = str(path).replace("\\", "\\\\").replace("'", "\\'")
            self._run(COPY_CSV.format(table=table, path=quoted))

    async def aclose(self) -> None:
        """Close the connection and the database and free the path for another open; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._submit("close", self._close_sync)
        finally:
            self._thread.shutdown(wait=False)

    def _close_sync(self) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
            if self._db is not None:
                self._db.close()
        finally:
            self._conn, self._db = None, None
            self._prepared.clear()
            _release(self._path)
