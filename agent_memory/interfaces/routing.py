"""Where a CLI command runs: through the daemon that owns the data directory, or on the store opened here.

One process owns a data directory (DESIGN.md, invariant 4). So while `agent-memory serve` runs, `open_store` gives
a `DaemonClient` of it, and otherwise opens the store in this process; both answer the `Store` protocol in the
same types, and the commands print the same output either way (docs/daemon.md, "The CLI and a running daemon").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from agent_memory.config import Config
from agent_memory.interfaces.client import find_daemon
from agent_memory.models import Context, DoctorReport, Fact, JobRun, Memory, RetrievalResult, Revision, TurnInput

if TYPE_CHECKING:  # the manager (and the engines under it) is imported only when the store is opened here
    from agent_memory.manager import MemoryManager

log = logging.getLogger(__name__)


class Processed(Protocol):
    """A processed turn: a TurnResult here, a TurnReceipt from the daemon."""

    @property
    def saved(self) -> bool: ...

    @property
    def chunks(self) -> int: ...


class Store(Protocol):
    """What the CLI asks of the memory, wherever it is."""

    async def process_turns(self, turns: Sequence[TurnInput], *, bulk: bool = False) -> Sequence[Processed]: ...

    async def prepare_turns(self, texts: Sequence[str], *, bulk: bool = False) -> None: ...

    async def retrieve(
        self, query: str, *, k: int | None = None, namespace: str = "default"
    ) -> list[RetrievalResult]: ...

    async def context(self, query: str, *, budget_tokens: int = 2048, namespace: str = "default") -> Context: ...

    async def stats(self) -> dict[str, Any]: ...

    async def run_job(self, name: str, *, now: datetime | None = None, **options: Any) -> JobRun: ...

    async def job_runs(self, job: str | None = None, *, limit: int = 50) -> list[JobRun]: ...

    async def doctor(self, *, repair: bool = False) -> DoctorReport: ...

    async def get(self, memory_id: str, *, original: bool = False) -> Memory: ...

    async def update(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory: ...

    async def supersede(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory: ...

    async def history(self, memory_id: str) -> list[Revision]: ...

    async def erase(
        self,
        *,
        reason: str,
        memory_ids: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        session_id: str | None = None,
        namespace: str = "default",
        whole_namespace: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]: ...

    async def forget(
        self, memory_id: str, *, expected_revision: int, agent: str | None = None, reason: str | None = None
    ) -> Memory: ...

    async def restore(self, memory_id: str, *, agent: str | None = None, reason: str | None = None) -> Memory: ...

    async def remember_fact(
        self,
        subject: str,
        attribute: str,
        value: str,
        *,
        valid_at: datetime | None = None,
        source: str | None = None,
        confidence: float = 1.0,
        namespace: str = "default",
    ) -> Fact: ...

    async def facts(
        self,
        subject: str | None = None,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str = "default",
    ) -> list[Fact]: ...

    async def fact_history(self, subject: str, attribute: str, *, namespace: str = "default") -> list[Fact]: ...


class LocalStore:
    """The store opened in this process: the manager, plus the sleep jobs and their history."""

    def __init__(self, manager: MemoryManager) -> None:
        self.manager = manager
        # The corrections and facts are the manager's own calls, with the same signatures as the daemon's client.
        self.get, self.history = manager.get, manager.history
        self.update, self.supersede = manager.update, manager.supersede
        self.forget, self.restore = manager.forget, manager.restore
        self.remember_fact, self.facts, self.fact_history = manager.remember_fact, manager.facts, manager.fact_history
        self.observe_facts = manager.observe_facts  # the runtime's facts step (agent-memory chat)
        self.prepare_turns = manager.prepare_turns  # the runtime embeds the message while the model answers

    async def process_turns(self, turns: Sequence[TurnInput], *, bulk: bool = False) -> Sequence[Processed]:
        return await self.manager.process_turns(turns, bulk=bulk)

    async def erase(self, *, reason: str, dry_run: bool = False, **selection: Any) -> dict[str, Any]:
        """As the daemon answers POST /v1/erase."""
        if dry_run:
            return {"dry_run": True, **(await self.manager.erase_plan(**selection)).as_dict()}
        return (await self.manager.erase(reason=reason, **selection)).as_dict()

    async def retrieve(self, query: str, *, k: int | None = None, namespace: str = "default") -> list[RetrievalResult]:
        return await self.manager.retrieve(query, k=k, namespace=namespace)

    async def context(self, query: str, *, budget_tokens: int = 2048, namespace: str = "default") -> Context:
        return await self.manager.context(query, budget_tokens=budget_tokens, namespace=namespace)

    async def stats(self) -> dict[str, Any]:
        return await self.manager.stats()

    async def run_job(self, name: str, *, now: datetime | None = None, **options: Any) -> JobRun:
        from agent_memory.sleep.jobs import run_job

        return await run_job(self.manager, name, now=now, **options)

    async def job_runs(self, job: str | None = None, *, limit: int = 50) -> list[JobRun]:
        return await self.manager.records.job_runs(job, limit=limit)

    async def doctor(self, *, repair: bool = False) -> DoctorReport:
        return await self.manager.doctor(repair=repair)


@asynccontextmanager
async def open_store(config: Config) -> AsyncIterator[Store]:
    """The daemon that owns `config.data_dir` if one does (its own config then applies, not `config`), else the
    store opened here and closed on exit.

    Only this direct branch imports the manager: a command answered by a live daemon loads no engine and no model
    (tests/test_light_faces.py)."""
    client = await find_daemon(config.data_dir)
    if client is not None:
        log.info("talking to the daemon at %s", client.url)
        async with client:
            yield client
        return
    from agent_memory.manager import MemoryManager

    async with MemoryManager.open(config) as manager:
        yield LocalStore(manager)
