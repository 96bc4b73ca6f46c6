"""The daemon: one process owns the data directory and serves it over HTTP, with the sleep jobs on a schedule.

Once its socket is bound it writes `data_dir/daemon.json` (its URL and pid, interfaces/discovery.py), which is how
the CLI finds it; the file goes when it stops serving.

Shutdown (SIGTERM or SIGINT): daemon.json is removed; uvicorn stops accepting connections and finishes the
requests in flight; then the scheduler starts nothing new and the jobs already running finish; then the manager
closes (the outbox is applied, the engines closed, the owner lock released) and the process exits 0. Requests and
jobs get `serve.shutdown_timeout` together: past it, the requests still running are cancelled, their connections
dropped (a client that stalls halfway through its body holds nothing), and the jobs cancelled.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]

from agent_memory.config import Config
from agent_memory.interfaces.discovery import publish, serving_url, withdraw
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.signalled import SignalledServer
from agent_memory.interfaces.token import load_or_create_token, token_path
from agent_memory.manager import MemoryManager
from agent_memory.sleep.index import points_moved
from agent_memory.sleep.jobs import run_job

log = logging.getLogger(__name__)


@contextmanager
def thread_switching(interval: timedelta) -> Iterator[None]:
    """Python's thread switch interval at `interval` (serve.switch_interval) inside the block, then put back as it
    was, unless something else changed it meanwhile. A zero interval leaves Python's."""
    seconds = interval.total_seconds()
    if seconds <= 0:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    ours = sys.getswitchinterval()  # as the interpreter keeps it
    try:
        yield
    finally:
        if sys.getswitchinterval() == ours:
            sys.setswitchinterval(before)


