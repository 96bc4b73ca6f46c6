"""The graph projection: memories, entities and sessions, and the edges between them, in embedded Kuzu.

Kuzu runs in a worker process of its own (storage/graph_engine.py: it writes memory it never initialised into its
file, so it must not share a heap with the text the daemon reads and frees). The worker is forked from a fork
server started clean with only the engine imported (`_Host`), and it is only ever sent what the graph holds: ids,
entity names, sessions and links.

This side is the async face. Every call goes over the worker's socket from one owner thread, so calls keep their
order and the event loop never waits on Kuzu. A worker found dead (a crash inside Kuzu) is replaced, the new one
opens the database again (Kuzu replays its WAL) and the call is made once more; a call that kills two workers
fails with StorageError. An erase replaces the worker before it rebuilds the graph
(`rebuild_fresh`). The worker ends when the owner closes the graph, and on its own when the owner is gone (its
socket reads end of file), which closes the database for the next owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agent_memory.errors import ClosedError, EngineUnavailable, StorageError, StoreLocked
from agent_memory.models import MemoryId
from agent_memory.projection_models import GraphMemory, GraphStep

log = logging.getLogger(__name__)

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
HOST = f"import sys; sys.path.insert(0, {PACKAGE_ROOT!r}); from agent_memory.storage.graph_engine import main; main()"
"""The fork server's program: this very package first on its path (not another one in its working directory), and
nothing imported but the engine."""
LOCK_WAIT = 10.0
"""Seconds an open waits for Kuzu's lock: the worker of an owner that was just killed still closes the database
(it sees end of file on its socket), and a new owner started at once must not fail on that."""
CLOSE_WAIT = 120.0
"""Seconds a close waits for the worker to close the database (closing checkpoints the WAL); then it is killed."""

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


class _Failed(Exception):
    """The worker answered that a call failed: `kind` is 'locked', 'engine' or 'bug' (graph_engine._failure)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Gone(Exception):
    """The worker process is not there to answer (it exited, or was killed)."""


