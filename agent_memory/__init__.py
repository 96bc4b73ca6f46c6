"""agent-memory: a local-first, async cognitive memory for AI agents.

Importing the package sets the offline defaults (no hub downloads, litellm's bundled cost map) unless the
caller has set them already; nothing here reaches the network.

`MemoryManager` is imported on first use (PEP 562 `__getattr__`), not with the package: the faces that only talk
to a daemon (the CLI through a live daemon, the MCP server, the hooks) import `agent_memory` and must not pay for
the engines (Kuzu, aiosqlite, numpy) or the model behind it. The light names (config, errors, models) are eager.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

for _key, _value in (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
    ("TRANSFORMERS_VERBOSITY", "error"),
):
    os.environ.setdefault(_key, _value)

from agent_memory.config import Config, load_config  # noqa: E402
from agent_memory.errors import (  # noqa: E402
    AgentMemoryError,
    ClosedError,
    ConfigError,
    ContentTooLarge,
    CorruptRecord,
    DaemonError,
    DaemonUnreachable,
    DataDirError,
    DuplicateTurn,
    EmptyContent,
    EngineUnavailable,
    ImageMemoryUnavailable,
    InvalidEncoding,
    InvalidIdentifier,
    InvalidImage,
    InvalidInput,
    LLMBadOutput,
    LLMCallFailed,
    LLMError,
    LLMTimeout,
    MemoryErased,
    MemoryNotCurrent,
    MemoryNotFound,
    ModelError,
    NotFound,
    RecordErased,
    RevisionConflict,
    StorageError,
    StoreLocked,
    TurnNotFound,
    WindowOverflow,
)
from agent_memory.models import (  # noqa: E402
    DoctorReport,
    EmotionalContext,
    Fact,
    LayerHit,
    Media,
    Memory,
    MemoryId,
    MemoryStatus,
    MemoryType,
    RetrievalResult,
    Revision,
    SaveDecision,
    Tier,
    TurnInput,
    TurnResult,
)

if TYPE_CHECKING:
    from agent_memory.manager import MemoryManager

_LAZY = {"MemoryManager": "agent_memory.manager"}
"""Public names imported on first access, and the module each comes from."""


def __getattr__(name: str) -> Any:
    """Import a lazy public name on first access and keep it as a module attribute (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"
__all__ = [
    "AgentMemoryError",
    "ClosedError",
    "Config",
    "ConfigError",
    "ContentTooLarge",
    "CorruptRecord",
    "DaemonError",
    "DaemonUnreachable",
    "DataDirError",
    "DoctorReport",
    "DuplicateTurn",
    "EmotionalContext",
    "Fact",
    "EmptyContent",
    "ImageMemoryUnavailable",
    "InvalidEncoding",
    "InvalidImage",
    "InvalidIdentifier",
    "InvalidInput",
    "LayerHit",
    "Media",
    "Memory",
    "MemoryId",
    "MemoryManager",
    "MemoryNotCurrent",
    "MemoryErased",
    "MemoryNotFound",
    "MemoryStatus",
    "MemoryType",
    "LLMBadOutput",
    "LLMCallFailed",
    "LLMError",
    "LLMTimeout",
    "ModelError",
    "NotFound",
    "RetrievalResult",
    "RecordErased",
    "RevisionConflict",
    "Revision",
    "SaveDecision",
    "StorageError",
    "EngineUnavailable",
    "StoreLocked",
    "Tier",
    "TurnInput",
    "TurnNotFound",
    "WindowOverflow",
    "TurnResult",
    "load_config",
    "__version__",
]
