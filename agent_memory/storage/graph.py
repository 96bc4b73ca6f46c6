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
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

import kuzu

from agent_memory.errors import ClosedError, StorageError, StoreLocked
from agent_memory.models import GraphMemory, GraphStep, MemoryId
from agent_memory.storage.cypher import (
    ADD_ATTACHED,
    ATTACHED_WEIGHT,
    COPY_CSV,
    COUNT_LINKS,
    CREATE_MEMORIES,
    CREATE_MEMORY,
    DELETE_MEMORY,
    DROP_ORPHANS,
    ENTITIES,
    EXISTING,
    EXPAND,
    INDEX_LOOKUPS,
    LABEL_RANK,
    LINK,
    LINK_ATTACHED,
    LINK_ATTACHED_MANY,
    LINK_MANY,
    LINK_OWNED,
    MERGE_ENTITY,
    MERGE_SESSION,
    NODE_TABLES,
    REL_TABLES,
    SHARED,
    UNLINK,
    UNLINK_ATTACHED,
    UNLINK_OWNED,
    UPDATE_MEMORY,
    WALK,
)
from agent_memory.storage.graph_projection import Projection, project, write_csvs

T = TypeVar("T")
Edge = tuple[str, str]
Row = dict[str, Any]


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
            await self._call("upsert", self._transaction, lambda: self._upsert_sync(project(memories)))

    def _upsert_sync(self, p: Projection) -> None:
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

    def _relink(self, p: Projection, present: set[str]) -> None:
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

    def _link_attached(self, p: Projection, present: set[str]) -> None:
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

    async def rebuild_fresh(self, memories: Sequence[GraphMemory]) -> None:
        """Rebuild into new files: close the database, delete its files, open an empty one and bulk-load
        `memories`. Kuzu keeps a deleted node's strings in its pages even after a checkpoint, so an erase that
        dropped an entity uses this, and no old file holds the name."""
        await self._call("fresh rebuild", self._rebuild_fresh_sync, memories)

    def _rebuild_fresh_sync(self, memories: Sequence[GraphMemory]) -> None:
        directory = self._path.parent
        self._close_sync()
        for leftover in directory.glob("graph.kuzu*"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
        self._open_sync(directory)
        self._rebuild_sync(memories)
        self._run("CHECKPOINT")

    async def checkpoint(self) -> None:
        """Write the WAL into the database files and cut it (an erase: no old WAL frame keeps a deleted node)."""
        await self._call("checkpoint", self._run, "CHECKPOINT")

    async def rebuild(self, memories: Sequence[GraphMemory]) -> None:
        """Replace the whole graph with `memories`, bulk-loaded from CSV files; on failure the old graph stays."""
        await self._call("rebuild", self._rebuild_sync, memories)

    def _rebuild_sync(self, memories: Sequence[GraphMemory]) -> None:
        self._links = None
        with tempfile.TemporaryDirectory(prefix="agent-memory-graph-") as tmp:
            files = write_csvs(Path(tmp), project(memories))
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