class _NoHost(Exception):
    """The fork server could not start a worker: it exited (it could not start, or was killed)."""


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie does not: an init that does not reap would keep one forever)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone (or the pid is another user's now)
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: the signal's answer stands
    return state != b"Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


class _Host:
    """The fork server of this process's graph workers (graph_engine.host): a new interpreter started once, so it
    never holds the owner's memory, and forks each worker in a few milliseconds. multiprocessing's forkserver
    would do the same but runs the owner's main script again in every worker: a script without a __main__ guard
    would start over."""

    _lock = threading.Lock()
    _current: _Host | None = None

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()  # a stream: macOS has no SOCK_SEQPACKET for AF_UNIX
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-c", HOST, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        self._control = ours
        self._owner = os.getpid()

    @classmethod
    def _running(cls) -> _Host:
        """This process's fork server, started if there is none (or it exited): the start does not wait for it
        to be ready; the first fork does. Called under `_lock`."""
        host = cls._current
        if host is None or host._owner != os.getpid() or host._process.poll() is not None:
            if host is not None:
                host._control.close()  # a forked owner's copy, or a server that exited
            host = cls._current = _Host()
        return host

    @classmethod
    def start(cls) -> None:
        with cls._lock:
            cls._running()

    @classmethod
    def fork(cls, path: Path) -> tuple[int, Connection]:
        """A new worker for the database at `path`: its pid and the owner's end of its socket."""
        with cls._lock:
            host = cls._running()
            ours, theirs = socket.socketpair()
            with theirs:
                try:
                    reply = host._ask(str(path), theirs.fileno())
                except OSError:
                    reply = b""
            if len(reply) != 8:
                ours.close()
                host._control.close()
                cls._current = None
                raise _NoHost(f"the graph's fork server exited (exit code {host._exit_code()}; its error is on stderr)")
            return int.from_bytes(reply, "little"), Connection(ours.detach())

    def _ask(self, path: str, fd: int) -> bytes:
        """Send a request (graph_engine.host: the path, its length first, with `fd`); its 8-byte answer, or fewer
        bytes when the server is gone."""
        raw = os.fsencode(path)  # a path's own bytes, whatever its encoding
        message = len(raw).to_bytes(4, "little") + raw
        sent = socket.send_fds(self._control, [message], [fd])
        self._control.sendall(message[sent:])
        reply = b""
        while len(reply) < 8 and (more := self._control.recv(8 - len(reply))):
            reply += more
        return reply

    def _exit_code(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._process.wait(timeout=1.0)
        return None


class _Worker:
    """One worker process and the owner's end of its socket; used from the graph's owner thread only."""

    def __init__(self, path: Path) -> None:
        self.pid, self._conn = _Host.fork(path)

    def call(self, name: str, args: tuple[Any, ...]) -> Any:
        try:
            self._conn.send((name, args))
            status, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise _Gone("its worker process exited") from exc
        if status == "failed":
            raise _Failed(*value)
        return value

    def stop(self) -> None:
        """Ask the worker to close the database and end. Its answer says the database is closed (its lock free):
        the process's own exit is not waited for. A worker that does not answer within CLOSE_WAIT is killed."""
        try:
            self._conn.send(None)
            if self._conn.poll(CLOSE_WAIT):
                self._conn.recv()
                return
        except (EOFError, OSError):
            pass  # already gone
        finally:
            self._conn.close()
        if _wait_gone(self.pid, CLOSE_WAIT):
            return
        log.error("the graph's worker %d did not end in %.0f s; killing it", self.pid, CLOSE_WAIT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        if not _wait_gone(self.pid, 10.0):
            log.error("the graph's worker %d outlived SIGKILL by 10 s; leaving it", self.pid)


class KuzuGraph:
    """The graph store over one Kuzu database at `directory / "graph.kuzu"`, in a worker process."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kuzu")
        self._worker: _Worker | None = None
        self._closed = False

    @classmethod
    async def open(cls, directory: Path, *, lock_wait: float = LOCK_WAIT) -> KuzuGraph:
        """Open (or create) the graph; StoreLocked when another process holds it for longer than `lock_wait`."""
        path = (directory / "graph.kuzu").resolve()
        _claim(path)
        graph = cls(path)
        try:
            await graph._submit("open", graph._start, False, lock_wait)
        except BaseException:
            graph._closed = True
            graph._thread.shutdown(wait=False)
            _release(path)
            raise
        return graph

    @staticmethod
    def prepare() -> None:
        """Start the fork server now, without waiting for it: the first open then need not wait for its start
        (about 0.3 s) if the caller has other things to open meanwhile."""
        _Host.start()

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id (None before its first start or after it died)."""
        return self._worker.pid if self._worker is not None else None

    # ----- on the owner thread ---------------------------------------------------------------------------------

    def _start(self, fresh: bool, lock_wait: float) -> None:
        worker = _Worker(self._path)
        deadline = time.monotonic() + lock_wait
        try:
            while True:
                try:
                    worker.call("open", (fresh,))
                    break
                except _Failed as failure:
                    if failure.kind != "locked" or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.05)
        except BaseException:
            worker.stop()
            raise
        self._worker = worker

    def _request(self, name: str, *args: Any) -> Any:
        """Call the worker; when it is found dead, start another and call once more (every call is safe to
        repeat: a write cut short was rolled back, and applying a batch twice is a no-op)."""
        for attempt in (1, 2):
            if self._worker is None:
                self._start(False, LOCK_WAIT)
            assert self._worker is not None
            try:
                return self._worker.call(name, args)
            except _Gone as gone:
                self._worker.stop()
                self._worker = None
                if attempt == 2:
                    raise _Gone(f"{gone}, in a second worker too") from gone
                log.warning("the graph's worker died during %s (%s); starting another on %s", name, gone, self._path)
        raise AssertionError("unreachable")

    def _fresh(self, memories: Sequence[GraphMemory]) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        self._start(True, LOCK_WAIT)
        self._request("rebuild", memories)
        self._request("checkpoint")

    def _stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    # ----- the async face --------------------------------------------------------------------------------------

    async def _submit(self, op: str, fn: Callable[..., Any], /, *args: Any) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        except _Failed as failure:
            if failure.kind == "locked":
                raise StoreLocked(str(self._path), None) from RuntimeError(str(failure))
            raise StorageError(f"Graph {op} failed for {self._path}: {failure}") from RuntimeError(str(failure))
        except _Gone as gone:
            raise StorageError(f"Graph {op} failed for {self._path}: {gone}") from gone
        except _NoHost as failed:
            raise EngineUnavailable(f"Graph {op} failed for {self._path}: {failed}") from failed

    async def _call(self, op: str, name: str, /, *args: Any) -> Any:
        if self._closed:
            raise ClosedError("KuzuGraph")
        return await self._submit(op, self._request, name, *args)

    async def upsert_memories(self, memories: Sequence[GraphMemory]) -> None:
        """Add or replace memories with their session, entities and NEXT edge, in one transaction.
        Applying a batch twice is a no-op; a NEXT edge whose previous memory is not in the graph is left out."""
        if memories:
            await self._call("upsert", "upsert", list(memories))

    async def delete_memories(self, ids: Iterable[MemoryId]) -> None:
        """DETACH DELETE these memories (unknown ids are ignored), then their orphaned entities and sessions."""
        unique = [{"id": str(i)} for i in dict.fromkeys(ids)]
        if unique:
            await self._call("delete", "delete", unique)

    async def memory_ids(self) -> set[str]:
        return set(await self._call("memory_ids", "memory_ids"))

    async def entities(self, memory_id: MemoryId) -> list[str]:
        """The names of the entities a memory mentions, sorted."""
        return list(await self._call("entities", "entities", str(memory_id)))

    async def counts(self) -> dict[str, int]:
        """Rows per node table and per rel table, keyed by table name."""
        return dict(await self._call("counts", "counts"))

    async def neighbours(self, memory_id: MemoryId, *, depth: int = 1) -> list[tuple[str, str]]:
        """Memories within `depth` Memory-to-Memory hops (either direction), plus those sharing an entity or a
        session (at depth 1); each with the label of the relation that first reached it. Nearest first, then the
        strongest relation (NEXT, EVOLVED_FROM, RELATED_TO, DREAM_LINK, IN_SESSION, MENTIONS), then by id."""
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        return list(await self._call("neighbours", "neighbours", str(memory_id), depth))

    async def expand(self, seeds: Sequence[str], *, depth: int) -> list[GraphStep]:
        """Walk out from `seeds` over the edges only the graph holds (EVOLVED_FROM, RELATED_TO, DREAM_LINK), up to
        `depth` hops. Each reached memory once, nearest first, attributed to the seed it was reached from.

        Session order and shared entities are answered by the records (SQLite) in well under a millisecond;
        here each query costs ~2.5 ms at 100k memories (Kuzu 0.11), so the worker skips the walk while no such
        edge exists."""
        if depth <= 0 or not seeds:
            return []
        return list(await self._call("expand", "expand", list(dict.fromkeys(seeds)), depth))

    async def rebuild(self, memories: Sequence[GraphMemory]) -> None:
        """Replace the whole graph with `memories`, bulk-loaded from CSV files; on failure the old graph stays."""
        await self._call("rebuild", "rebuild", list(memories))

    async def rebuild_fresh(self, memories: Sequence[GraphMemory]) -> None:
        """Rebuild into new files, in a new worker: stop the worker, delete the database's files, start another
        and bulk-load `memories`. Kuzu keeps a deleted node's strings in its pages even after a checkpoint, and
        writes uninitialised memory into its file, so an erase uses this: no old file holds an erased name, and
        no process that held one writes the new files."""
        if self._closed:
            raise ClosedError("KuzuGraph")
        await self._submit("fresh rebuild", self._fresh, list(memories))

    async def checkpoint(self) -> None:
        """Write the WAL into the database files and cut it (an erase: no old WAL frame keeps a deleted node)."""
        await self._call("checkpoint", "checkpoint")

    async def query(self, cypher: str, **params: Any) -> list[list[Any]]:
        """One Cypher statement, its rows as lists: for tests and diagnosis, not for the product's paths."""
        return list(await self._call("query", "run", cypher, params))

    async def aclose(self) -> None:
        """Close the database and end the worker, and free the path for another open; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._submit("close", self._stop)
        finally:
            self._thread.shutdown(wait=False)
            _release(self._path)
