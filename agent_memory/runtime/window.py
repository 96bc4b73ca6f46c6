"""The short-term window: a chat's message list that never passes its token limit (seed "AgeMem").

`force_fit` runs at both boundaries of a turn, before the user's message is appended (with its size as
`incoming_tokens`) and after the assistant's answer, because an answer can itself take a 70% window past 100%.
In order, each step only while the window is still over its threshold:

1. over `critical`: filter eligible messages whose relevance to the query is under `min_relevance`, least
   relevant first, down to `warning`;
2. over `warning`: summarise the oldest eligible messages down to `target`; one "summary" message takes their
   place (by the configured summariser; extractively when it fails);
3. still over `critical`: drop the oldest eligible messages down to `critical`;
4. still over the limit: drop the oldest of the `keep_recent` newest, down to the limit.

"Eligible" means unpinned and older than the `keep_recent` newest unpinned messages. Pinned messages (the system
prompt, the injected memory block, the caller's pins) are never evicted, and a pin that would make them pass the
limit is refused (WindowOverflow) before anything changes. Nothing evicted is lost (the runtime has logged every
turn to memory), and the trace names every message that left. One chat, one window: calls are meant to come from
one task; `force_fit` calls are serialised.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from agent_memory.errors import InvalidIdentifier, NotFound, WindowOverflow
from agent_memory.runtime.messages import ROLES, Message, WindowConfig, WindowTrace, chat_role, render, sent
from agent_memory.runtime.summarise import (
    Analysis,
    ExtractiveSummariser,
    LLMSummariser,
    Summariser,
    TokenCounter,
    analyse,
    checked_summary,
    clip,
    content_words,
    counting,
    relevance,
)

__all__ = [
    "ExtractiveSummariser",
    "LLMSummariser",
    "Message",
    "Summariser",
    "TokenCounter",
    "Window",
    "WindowConfig",
    "WindowTrace",
]


MIN_SUMMARY_TOKENS = 8
"""Below this, a summary would say nothing: the messages are left for the later steps."""


class Window:
    def __init__(
        self,
        config: WindowConfig | None = None,
        *,
        counter: TokenCounter | None = None,
        summariser: Summariser | None = None,
    ) -> None:
        self.config = config or WindowConfig()
        self._count = counting(counter)
        self._extractive = ExtractiveSummariser(self._count)
        self._summariser: Summariser = summariser or self._extractive
        self._items: list[Message] = []
        self._total = self._pinned = 0
        self._serial = {"m": 0, "s": 0}
        self._ids: set[str] = set()
        self._words: dict[str, frozenset[str]] = {}
        self._analyses: dict[str, Analysis] = {}  # made on arrival, so summarising many messages stays cheap
        self._cut: list[tuple[str, str]] = []  # (id, reason) of messages cut on append since the last fit
        self._trace: WindowTrace | None = None
        self._fitting = asyncio.Lock()
        self._summary_cost = self._measure("summary", "")

    # What the window holds.

    @property
    def tokens(self) -> int:
        """What the messages cost as `as_chat` renders them, per-message overhead included."""
        return self._total

    @property
    def pinned_tokens(self) -> int:
        return self._pinned

    def __len__(self) -> int:
        return len(self._items)

    def messages(self) -> list[Message]:
        return list(self._items)

    def last_trace(self) -> WindowTrace | None:
        return self._trace

    def count_tokens(self, text: str) -> int:
        """The counter the window uses: what to pass as `force_fit(incoming_tokens=...)` for a message's content
        (the window adds its per-message overhead itself)."""
        return self._count(text)

    def as_chat(self) -> list[dict[str, str]]:
        """OpenAI-style messages. A memory block goes as a system message fenced as data (context.py's fence,
        kept when the block already has it; an empty one is left out); a summary as a system message that says
        what it is."""
        return [
            {"role": chat_role(m.role), "content": render(m.role, m.content)}
            for m in self._items
            if sent(m.role, m.content)
        ]

    # Changing it.

    def append(self, message: Message) -> Message:
        """Store `message` at the end, with its id and token count. It does not fit the window by itself (call
        `force_fit`), but a pinned message that would make pinned ones pass the limit is refused (WindowOverflow),
        and an unpinned one larger than all the room pinned ones leave is cut to that room (the trace says so)."""
        if message.role not in ROLES:
            raise InvalidIdentifier("message role", message.role, f"one of {', '.join(sorted(ROLES))}")
        if message.id in self._ids:
            raise InvalidIdentifier("message id", message.id, "already in the window")
        stored = dataclasses.replace(message, id=message.id or self._new_id("m"))
        stored = dataclasses.replace(stored, tokens=self._measure(stored.role, stored.content))
        if stored.pinned and self._pinned + stored.tokens > self.config.limit_tokens:
            raise WindowOverflow(self.config.limit_tokens, self._pinned, stored.tokens)
        room = self.config.limit_tokens - self._pinned
        if not stored.pinned and stored.tokens > room:
            cut = self._cut_to(stored, room)
            if cut.tokens > room:
                raise WindowOverflow(self.config.limit_tokens, self._pinned, cut.tokens, "The message, cut empty,")
            note = (
                f"{cut.id} had {stored.tokens:,} tokens, over the {room:,} pinned messages leave: cut to {cut.tokens:,}"
            )
            self._cut.append((cut.id, note))
            stored = cut
        self._items.append(stored)
        self._ids.add(stored.id)
        if not stored.pinned:
            self._analyses[stored.id] = analyse(stored)
        self._total += stored.tokens
        self._pinned += stored.tokens if stored.pinned else 0
        return stored

    def pin(self, message_id: str) -> None:
        index, message = self._get(message_id)
        if message.pinned:
            return
        if self._pinned + message.tokens > self.config.limit_tokens:
            raise WindowOverflow(self.config.limit_tokens, self._pinned, message.tokens)
        self._items[index] = dataclasses.replace(message, pinned=True)
        self._pinned += message.tokens

    def unpin(self, message_id: str) -> None:
        index, message = self._get(message_id)
        if message.pinned:
            self._items[index] = dataclasses.replace(message, pinned=False)
            self._pinned -= message.tokens

    def replace_pinned(self, role: str, content: str) -> Message:
        """Swap the newest pinned message of `role` for a new one (new id, same place): this turn's memory block
        replaces the last turn's. With none yet, the new one goes at the end of the leading pinned run (after the
        system prompt). Refused with WindowOverflow, nothing changed, if pinned messages would pass the limit."""
        if role not in ROLES:
            raise InvalidIdentifier("message role", role, f"one of {', '.join(sorted(ROLES))}")
        tokens = self._measure(role, content)
        found = [i for i, m in enumerate(self._items) if m.pinned and m.role == role]
        old = self._items[found[-1]] if found else None
        pinned_without = self._pinned - (old.tokens if old else 0)
        if pinned_without + tokens > self.config.limit_tokens:
            raise WindowOverflow(self.config.limit_tokens, pinned_without, tokens)
        new = Message(role, content, pinned=True, id=self._new_id("m"), tokens=tokens)
        if old is not None:
            self._items[found[-1]] = new
            self._forget(old)
        else:
            lead = next((i for i, m in enumerate(self._items) if not m.pinned), len(self._items))
            self._items.insert(lead, new)
        self._ids.add(new.id)
        self._total += tokens
        self._pinned += tokens
        return new

    def remove(self, message_id: str) -> Message:
        """Take a message out at the caller's request (not an eviction: no trace names it)."""
        index, message = self._get(message_id)
        del self._items[index]
        self._forget(message)
        return message

    async def force_fit(self, *, incoming_tokens: int = 0, query: str | None = None) -> WindowTrace:
        """Make room so that `tokens` plus the incoming message (`incoming_tokens` of content, 0 for none) stay
        within the limit, applying the warning and critical policy (module docstring). `query` is what relevance
        is judged against; None means the newest user message."""
        async with self._fitting:
            fit = _Fit(self, incoming_tokens, query)
            await fit.run()
            self._trace = fit.trace()
            return self._trace

    # Internals used by _Fit.

    def _eligible(self) -> list[Message]:
        unpinned = [m for m in self._items if not m.pinned]
        keep = self.config.keep_recent
        return unpinned[:-keep] if keep else unpinned

    def _evict(self, gone: Sequence[Message]) -> None:
        ids = {m.id for m in gone}
        self._items = [m for m in self._items if m.id not in ids]
        for message in gone:
            self._forget(message)

    def _forget(self, message: Message) -> None:
        self._total -= message.tokens
        self._pinned -= message.tokens if message.pinned else 0
        self._ids.discard(message.id)
        self._words.pop(message.id, None)
        self._analyses.pop(message.id, None)

    def _replace_with_summary(self, chosen: Sequence[Message], text: str, tokens: int) -> Message | None:
        """Put a summary where `chosen` were; None (nothing changed) if any of them left or was pinned meanwhile."""
        ids = {m.id for m in chosen}
        present = [m for m in self._items if m.id in ids and not m.pinned]
        if len(present) != len(ids):
            return None
        summary = Message("summary", text, id=self._new_id("s"), tokens=tokens)
        first = next(i for i, m in enumerate(self._items) if m.id in ids)
        self._items.insert(first, summary)
        self._ids.add(summary.id)
        self._evict(present)
        self._total += summary.tokens
        return summary

    def _words_of(self, message: Message) -> frozenset[str]:
        words = self._words.get(message.id)
        if words is None:
            words = self._words[message.id] = self._analysis_of(message).words
        return words

    def _analysis_of(self, message: Message) -> Analysis:
        analysis = self._analyses.get(message.id)
        if analysis is None:
            analysis = self._analyses[message.id] = analyse(message)
        return analysis

    def _extract(self, messages: Sequence[Message], size: int) -> str:
        analyses = [self._analysis_of(m) for m in messages]
        return self._extractive.summarise_now(messages, max_tokens=size, analyses=analyses)

    def _measure(self, role: str, content: str) -> int:
        if not sent(role, content):
            return 0
        return self._count(render(role, content)) + self.config.message_overhead

    def _new_id(self, prefix: str) -> str:
        while True:
            self._serial[prefix] += 1
            candidate = f"{prefix}{self._serial[prefix]}"
            if candidate not in self._ids:
                return candidate

    def _get(self, message_id: str) -> tuple[int, Message]:
        for index, message in enumerate(self._items):
            if message.id == message_id:
                return index, message
        raise NotFound(f"No message with id {message_id!r} in the window")

    def _cut_to(self, message: Message, room: int) -> Message:
        marker = f"\n[cut to fit the window: the message had {message.tokens:,} tokens; all of it is in memory]"
        content = clip(message.content, room, lambda text: self._measure(message.role, text), marker)
        return dataclasses.replace(message, content=content, tokens=self._measure(message.role, content))


