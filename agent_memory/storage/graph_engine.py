"""The graph projection's engine: embedded Kuzu, driven synchronously in the graph's own worker process.

Kuzu 0.11 writes bytes it never initialised into its database file: at a checkpoint, parts of its header and
metadata pages are whatever its allocator handed back (measured: 9,976 bytes of a 4.9 MB file under glibc's
MALLOC_PERTURB_, and in a plain run 2,366 of them were not zero). In the daemon those bytes can be any text the
process held and freed: an erase's scan found 1,475 windows of an erased turn in a graph rebuilt without it. So
Kuzu runs here, in a process forked from a clean server (`host`, started with nothing else imported) and only ever
given what the graph holds (ids, entity names, sessions, links); an erase replaces the process before it
rebuilds the graph (storage/graph.py). `serve` is that process's loop; `host` is the fork server it comes from.

Kuzu 0.11 behaviours the queries below are shaped by:
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

import contextlib
import csv
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar, cast

import kuzu

from agent_memory.projection_models import GraphMemory, GraphStep
from agent_memory.storage.cypher import (
    ADD_ATTACHED,
    ATTACHED_WEIGHT,
    COPY_CSV,
    COUNT_LINKS,
    CREATE_ENTITIES,
    CREATE_MEMORIES,
    CREATE_MEMORY,
    DELETE_MEMORY,
    DROP_ORPHANS,
    ENTITIES,
    ENTITY_NAMES,
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
Row = dict[str, Any]

LOCKED = "Could not set lock"
"""What Kuzu's RuntimeError says when another process holds the database."""


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


