"""`AgentRuntime`: one whole chat turn with memory, through any model litellm speaks to (issue #21).

    async with MemoryManager.open(config) as memory:
        runtime = AgentRuntime(memory, model="ollama/llama3.1")
        turn = await runtime.chat("s1", "I moved to Lisbon last week")
        print(turn.answer, turn.memory_ids, turn.decisions)

One turn, in this order: retrieve and compile the context (the facts block first, within `memory_tokens`) -> fit
the session's short-term window (window.py) -> generate -> record the user's turn and the answer (one
`process_turns` batch, each through the save decision) -> the policy step on the facts these two turns state
(`observe_facts`) -> accesses: `context()` records one for each memory it packed, and all of those are sent (the
block is pinned in the window, which never evicts a pinned item), so only the memories the model was shown get one.

Failure boundaries: a retrieval or a generation failure is raised (the memory's or the model's own typed error:
StorageError, DaemonUnreachable, LLMCallFailed, LLMTimeout), nothing is made up and nothing is recorded: the
window is as it was, and the turn can be sent again. Once there is an answer it is returned whatever fails after
it: a failure to record the turns or to extract their facts is a warning on the ChatTurn (and in the log).
Because the memory is the truth, a window that summarises or drops a message loses nothing: every turn is logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from agent_memory.cognition.tokens import TokenCounter, make_counter
from agent_memory.llm.chat import DEFAULT_TIMEOUT, ChatAnswer, ChatModel
from agent_memory.models import FactDecision
from agent_memory.runtime.messages import Message, WindowConfig, WindowTrace
from agent_memory.runtime.prompt import SYSTEM_INSTRUCTION
from agent_memory.runtime.summarise import Summariser
from agent_memory.runtime.turns import (
    Behind,
    Decision,
    MemoryBackend,
    Processed,
    TurnNumbers,
    context_ids,
    fact_decisions,
    record_exchange,
    save_decisions,
)
from agent_memory.runtime.window import Window

log = logging.getLogger(__name__)
MEMORY_TOKENS = 1024
"""The memory block's budget (facts first, then memories), at most a quarter of the window's limit: the block is
pinned, and a pin that passed the limit would be refused."""


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """`prompt` and `completion` as the provider reported them (counted here when it did not), `window` what the
    session's window holds after the turn, `memory` the memory block's share of the prompt."""

    prompt: int
    completion: int
    window: int
    memory: int


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One turn: the answer, what memory it used (ids), the window's two fits, tokens, decisions, timings."""

    answer: str
    session_id: str
    namespace: str
    model: str
    memory_ids: tuple[str, ...]
    fact_ids: tuple[str, ...]
    facts: tuple[str, ...]
    """The facts used, as "subject | attribute = value" (in fact_ids' order)."""
    window_before: WindowTrace
    """The fit before the user's message went in (room made for it)."""
    window_after: WindowTrace
    """The fit after the answer went in (an answer can itself push a full window over)."""
    tokens: TokenCounts
    turn_ids: tuple[str, ...] = ()
    """The user's turn and the answer's, as logged (empty when recording failed: see warnings)."""
    decisions: tuple[Decision, ...] = ()
    timings: Mapping[str, timedelta] = field(default_factory=dict)
    """Per step: retrieve, window, generate, record, extract."""
    warnings: tuple[str, ...] = ()
    recording: asyncio.Task[Recorded] | None = field(default=None, compare=False, repr=False)
    """With `record_behind`, the recording still running when the turn was returned; `settled()` waits for it."""

    async def settled(self) -> ChatTurn:
        """This turn with what its recording did: itself when it was recorded before it was returned; else, once
        the recording behind it has ended, the turn with its turn ids, decisions, warnings and record timings."""
        if self.recording is None:
            return self
        done = await asyncio.shield(self.recording)
        return replace(
            self,
            turn_ids=done.turn_ids,
            decisions=(*self.decisions, *done.decisions),
            timings={**self.timings, **done.timings},
            warnings=(*self.warnings, *done.warnings),
            recording=None,
        )


