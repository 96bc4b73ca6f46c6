"""The whole exception tree of agent_memory.

AgentMemoryError
  ConfigError                 bad TOML or environment value; the message names the key
  InvalidInput(ValueError)    input rejected before anything was written
    EmptyContent, ContentTooLarge, InvalidEncoding, InvalidIdentifier, DuplicateTurn, InvalidImage
    MemoryNotCurrent          a change to a memory that is superseded or merged: change the one that replaced it
  RevisionConflict            a change named a revision that is not the memory's current one; nothing changed
  NotFound(LookupError)       MemoryNotFound, TurnNotFound
    MemoryErased              the memory was erased (erase()): only the erase's record names it
  StorageError                an engine failed; __cause__ is the engine's own exception
    RecordErased              a log record read by position is an erase's tombstone
    CorruptRecord             a log record or row failed its checksum
    StoreLocked               another owner holds the data directory
    EngineUnavailable         an engine's own process could not start (the graph's fork server); its files are sound
    DataDirError              the data directory is not a directory, cannot be created, or cannot be written
  ModelError                  the embedder or extractor failed, or returned malformed output
    ImageMemoryUnavailable    no open-clip weights on disk (and no opt-in to download them)
  LLMError                    a configured LLM failed; the caller falls back to the heuristic
    LLMCallFailed             the call itself failed (connection, HTTP error, provider error)
    LLMTimeout                no answer within llm.timeout
    LLMBadOutput              an answer that is not the JSON asked for; the message quotes its start
  ClosedError                 used after close()
  WindowOverflow              pinned messages would leave a short-term window over its limit; nothing changed
  DaemonError                 the daemon answered with an error no class above fits; the message names its URL
    DaemonUnreachable         the daemon that owns the data directory did not answer; the message names its URL
"""

from __future__ import annotations


class AgentMemoryError(Exception):
    """Base class of every error this package raises on purpose. `code` is the stable code the daemon answers it
    with (docs/daemon.md), set on an error a DaemonClient raised from the daemon's answer; empty otherwise."""

    code: str = ""


class ConfigError(AgentMemoryError):
    """A configuration value is missing or malformed."""


class InvalidInput(AgentMemoryError, ValueError):
    """Input was rejected before anything was written."""


class EmptyContent(InvalidInput):
    def __init__(self) -> None:
        super().__init__("Turn content is empty (or only whitespace); nothing was written")


class ContentTooLarge(InvalidInput):
    def __init__(self, size: int, limit: int, key: str = "max_content_bytes") -> None:
        super().__init__(f"Turn content is {size} bytes, over {key}={limit}; nothing was written")
        self.size, self.limit, self.key = size, limit, key


class InvalidEncoding(InvalidInput):
    def __init__(self, detail: str) -> None:
        super().__init__(f"Turn content is not valid UTF-8 ({detail}); nothing was written")


class InvalidIdentifier(InvalidInput):
    def __init__(self, field: str, value: object, rule: str) -> None:
        super().__init__(f"Invalid {field} {value!r}: {rule}; nothing was written")
        self.field = field


class DuplicateTurn(InvalidInput):
    code = "duplicate_turn"

    def __init__(self, namespace: str, session_id: str, turn_number: int) -> None:
        super().__init__(
            f"Turn {turn_number} of session {session_id!r} in namespace {namespace!r} "
            "was already processed; nothing was written"
        )
        self.namespace, self.session_id, self.turn_number = namespace, session_id, turn_number


class MemoryNotCurrent(InvalidInput):
    def __init__(self, memory_id: str, status: str, replaced_by: str | None) -> None:
        by = f" by {replaced_by!r}" if replaced_by else ""
        super().__init__(
            f"Memory {memory_id!r} is {status}{by}: change the memory that replaced it; nothing was changed"
        )
        self.memory_id, self.status, self.replaced_by = memory_id, status, replaced_by


class RevisionConflict(AgentMemoryError):
    """The memory changed since the caller read it: `expected` is the revision the caller named, `current` the
    memory's. Read it again (get, history) and decide again."""

    def __init__(self, memory_id: str, expected: int, current: int) -> None:
        super().__init__(
            f"Memory {memory_id!r} is at revision {current}, not the expected revision {expected}; "
            "nothing was changed (read it again, then retry)"
        )
        self.memory_id, self.expected, self.current = memory_id, expected, current