def freeze_heap() -> int:
    """Collect, then set every object alive now outside the collector's reach (`gc.freeze`), and return how many are.

    A full collection walks every object the collector tracks and holds the GIL while it does: the event loop waits,
    and so does every thread. What the daemon holds for its life (modules, the engines' bindings, the keyword
    projection) is most of what it walks: 86k objects for the 100k real-text store, 20-57 ms a full collection
    on the two-core machine. Frozen, they are never walked again; an object frozen that later goes is still freed
    when nothing refers to it, and only a reference cycle among them would be kept."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def heap_frozen() -> Iterator[None]:
    """`freeze_heap()` now, the frozen objects handed back to the collector after the block."""
    freeze_heap()
    try:
        yield
    finally:
        gc.unfreeze()


@asynccontextmanager
async def settled(manager: MemoryManager, *, freeze: bool = True) -> AsyncIterator[asyncio.Task[None] | None]:
    """The daemon's heap frozen now that the store is open, and again when the keyword projection is built (started
    here, not at the first search: FTS5, which answers until then, counts BM25's statistics over every namespace).
    Yields the task that waits for the build and freezes after it (None without a projection); the heap is handed
    back after. `freeze=False` (benchmarks' comparison) builds the projection and leaves the heap alone."""
    with heap_frozen() if freeze else nullcontext():
        index = manager.records.keyword_index
        built = None
        if index is not None:
            index.start()
            built = asyncio.create_task(_after(index.wait(), freeze=freeze))
        try:
            yield built
        finally:
            if built is not None:
                built.cancel()
                with suppress(asyncio.CancelledError):
                    await built


async def _after(ready: Awaitable[object], *, freeze: bool) -> None:
    try:
        await ready
    except Exception as exc:  # a failed build is the searches' to meet (they ask FTS5); nothing new to freeze
        log.debug("keyword projection not built (%s); heap left as frozen at start", exc)
        return
    if freeze:
        count = freeze_heap()  # walks only what was made since the first freeze
        log.debug("heap frozen: %d objects", count)


def check_exposure(host: str, *, allow_remote: bool) -> None:
    """Refuse (ConfigError) a host other than loopback unless `allow_remote`; with it, warn that the API is exposed."""
    import ipaddress

    from agent_memory.errors import ConfigError

    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: only localhost is known to stay on this machine
        loopback = host.lower().rstrip(".") == "localhost"
    if loopback:
        return
    exposed = "the HTTP API would be reachable from other machines with only the bearer token and no TLS"
    if not allow_remote:
        raise ConfigError(
            f"serve.host {host!r} is not a loopback address: {exposed}; pass --allow-remote "
            "(or set serve.allow_remote = true) to serve on it anyway, or use 127.0.0.1"
        )
    log.warning(
        "serving on %s: the API is exposed with only the bearer token and no TLS (put a TLS proxy in front)", host
    )


class SleepSchedule:
    """The sleep jobs on APScheduler 3's AsyncIOScheduler, one interval job each (max_instances=1, coalesce).

    APScheduler cancels a running coroutine job when it shuts down; so each run is its own task, shielded, and
    `stop()` waits for the runs in flight instead: a sleep job is never cut off halfway."""

    def __init__(self, manager: MemoryManager, config: Config) -> None:
        self.manager = manager
        self.scheduler = AsyncIOScheduler(timezone="UTC")
        self._running: set[asyncio.Task[Any]] = set()
        for name, every in config.serve.intervals().items():
            self.scheduler.add_job(
                self._run,
                "interval",
                args=[name],
                id=name,
                name=f"sleep job {name}",
                seconds=every.total_seconds(),
                max_instances=1,
                coalesce=True,
            )

    def start(self) -> None:
        self.scheduler.start()

    async def _run(self, name: str) -> None:
        task = asyncio.create_task(run_job(self.manager, name), name=f"sleep-{name}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        run = await asyncio.shield(task)
        if run.counts.get("compaction_due") and self.scheduler.get_job("compact") is not None:
            log.info("the hot tier is over sleep.hot_tier_threshold: consolidation runs now")
            self.scheduler.modify_job("compact", next_run_time=datetime.now(UTC))
        if name in ("digest", "compress") and run.counts.get("deferred"):
            # Again after about as long a rest as the run took (the cores are shared), once this run has ended: a
            # job made due while its one instance still runs would be skipped to its next interval.
            budget = getattr(self.manager.config.sleep, f"{name}_budget")
            asyncio.get_running_loop().call_later(max(budget.total_seconds(), 1.0), self.run_now, name)

    def run_now(self, name: str) -> None:
        if self.scheduler.running and self.scheduler.get_job(name) is not None:
            self.scheduler.modify_job(name, next_run_time=datetime.now(UTC))

    async def stop(self, *, grace: timedelta | None = None) -> None:
        """Start no new run, then wait for the runs in flight (run_job never raises); after `grace`,
        cancel those still running (each of their transactions is whole: a cancelled job leaves no half-write)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if not self._running:
            return
        log.info("waiting for %d sleep job(s) to finish", len(self._running))
        _, late = await asyncio.wait(set(self._running), timeout=grace.total_seconds() if grace else None)
        if late:
            log.warning("cancelling %d sleep job(s) still running at the shutdown deadline", len(late))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)


class DaemonServer(SignalledServer):
    """uvicorn's server, except that a SIGTERM or SIGINT is not raised again once serving stops (uvicorn does
    that, which would kill the process before the scheduler and the store are closed), and that it says where it
    listens once the socket is bound (port 0 picks a free one): on stdout, and in daemon.json for the CLI."""

    def __init__(self, config: uvicorn.Config, *, data_dir: Path) -> None:
        super().__init__(config)
        self.data_dir = data_dir

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            publish(self.data_dir, serving_url(host, port))  # where a client on this machine connects
            where = f"http://{host}:{port} (token in {token_path(self.data_dir)})"
            sys.stdout.write(f"agent-memory: serving {self.data_dir} on {where}\n")
            sys.stdout.flush()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        withdraw(self.data_dir)  # first: a CLI that looks now no longer sends requests to a closing server
        await super().shutdown(sockets=sockets)  # past timeout_graceful_shutdown, it cancels the requests' tasks
        if self.server_state.connections:
            log.warning(
                "dropping %d connection(s) still open at the shutdown deadline", len(self.server_state.connections)
            )
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()


async def serve(config: Config, *, host: str | None = None, port: int | None = None) -> None:
    """Own `config.data_dir` and serve it on host:port (default: the [serve] section) until SIGTERM or SIGINT."""
    host = host or config.serve.host
    port = config.serve.port if port is None else port
    check_exposure(host, allow_remote=config.serve.allow_remote)
    with thread_switching(config.serve.switch_interval):
        await _serve(config, host, port)


async def _serve(config: Config, host: str, port: int) -> None:
    async with MemoryManager.open(config) as manager, settled(manager):
        token = load_or_create_token(config.data_dir)
        schedule = SleepSchedule(manager, config)
        app = create_app(
            manager,
            token=token,
            scheduler=schedule.scheduler,
            max_body_bytes=config.serve.max_body_bytes,
            body_timeout=config.serve.body_timeout,
        )
        deadline = config.serve.shutdown_timeout.total_seconds()
        uvicorn_config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=math.ceil(deadline),
        )
        server = DaemonServer(uvicorn_config, data_dir=config.data_dir)
        schedule.start()
        if await points_moved(manager):  # points moved out of an index (sleep/index.py): the job decides now, not
            schedule.run_now("index")  # at its first interval
        started = time.monotonic()
        try:
            await server.serve()
        finally:
            withdraw(config.data_dir)  # in case serving stopped without uvicorn's shutdown
            stopping = server.stopping_at or started
            await schedule.stop(grace=timedelta(seconds=max(0.0, deadline - (time.monotonic() - stopping))))