class _Fit:
    """One force_fit: the four steps, and what each did, for the trace."""

    def __init__(self, window: Window, incoming_tokens: int, query: str | None) -> None:
        self.w, self.config, self.query = window, window.config, query
        self.header = window._summary_cost  # what a summary costs beyond its text
        self.limit = window.config.limit_tokens
        self.before = window.tokens
        want = incoming_tokens + window.config.message_overhead if incoming_tokens > 0 else 0
        room = self.limit - window.pinned_tokens
        self.need, self.overflow = min(want, room), want > room
        self.summarised: tuple[str, ...] = ()
        self.summary_id: str | None = None
        self.filtered: list[str] = []
        self.dropped: list[str] = []
        self.reasons = [reason for _, reason in window._cut]
        self.truncated = tuple(i for i, _ in window._cut)
        window._cut.clear()
        if self.overflow:
            self.reasons.append(
                f"the incoming message ({want:,} tokens) is larger than the {room:,} pinned messages leave: "
                "every unpinned message goes, and append cuts the message to fit"
            )

    def over(self, share: float) -> bool:
        return self.w.tokens + self.need > share * self.limit

    def state(self, name: str, share: float) -> str:
        incoming = f" + {self.need:,} incoming" if self.need else ""
        return f"{name} {share:.2f} ({self.w.tokens:,}{incoming} of {self.limit:,})"

    async def run(self) -> None:
        config = self.config
        if self.over(config.critical):
            self.filter()
        if self.over(config.warning):
            await self.summarise()
        if self.over(config.critical):
            self.drop(self.w._eligible(), config.critical, "still over critical", "oldest first")
        if self.over(1.0):
            self.drop([m for m in self.w._items if not m.pinned], 1.0, "over the limit", "of the most recent")
        if not self.reasons:
            self.reasons.append(f"{self.state('within warning', config.warning)}: nothing to do")

    def filter(self) -> None:
        state = self.state("over critical", self.config.critical)
        query = self.query if self.query is not None else _newest_user(self.w.messages())
        words = content_words(query or "")
        if not words:
            self.reasons.append(f"{state}: no query words to judge relevance by, nothing filtered")
            return
        eligible = {m.id for m in self.w._eligible()}
        unpinned = [m for m in self.w._items if not m.pinned]
        scores = relevance(words, [self.w._words_of(m) for m in unpinned])
        low = sorted(
            ((s, i) for i, s in enumerate(scores) if unpinned[i].id in eligible and s < self.config.min_relevance),
        )
        gone, freed = [], 0
        for score, i in low:
            if self.w.tokens - freed + self.need <= self.config.warning * self.limit:
                break
            gone.append((unpinned[i], score))
            freed += unpinned[i].tokens
        if not gone:
            self.reasons.append(f"{state}: no message under relevance {self.config.min_relevance:g} to filter")
            return
        self.w._evict([m for m, _ in gone])
        self.filtered = [m.id for m, _ in gone]
        listed = ", ".join(f"{m.id} ({s:.2f})" for m, s in gone)
        self.reasons.append(f"{state}: filtered {listed} as least relevant to the query")

    async def summarise(self) -> None:
        state = self.state("over warning", self.config.warning)
        header, goal = self.header, self.config.target * self.limit
        chosen: list[Message] = []
        freed = 0
        for message in self.w._eligible():
            if chosen and self.w.tokens - freed + header + self.budget(freed) + self.need <= goal:
                break
            chosen.append(message)
            freed += message.tokens
        size = self.budget(freed)
        if size < MIN_SUMMARY_TOKENS:
            self.reasons.append(f"{state}: too little old enough to summarise")
            return
        text, how = await self.summary_text(chosen, size)
        cost = self.w._measure("summary", text)
        if cost >= freed:
            self.reasons.append(f"{state}: a summary of {_span(chosen)} would not be smaller; not summarised")
            return
        summary = self.w._replace_with_summary(chosen, text, cost)
        if summary is None:
            self.reasons.append(f"{state}: the window changed while summarising; summary discarded")
            return
        self.summarised, self.summary_id = tuple(m.id for m in chosen), summary.id
        self.reasons.append(
            f"{state}: summarised {_span(chosen)} ({len(chosen)} messages, {freed:,} tokens) {how} "
            f"into {summary.id} ({summary.tokens:,} tokens)"
        )

    def budget(self, freed: int) -> int:
        """A summary's size: at most `summary_tokens`, and at most half of what it replaces."""
        return min(self.config.summary_tokens, (freed - self.header) // 2)

    async def summary_text(self, chosen: Sequence[Message], cap: int) -> tuple[str, str]:
        if self.w._summariser is self.w._extractive:
            return self.w._extract(chosen, cap), "extractively"
        return await checked_summary(
            self.w._summariser, chosen, cap, self.w.count_tokens, lambda: self.w._extract(chosen, cap)
        )

    def drop(self, candidates: Sequence[Message], share: float, name: str, order: str) -> None:
        state = self.state(name, share)
        gone, freed = [], 0
        for message in candidates:
            if self.w.tokens - freed + self.need <= share * self.limit:
                break
            gone.append(message)
            freed += message.tokens
        if gone:
            self.w._evict(gone)
            self.dropped += [m.id for m in gone]
            self.reasons.append(f"{state}: dropped {_span(gone)} {order}")

    def trace(self) -> WindowTrace:
        filtered, dropped, reasons = tuple(self.filtered), tuple(self.dropped), tuple(self.reasons)
        return WindowTrace(
            self.before, self.w.tokens, self.limit, self.summarised, self.summary_id, filtered, dropped, reasons,
            self.overflow, incoming_tokens=self.need, truncated=self.truncated,
        )  # fmt: skip


def _newest_user(messages: Sequence[Message]) -> str | None:
    return next((m.content for m in reversed(messages) if m.role == "user"), None)


def _span(messages: Sequence[Message]) -> str:
    ids = [m.id for m in messages]
    return ", ".join(ids) if len(ids) <= 3 else f"{ids[0]}, {ids[1]} ... {ids[-1]}"
