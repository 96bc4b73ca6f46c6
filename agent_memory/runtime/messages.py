"""The short-term window's data: its settings, the messages it holds and the trace of each fit. No I/O.

Kept apart from window.py so the summarisers (summarise.py) can take messages without importing the window.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agent_memory.errors import ConfigError

ROLES = frozenset({"system", "user", "assistant", "memory", "summary"})
""""memory" is an injected memory block and "summary" a summary the window wrote: both go to the model as system
messages (Window.as_chat), memory fenced as data."""
SUMMARY_HEADER = "Summary of earlier messages in this chat (the originals are kept in memory):\n"


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """Thresholds are shares of `limit_tokens`. Over `warning`, the oldest unpinned messages are summarised down to
    `target` (so summaries come in batches, not one every turn); over `critical`, messages of low relevance to the
    query are filtered, then the oldest are dropped. The newest `keep_recent` unpinned messages are never
    summarised or filtered, and are dropped only when nothing else is left to drop and the limit is still passed."""

    limit_tokens: int = 8000
    warning: float = 0.75
    critical: float = 0.90
    keep_recent: int = 4
    summary_tokens: int = 256
    target: float = 0.6
    """After crossing `warning`, summarising aims for this share of the limit."""
    min_relevance: float = 0.1
    """Over `critical`, a message whose relevance to the query is below this may be filtered out (0..1: the
    idf-weighted share of the query's words the message contains)."""
    message_overhead: int = 3
    """Tokens each message costs beyond its content in a chat request (role and separators: 3 in OpenAI's count)."""

    def __post_init__(self) -> None:
        if self.limit_tokens <= 0:
            raise ConfigError(f"window.limit_tokens must be > 0, not {self.limit_tokens}")
        if not 0 < self.target <= self.warning <= self.critical <= 1:
            raise ConfigError(
                "window thresholds must satisfy 0 < target <= warning <= critical <= 1, not "
                f"target={self.target}, warning={self.warning}, critical={self.critical}"
            )
        for name in ("keep_recent", "message_overhead"):
            if getattr(self, name) < 0:
                raise ConfigError(f"window.{name} must be >= 0, not {getattr(self, name)}")
        if self.summary_tokens <= 0:
            raise ConfigError(f"window.summary_tokens must be > 0, not {self.summary_tokens}")
        if not 0 <= self.min_relevance <= 1:
            raise ConfigError(f"window.min_relevance must be within 0..1, not {self.min_relevance}")


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the window. `id` is assigned by the window when empty ("m1", "m2", ...; "s1" for its
    summaries); `tokens` is set by the window: what the message costs as `as_chat` renders it, overhead included."""

    role: str
    content: str
    pinned: bool = False
    id: str = ""
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class WindowTrace:
    """What one `force_fit` did and why. Every message that left the window is named in exactly one of
    `summarised`, `filtered` or `dropped`; `reasons` says why, one line per step, in order."""

    before_tokens: int
    after_tokens: int
    limit: int
    summarised: tuple[str, ...]
    summary_id: str | None
    filtered: tuple[str, ...]
    dropped: tuple[str, ...]
    reasons: tuple[str, ...]
    overflow: bool
    """True when the incoming message is larger than the room pinned messages leave: every unpinned message was
    evicted, and `append` will cut the message to fit. (Pinned messages themselves can never overflow: a pin that
    would is refused with WindowOverflow.)"""
    incoming_tokens: int = 0
    truncated: tuple[str, ...] = ()
    """Messages cut on `append` since the previous fit because they alone were larger than the room left."""

    @property
    def evicted(self) -> tuple[str, ...]:
        return self.summarised + self.filtered + self.dropped


def sent(role: str, content: str) -> bool:
    """False for a message as_chat leaves out (an empty memory block: this turn recalled nothing)."""
    return role != "memory" or bool(content.strip())


def chat_role(role: str) -> str:
    return "system" if role in ("memory", "summary") else role


def render(role: str, content: str) -> str:
    """What the model is sent for a message: what the window counts. An empty memory block is not sent at all."""
    if role == "memory":
        if not content.strip():
            return ""
        opening, closing = _fence()
        if content.startswith(opening) and content.endswith(closing) and content.count(closing) == 1:
            return content  # already fenced by the context compiler
        return f"{opening}\n{content.replace(closing, '</ memories>')}\n{closing}"
    if role == "summary":
        return SUMMARY_HEADER + content
    return content


@functools.cache
def _fence() -> tuple[str, str]:
    """The context compiler's fence, imported on first use: cognition.context pulls in the scoring stack."""
    from agent_memory.cognition.context import CLOSE, OPEN

    return OPEN, CLOSE
