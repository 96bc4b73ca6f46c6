"""One frozen configuration object: built-in defaults, then a TOML file, then AGENT_MEMORY__* variables.

`config/default.toml` documents every key with its default; a test keeps it equal to these models. `Config` and
`load_config` live here; the sections are grouped by the part of the system they set: `storage` (journal,
embedding, vectors, images), `retrieval` (retrieval, decay, notes), `cognition` (extraction, facts, the LLM, the
save decision) and `daemon` (sleep jobs, the HTTP server).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_memory.config.base import ENV_PREFIX, Section
from agent_memory.config.cognition import ExtractionConfig, FactsConfig, LLMConfig, SaveConfig
from agent_memory.config.daemon import ServeConfig, SleepConfig
from agent_memory.config.retrieval import DecayConfig, NotesConfig, RetrievalConfig
from agent_memory.config.storage import EmbeddingConfig, ImageConfig, JournalConfig, VectorsConfig
from agent_memory.errors import ConfigError
from agent_memory.project import current_default_data_dir

__all__ = [
    "ENV_PREFIX",
    "Config",
    "DecayConfig",
    "EmbeddingConfig",
    "ExtractionConfig",
    "FactsConfig",
    "ImageConfig",
    "JournalConfig",
    "LLMConfig",
    "NotesConfig",
    "RetrievalConfig",
    "SaveConfig",
    "ServeConfig",
    "SleepConfig",
    "VectorsConfig",
    "load_config",
]


class Config(Section):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)  # so the default "~" expands

    data_dir: Path = Field(default_factory=current_default_data_dir)
    """Unset: `<repo root>/.agent_memory` inside a git work tree (found from the current directory), else
    `~/.agent_memory` (project.py)."""
    max_content_bytes: int = Field(default=64 * 1024, ge=1)
    """The largest turn remembered as one memory (and the largest memory an update, a caption or a query takes). A
    turn over it, up to `max_turn_bytes`, is logged whole and remembered in chunks (long_turns.py)."""
    max_turn_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    """The hard cap: a turn over it is refused with ContentTooLarge on every path (process_turn, process_turns,
    ingest, HTTP) and nothing is written. 8 MiB is about 13,000 chunks, minutes of embedding in one call."""
    chunk_tokens: int = Field(default=160, ge=16, le=4096)
    """The size of a long turn's chunks, in tokens of 4 characters (so 640 characters). English prose is ~109 word
    pieces a chunk, inside the 128 the model reads (`embedding.max_tokens`), so every word counts in its vector;
    timestamped log lines are ~240, and the vector reads their first half (FTS5 and grep read every word)."""
    projector_batch: int = Field(default=256, ge=1)
    projector_delay: timedelta = timedelta(seconds=1)
    """How long the background projector gathers outbox rows before applying them in one batch. Reads, flush()
    and close() apply pending rows at once (a search their vector part and keywords: retrieval does not read the
    graph), so this never makes a read stale."""
    projector_read_delay: timedelta = Field(default=timedelta(milliseconds=20), ge=timedelta(0))
    """How long after a write the background applies what a search needs (the vector parts and the keywords),
    so that the next search does not apply them on its own path first."""
    journal: JournalConfig = JournalConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    vectors: VectorsConfig = VectorsConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    decay: DecayConfig = DecayConfig()
    extraction: ExtractionConfig = ExtractionConfig()
    facts: FactsConfig = FactsConfig()
    llm: LLMConfig = LLMConfig()
    save: SaveConfig = SaveConfig()
    image: ImageConfig = ImageConfig()
    sleep: SleepConfig = SleepConfig()
    serve: ServeConfig = ServeConfig()
    notes: NotesConfig = NotesConfig()

    @field_validator("data_dir", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty: that would put the store in the current directory")
        return value

    @field_validator("data_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @model_validator(mode="after")
    def _turn_cap(self) -> Config:
        if self.max_turn_bytes < self.max_content_bytes:
            raise ValueError(
                f"max_turn_bytes ({self.max_turn_bytes}) is below max_content_bytes ({self.max_content_bytes})"
            )
        return self

    @model_validator(mode="after")
    def _llm_for_facts(self) -> Config:
        if self.facts.extractor == "llm" and not self.llm.model:
            raise ValueError("facts.extractor is 'llm' but llm.model is empty: set a model, or use 'auto'")
        return self

    @property
    def embedding_cache(self) -> Path:
        if self.embedding.cache_dir:
            return Path(self.embedding.cache_dir).expanduser()
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agent-memory"

    @property
    def outbox_retry_delay(self) -> timedelta:
        return timedelta(seconds=1)


def load_config(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Config:
    """Defaults, then `path` (TOML) if given, then AGENT_MEMORY__SECTION__KEY variables, then overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"Cannot read config file {path}: {exc}") from exc
    for key, value in (os.environ if environ is None else environ).items():
        if key.startswith(ENV_PREFIX):
            _set_path(data, key.removeprefix(ENV_PREFIX).lower().split("__"), value)
    for key, value in overrides.items():
        _set_path(data, key.split("__"), value)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"Invalid configuration: {problems}") from exc


def _set_path(data: dict[str, Any], keys: list[str], value: Any) -> None:
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"Config key {'.'.join(keys)} conflicts with the value at {key!r}")
        node = child
    node[keys[-1]] = value