class NotFound(AgentMemoryError, LookupError):
    """Something looked up by id does not exist."""


class MemoryNotFound(NotFound):
    def __init__(self, memory_id: str) -> None:
        super().__init__(f"No memory with id {memory_id!r}")
        self.memory_id = memory_id


class TurnNotFound(NotFound):
    def __init__(self, turn_id: str) -> None:
        super().__init__(f"No turn with id {turn_id!r}")
        self.turn_id = turn_id


class MemoryErased(NotFound):
    """The memory was erased: its words are gone from every file; only the erase's record remains."""

    def __init__(self, memory_id: str, erase_id: str, erased_at: str) -> None:
        super().__init__(f"Memory {memory_id!r} was erased (erase {erase_id} at {erased_at}); nothing of it is kept")
        self.memory_id, self.erase_id, self.erased_at = memory_id, erase_id, erased_at


class StorageError(AgentMemoryError):
    """An engine failed; ``__cause__`` holds the engine's own exception."""


class RecordErased(StorageError):
    """A log record read by its position was erased: a tombstone holds its place."""

    def __init__(self, where: str, erase_id: str) -> None:
        super().__init__(f"The log record at {where} was erased (erase {erase_id})")
        self.erase_id = erase_id


class CorruptRecord(StorageError):
    """A stored record failed its checksum or could not be parsed."""


class EngineUnavailable(StorageError):
    """An engine's own process could not start (the graph's fork server, storage/graph.py): nothing says its files
    are at fault, so they are not set aside. The process's own error is on stderr."""


class StoreLocked(StorageError):
    def __init__(self, path: str, owner_pid: int | None) -> None:
        owner = f"process {owner_pid}" if owner_pid else "another process"
        super().__init__(
            f"Data directory {path} is owned by {owner} (lock file owner.lock); "
            "reach it through that process, or stop it first"
        )
        self.owner_pid = owner_pid


class DataDirError(StorageError):
    """The data directory (or a folder in it) cannot be used; the message names the path and what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"Data directory {path} {problem}")
        self.path = path


class ModelError(AgentMemoryError):
    """The embedder or extractor failed, or returned malformed output."""


class InvalidImage(InvalidInput):
    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"Image {what} cannot be read ({detail}); nothing was written")
        self.what = what


class ImageMemoryUnavailable(ModelError):
    """Image memory is off: the reason names the missing weights and the setting that would turn it on."""


class LLMError(AgentMemoryError):
    """A configured LLM failed; callers fall back to the offline heuristic and log a warning."""


class LLMCallFailed(LLMError):
    """The call itself failed: connection refused, an HTTP error, a provider error."""


class LLMTimeout(LLMError):
    """No answer within llm.timeout."""


class LLMBadOutput(LLMError):
    """The answer was not the JSON that was asked for, or failed validation; the message quotes its start."""


class ClosedError(AgentMemoryError):
    def __init__(self, what: str = "MemoryManager") -> None:
        super().__init__(f"{what} is closed; open it again before use")


class WindowOverflow(AgentMemoryError):
    """Pinned messages are never evicted, so a change that would leave them and it over a short-term window's limit
    is refused: a pin, or a message that could not fit beside them even cut to nothing."""

    def __init__(self, limit: int, pinned_tokens: int, adding_tokens: int, what: str = "The pinned message") -> None:
        super().__init__(
            f"{what} needs {adding_tokens:,} tokens beside the {pinned_tokens:,} already pinned, over the window's "
            f"limit of {limit:,}; nothing was changed (pinned messages are never evicted: shorten the system prompt "
            "or the memory block, or raise limit_tokens)"
        )
        self.limit, self.pinned_tokens, self.adding_tokens = limit, pinned_tokens, adding_tokens


class DaemonError(AgentMemoryError):
    """The daemon answered with an error that no class above fits; `code` is its stable code (docs/daemon.md).
    An error the daemon maps to a class above comes back to its client as that class, with the daemon's message."""

    def __init__(self, message: str, *, url: str, code: str) -> None:
        super().__init__(message)
        self.url, self.code = url, code


class DaemonUnreachable(DaemonError):
    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"No answer from the agent-memory daemon at {url}: {detail}", url=url, code="unreachable")