@dataclass(frozen=True, slots=True)
class Recorded:
    """What recording an exchange did: the two turns as logged, the decisions taken, what failed, how long."""

    turn_ids: tuple[str, ...]
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...]
    timings: Mapping[str, timedelta]


class AgentRuntime:
    """Chat turns over `memory` (a MemoryManager, or a DaemonClient of the daemon that owns the store) with any
    litellm model string; `litellm_options` (api_base, api_key, temperature, ...) go to every call. One window per
    (namespace, session), kept in this process; turns of one session run one at a time.

    `record_behind`: return each turn as soon as its answer is in the window, and record the exchange after it (in
    order within a session, each recording waiting for the one before); the ChatTurn's `settled()` gives its turn
    ids and decisions, `drain()` waits for every recording, and leaving the `async with` drains. The answer then
    leaves the memory work off the turn's path, as the proxy does by default; the next turn of a session can start
    before the last one is recorded, so a model that answers at once may ask before its last exchange is stored."""

    def __init__(
        self,
        memory: MemoryBackend,
        model: str | ChatModel = "ollama/llama3.1",
        window: WindowConfig | None = None,
        *,
        memory_tokens: int = MEMORY_TOKENS,
        timeout: timedelta = DEFAULT_TIMEOUT,
        counter: TokenCounter | None = None,
        summariser: Summariser | None = None,
        record_behind: bool = False,
        **litellm_options: Any,
    ) -> None:
        self.memory = memory
        self.model = model if isinstance(model, ChatModel) else ChatModel(model, timeout=timeout, **litellm_options)
        self.window_config = window or WindowConfig()
        self.memory_tokens = max(1, min(memory_tokens, self.window_config.limit_tokens // 4))
        self.counter = counter or make_counter("cl100k_base")
        self._summariser = summariser
        self._windows: dict[tuple[str, str], Window] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._numbers = TurnNumbers()
        self.record_behind = record_behind
        self._behind = Behind()  # the recordings behind returned turns, in order within a session

    async def __aenter__(self) -> AgentRuntime:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Wait for the recordings still running, then close the model's HTTP clients; the memory is the caller's
        to close."""
        await self.drain()
        await self.model.aclose()

    async def drain(self) -> None:
        """Wait until every turn returned so far is recorded (or its failure is a warning on its recording)."""
        await self._behind.drain()

    def window(self, session_id: str, *, namespace: str = "default") -> Window:
        """The session's window (made, with the system instruction pinned, on first use)."""
        key = (namespace, session_id)
        if key not in self._windows:
            made = Window(self.window_config, counter=self.counter, summariser=self._summariser)
            made.append(Message("system", SYSTEM_INSTRUCTION, pinned=True))
            self._windows[key] = made
        return self._windows[key]

    async def chat(self, session_id: str, user_message: str, *, namespace: str = "default") -> ChatTurn:
        """One turn (the module's docstring says the order and what fails how)."""
        async with self._locks.setdefault((namespace, session_id), asyncio.Lock()):
            return await self._turn(session_id, user_message, namespace)

    async def _turn(self, session_id: str, user_message: str, namespace: str) -> ChatTurn:
        steps = _Steps()
        with steps("retrieve"):
            context = await self.memory.context(user_message, budget_tokens=self.memory_tokens, namespace=namespace)
        window = self.window(session_id, namespace=namespace)
        with steps("window"):
            window.replace_pinned("memory", context.text)  # as_chat fences it as data
            before = await window.force_fit(incoming_tokens=window.count_tokens(user_message), query=user_message)
            messages = [*window.as_chat(), {"role": "user", "content": user_message}]
        prepared = asyncio.create_task(self._prepare(user_message))  # the model thread is idle while the model answers
        try:
            with steps("generate"):
                answer = await self.model.complete(messages)  # a failure is raised: nothing below runs
        finally:
            await prepared  # never raises: a text it could not embed is embedded when recorded
        with steps("window"):
            window.append(Message("user", user_message))
            window.append(Message("assistant", answer.content))
            after = await window.force_fit()
        memory_ids, fact_ids = context_ids(context)
        if self.record_behind:
            numbers = self._numbers.take(namespace, session_id, 2)  # in the order the answers came
            recording = self._record_later((namespace, session_id), user_message, answer, numbers)
            processed: Sequence[Processed] = []
            decided: Sequence[FactDecision] = []
            warnings: list[str] = []
        else:
            recording, recorded = None, await self._recorded(session_id, namespace, user_message, answer)
            processed, decided, warnings = recorded.processed, recorded.decided, recorded.warnings
            steps.taken.update(recorded.steps.taken)
        return ChatTurn(
            answer.content,
            session_id,
            namespace,
            answer.model,
            memory_ids,
            fact_ids,
            tuple(f"{c.fact.subject} | {c.fact.attribute} = {c.fact.value}" for c in context.facts),
            before,
            after,
            self._tokens(messages, answer, window, context.tokens),
            tuple(p.turn_id for p in processed),
            (*save_decisions(processed), *fact_decisions(decided)),
            steps.taken,
            tuple(warnings),
            recording,
        )

    def _record_later(
        self, key: tuple[str, str], user: str, answer: ChatAnswer, numbers: Sequence[int]
    ) -> asyncio.Task[Recorded]:
        async def record() -> Recorded:
            done = await self._recorded(key[1], key[0], user, answer, numbers)
            decisions = (*save_decisions(done.processed), *fact_decisions(done.decided))
            return Recorded(tuple(p.turn_id for p in done.processed), decisions, tuple(done.warnings), done.steps.taken)

        return self._behind.run(key, record)

    async def _prepare(self, user_message: str) -> None:
        """Embed the user's message for the write path while the model answers (MemoryManager.prepare_turns; a
        memory without it, the daemon's client, embeds it when it is recorded). Only a speed-up: a failure is
        logged and the turn goes on."""
        prepare = getattr(self.memory, "prepare_turns", None)
        if prepare is None:
            return
        try:
            await prepare([user_message])
        except Exception:
            log.debug("the user's message could not be embedded ahead; it is embedded when recorded", exc_info=True)

    async def _recorded(
        self, session_id: str, namespace: str, user: str, answer: ChatAnswer, taken: Sequence[int] | None = None
    ) -> _Recording:
        """Log both turns, then the policy step on their facts; each failure is a warning (the answer stands)."""
        done = _Recording()
        with done.steps("record"):
            try:
                done.processed = await record_exchange(
                    self.memory, self._numbers, namespace=namespace, session_id=session_id, user=user,
                    answer=answer.content, taken=taken,
                )  # fmt: skip
            except Exception as exc:
                done.warnings.append(_warn("the turns were not recorded, so no fact was extracted either", exc))
                return done
        with done.steps("extract"):
            try:
                done.decided = await self.memory.observe_facts([p.turn_id for p in done.processed])
            except Exception as exc:
                done.warnings.append(_warn("the turns are recorded, but their facts were not extracted", exc))
        return done

    def _tokens(self, messages: list[dict[str, str]], answer: ChatAnswer, window: Window, memory: int) -> TokenCounts:
        prompt = answer.prompt_tokens
        if prompt is None:
            prompt = sum(self.counter.count(m["content"]) for m in messages)
        completion = answer.completion_tokens
        if completion is None:
            completion = self.counter.count(answer.content)
        return TokenCounts(prompt, completion, window.tokens, memory)


def _warn(what: str, exc: BaseException) -> str:
    text = f"{what}: {type(exc).__name__}: {exc}"
    log.warning("%s", text)
    return text


@dataclass
class _Recording:
    processed: Sequence[Processed] = ()
    decided: Sequence[FactDecision] = ()
    warnings: list[str] = field(default_factory=list)
    steps: _Steps = field(default_factory=lambda: _Steps())


class _Steps:
    """Wall time per step, summed when a step runs twice (the window is fitted before and after the answer)."""

    def __init__(self) -> None:
        self.taken: dict[str, timedelta] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            spent = timedelta(seconds=time.perf_counter() - began)
            self.taken[name] = self.taken.get(name, timedelta()) + spent
