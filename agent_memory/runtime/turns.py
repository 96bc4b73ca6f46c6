"""The steps of a turn that the runtime and the memory proxy share, over whatever holds the memory.

`MemoryBackend` is what they ask of it: a `MemoryManager` in this process, or a `DaemonClient` of the daemon that
owns the store (the proxy's case: a face never opens the engines). Four calls, no more:

- `context`, which retrieves and packs the facts block first, then the memories, within a token budget. It records
  one access for each memory it packs and for no other candidate (retrieve() records all k), and everything it
  packs is sent: the runtime pins the block in the window, which never evicts a pinned item, and the proxy puts
  it in the request. So the accesses recorded are exactly those of the memories the model was shown.
- `process_turns`, which logs the user's turn and the answer (one batch) and takes the save decision on each.
- `prepare_turns`, which embeds the user's message for the write path while the model answers (a speed-up only).
- `observe_facts`, the policy step (STORE / MERGE / SUPERSEDE / REJECT, facts.py) on the facts those two turns
  state, run once the answer is in: never after a failed generation, and a failure there costs a warning only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from agent_memory.models import Context, FactDecision, TurnInput

T = TypeVar("T")


class Processed(Protocol):
    """A processed turn: a TurnResult from the manager, a TurnReceipt from the daemon."""

    @property
    def turn_id(self) -> str: ...

    @property
    def saved(self) -> bool: ...

    @property
    def memory_id(self) -> str | None: ...

    @property
    def reason(self) -> str: ...


class MemoryBackend(Protocol):
    async def context(self, query: str, *, budget_tokens: int = 2048, namespace: str = "default") -> Context: ...

    async def process_turns(self, turns: Sequence[TurnInput]) -> Sequence[Processed]: ...

    async def observe_facts(self, turn_ids: Sequence[str]) -> list[FactDecision]: ...

    async def prepare_turns(self, texts: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision the turn took: `kind` "save" (whether a turn became a memory) or "fact" (the policy step)."""

    kind: str
    action: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {self.action} {self.subject}: {self.detail}"


class TurnNumbers:
    """Each session's next turn number. A session's first turn in this process starts at the clock in microseconds
    (2**53 is centuries away), then the numbers run on: a runtime restarted on a session it wrote before continues
    after its turns, so no number is taken twice and the session's turns stay in order."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, str], int] = {}

    def take(self, namespace: str, session_id: str, count: int) -> list[int]:
        key = (namespace, session_id)
        first = max(self._next.get(key, 0), time.time_ns() // 1000)
        self._next[key] = first + count
        return list(range(first, first + count))


class Behind:
    """Recordings run after their answers went back (the proxy's, and the runtime's with `record_behind`): one
    session's in the order they were asked for, each waiting for the session's one before it (whatever became of
    it), different sessions side by side. `drain()` waits for all."""

    def __init__(self) -> None:
        self._latest: dict[tuple[str, str], asyncio.Task[Any]] = {}

    def run(self, session: tuple[str, str], job: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        earlier = self._latest.get(session)

        async def after() -> T:
            if earlier is not None:
                await asyncio.wait([earlier])  # its outcome is its own; this one runs regardless
            return await job()

        task = asyncio.create_task(after())
        self._latest[session] = task
        task.add_done_callback(lambda done: self._latest.pop(session) if self._latest.get(session) is done else None)
        return task

    def __len__(self) -> int:
        """How many sessions have a recording still running."""
        return len(self._latest)

    async def drain(self) -> None:
        while self._latest:
            await asyncio.wait(list(self._latest.values()))


class Reads:
    """The memory reads in flight (the proxy's `context` calls), so that a recording behind an answer can give way
    to the next request's read: the two would otherwise share the daemon's cores at the moment the next answer is
    being waited for, and the recording has no one waiting for it."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        self._count += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._count -= 1
            if self._count == 0:
                self._idle.set()

    async def give_way(self, *, first: timedelta, most: timedelta) -> None:
        """Wait `first` (a request sent as soon as the last answer came is in by then), then until no read is in
        flight, or `most` has passed: a recording gives way, it is never held up for long."""
        await asyncio.sleep(first.total_seconds())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(most.total_seconds()):
                await self._idle.wait()


async def record_exchange(
    memory: MemoryBackend,
    numbers: TurnNumbers,
    *,
    namespace: str,
    session_id: str,
    user: str,
    answer: str,
    taken: Sequence[int] | None = None,
) -> list[Processed]:
    """The user's turn and the answer, logged together (one batch: both or neither). `taken`: the two turn numbers
    when the caller took them already (the proxy takes them in the order the answers came, and records later)."""
    first, second = taken if taken is not None else numbers.take(namespace, session_id, 2)
    turns = [
        TurnInput(session_id, first, user, role="user", namespace=namespace),
        TurnInput(session_id, second, answer, role="assistant", namespace=namespace),
    ]
    return list(await memory.process_turns(turns))


def save_decisions(processed: Sequence[Processed]) -> list[Decision]:
    roles = ("user", "assistant")
    return [
        Decision("save", "KEEP" if p.saved else "SKIP", f"{role} turn {p.turn_id}", p.reason)
        for role, p in zip(roles, processed, strict=False)
    ]


def fact_decisions(decisions: Sequence[FactDecision]) -> list[Decision]:
    return [Decision("fact", d.action, f"{d.subject} | {d.attribute} = {d.value}", d.reason) for d in decisions]


def context_ids(context: Context) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The memories and the facts a context holds, in the order it shows them."""
    return tuple(i.memory.memory_id for i in context.items), tuple(f.fact.fact_id for f in context.facts)
