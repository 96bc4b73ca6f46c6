"""The daemon: one process owns the data directory and serves it over HTTP, with the sleep jobs on a schedule.

Once its socket is bound it writes `data_dir/daemon.json` (its URL and pid, interfaces/discovery.py), which is how
the CLI finds it; the file goes when it stops serving.

Shutdown (SIGTERM or SIGINT): daemon.json is removed; uvicorn stops accepting connections and finishes the requests in flight; then the
scheduler starts nothing new and the jobs already running finish; then the manager closes (the outbox is
applied, the engines closed, the owner lock released) and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvicorn
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]

from agent_memory.config import Config
from agent_memory.interfaces.discovery import publish, serving_url, withdraw
from agent_memory.interfaces.http import create_app
from agent_memory.interfaces.token import load_or_create_token, token_path
from agent_memory.manager import MemoryManager
from agent_memory.sleep.jobs import run_job

log = logging.getLogger(__name__)
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
        if name == "digest" and run.counts.get("deferred"):
            # Again after about as long a rest as the run took (the cores are shared), once this run has ended: a
            # job made due while its one instance still runs would be skipped to its next interval.
            pause = max(self.manager.config.sleep.digest_budget.total_seconds(), 1.0)
            asyncio.get_running_loop().call_later(pause, self._run_now, "digest")

    def _run_now(self, name: str) -> None:
        if self.scheduler.running and self.scheduler.get_job(name) is not None:
            self.scheduler.modify_job(name, next_run_time=datetime.now(UTC))

    async def stop(self) -> None:
        """Start no new run, then wait for the runs in flight (run_job never raises)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if self._running:
            log.info("waiting for %d sleep job(s) to finish", len(self._running))
            await asyncio.gather(*self._running, return_exceptions=True)


class DaemonServer(uvicorn.Server):
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
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        for sig in HANDLED_SIGNALS:
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in HANDLED_SIGNALS:
                loop.remove_signal_handler(sig)


async def serve(config: Config, *, host: str | None = None, port: int | None = None) -> None:
    """Own `config.data_dir` and serve it on host:port (default: the [serve] section) until SIGTERM or SIGINT."""
    host = host or config.serve.host
    port = config.serve.port if port is None else port
    async with MemoryManager.open(config) as manager:
        token = load_or_create_token(config.data_dir)
        schedule = SleepSchedule(manager, config)
        app = create_app(manager, token=token, scheduler=schedule.scheduler)
        uvicorn_config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        server = DaemonServer(uvicorn_config, data_dir=config.data_dir)
        schedule.start()
        try:
            await server.serve()
        finally:
            withdraw(config.data_dir)  # in case serving stopped without uvicorn's shutdown
            await schedule.stop()