class KuzuEngine:
    """One Kuzu database at `path`, its connection and its prepared statements. Every method blocks."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._db: kuzu.Database | None = None
        self._conn: kuzu.Connection | None = None
        self._prepared: dict[str, kuzu.PreparedStatement] = {}  # parsing and planning cost more than running
        self._links: int | None = None  # how many link edges exist; None = not counted since the last change

    def open(self, fresh: bool = False) -> None:
        """Open the database (with `fresh`, after deleting its files: Kuzu keeps a deleted node's strings in its
        pages even after a checkpoint, so an erase that dropped an entity starts from new files)."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            for leftover in self._path.parent.glob(self._path.name + "*"):
                if leftover.is_dir():
                    shutil.rmtree(leftover)
                else:
                    leftover.unlink()
        try:
            self._db = kuzu.Database(str(self._path))
            self._conn = kuzu.Connection(self._db)
            for statement in _schema():
                self._run(statement)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the connection and the database (its prepared statements first); idempotent."""
        try:
            self._prepared.clear()
            if self._conn is not None:
                self._conn.close()
            if self._db is not None:
                self._db.close()
        finally:
            self._conn, self._db = None, None

    def run(self, query: str, params: Row | None = None) -> list[list[Any]]:
        """One statement, as the tests and the doctor ask it."""
        return self._run(query, **(params or {}))

    def _run(self, query: str, **params: Any) -> list[list[Any]]:
        if any(isinstance(value, list) and not value for value in params.values()):
            return []  # nothing to do, and Kuzu cannot type an empty list parameter
        if self._conn is None:
            raise RuntimeError("the database is not open")
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

    def upsert(self, memories: Sequence[GraphMemory]) -> None:
        """Add or replace memories with their session, entities and NEXT edge, in one transaction."""
        self._transaction(lambda: self._upsert_sync(project(memories)))

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
        # or entity the batch still uses is no orphan once its edges are made again, so it is not looked at.
        self._drop_orphans(previous, keep={"MENTIONS": p.entities, "IN_SESSION": p.sessions.keys()})
        rows = [{"id": i, "namespace": ns, "type": kind, "created_at": at} for i, (ns, kind, at) in p.memories.items()]
        self._batch(CREATE_MEMORY, [row for row in rows if row["id"] not in present], many=CREATE_MEMORIES)
        self._batch(UPDATE_MEMORY, [row for row in rows if row["id"] in present])
        sessions = [{"key": k, "namespace": ns, "session_id": sid} for k, (ns, sid) in p.sessions.items()]
        self._batch(MERGE_SESSION, sessions)
        self._add_entities(sorted(p.entities))
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

    def _add_entities(self, names: list[str]) -> None:
        """The entities not in the graph yet: MERGE each for a few; for many, one scan of the names and a COPY of
        the missing (a backlog of 1,024 memories on the LongMemEval dev store: 0.43 s of MERGE)."""
        if len(names) <= INDEX_LOOKUPS:
            self._batch(MERGE_ENTITY, [{"name": name} for name in names])
            return
        known = {row[0] for row in self._run(ENTITY_NAMES)}
        self._run(CREATE_ENTITIES, rows=[{"name": name} for name in names if name not in known])

    def _drop_orphans(
        self, previous: dict[str, list[list[Any]]], keep: Mapping[str, Collection[str]] | None = None
    ) -> None:
        """Delete the entities and sessions in `previous` (what the changed memories pointed to) that nothing points
        to now, but those in `keep` (what the batch points to again)."""
        for rel, query in DROP_ORPHANS.items():
            kept = (keep or {}).get(rel, ())
            keys = dict.fromkeys(row[0] for row in previous[rel] if row[0] not in kept)
            self._batch(query, [{"key": key} for key in keys])

    def delete(self, ids: list[Row]) -> None:
        self._transaction(lambda: self._delete_sync(ids))

    def _delete_sync(self, ids: list[Row]) -> None:
        self._links = None
        previous = {rel: self._batch(UNLINK[rel], ids) for rel in DROP_ORPHANS}
        self._batch(DELETE_MEMORY, ids)
        self._drop_orphans(previous)

    def memory_ids(self) -> set[str]:
        return {row[0] for row in self._run("MATCH (m:Memory) RETURN m.id")}

    def entities(self, memory_id: str) -> list[str]:
        return [row[0] for row in self._run(ENTITIES, id=memory_id)]

    def counts(self) -> dict[str, int]:
        nodes = {t: self._run(f"MATCH (n:{t}) RETURN count(n)")[0][0] for t in NODE_TABLES}
        rels = {t: self._run(f"MATCH ()-[r:{t}]->() RETURN count(r)")[0][0] for t in REL_TABLES}
        return {name: int(count) for name, count in (nodes | rels).items()}

    def neighbours(self, start: str, depth: int) -> list[tuple[str, str]]:
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

    def expand(self, seeds: list[str], depth: int) -> list[GraphStep]:
        return self._expand_sync(seeds, depth) if self._has_links() else []

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

    def rebuild(self, memories: Sequence[GraphMemory]) -> None:
        """Replace the whole graph with `memories`, bulk-loaded from CSV files; on failure the old graph stays."""
        self._links = None
        with tempfile.TemporaryDirectory(prefix="agent-memory-graph-") as tmp:
            files = write_csvs(Path(tmp), project(memories))
            self._transaction(lambda: self._reload(files))

    def checkpoint(self) -> None:
        self._run("CHECKPOINT")

    def _reload(self, files: dict[str, Path]) -> None:
        self._prepared.clear()  # plans name the tables dropped below
        for table in [*REL_TABLES, *NODE_TABLES]:
            self._run(f"DROP TABLE IF EXISTS {table}")
        for statement in _schema():
            self._run(statement)
        for table, path in files.items():
            quoted = str(path).replace("\\", "\\\\").replace("'", "\\'")
            self._run(COPY_CSV.format(table=table, path=quoted))


def _failure(exc: BaseException) -> tuple[str, str]:
    """What the owner is told of a failure: its kind and its message (exceptions of Kuzu's own types need not
    unpickle on the other side)."""
    if isinstance(exc, RuntimeError) and LOCKED in str(exc):
        return "locked", str(exc)
    if isinstance(exc, RuntimeError | OSError | csv.Error):  # Kuzu raises RuntimeError for every engine failure
        return "engine", f"{type(exc).__name__}: {exc}"
    return "bug", f"{type(exc).__name__}: {exc}"


def serve(conn: Connection, path: str) -> None:
    """A worker's loop: each request is (method name, arguments); each answer ("ok", value) or ("failed",
    (kind, message)). It ends on None (the owner closes the graph: the database is closed before the answer, so
    the owner may open it again at once) or on end of file (the owner is gone), closing the database either way."""
    engine = KuzuEngine(Path(path))
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            if request is None:
                engine.close()
                conn.send(("ok", None))
                return
            name, args = request
            try:
                reply: tuple[str, Any] = ("ok", getattr(engine, name)(*args))
            except BaseException as exc:
                reply = ("failed", _failure(exc))
            conn.send(reply)
    finally:
        with contextlib.suppress(Exception):
            engine.close()


def _warm() -> None:
    """Open and close a throwaway database with the schema once, so each worker is forked with what Kuzu sets up
    on its first database in a process (35-40 ms of every worker's open without it)."""
    with tempfile.TemporaryDirectory(prefix="agent-memory-graph-warm-") as scratch:
        engine = KuzuEngine(Path(scratch) / "warm.kuzu")
        try:
            engine.open()
        finally:
            engine.close()


def host(control: socket.socket) -> None:
    """The fork server (storage/graph.py starts one per owner process, running `main`): a process that holds
    nothing but this module and Kuzu. Each request on `control` (a stream socket: macOS has no SOCK_SEQPACKET for
    AF_UNIX) is a database path, its length first, with one socket attached; it forks a worker that serves that
    socket and answers the worker's pid in 8 bytes. It ends when the owner is gone (end of file). Workers are
    reaped by the kernel (SIGCHLD ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the owner's to handle: it closes its graphs
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _warm()
    while (request := _request(control)) is not None:
        path, fd = request
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                serve(Connection(fd), path)
                code = 0
            finally:
                os._exit(code)
        os.close(fd)
        control.sendall(pid.to_bytes(8, "little"))


def _request(control: socket.socket) -> tuple[str, int] | None:
    """The next request (a path and the socket that came with it); None at end of file or on a malformed one."""
    try:
        data, fds, _, _ = socket.recv_fds(control, 4096, 1)
        if len(fds) != 1 or len(data) < 4:
            return None
        size = int.from_bytes(data[:4], "little")
        while len(data) < 4 + size:
            more = control.recv(4 + size - len(data))
            if not more:
                return None
            data += more
    except OSError:
        return None
    return os.fsdecode(data[4:]), fds[0]


def main() -> None:
    """The fork server's entry: its control socket's file descriptor is the first argument."""
    host(socket.socket(fileno=int(sys.argv[1])))


if __name__ == "__main__":
    main()
