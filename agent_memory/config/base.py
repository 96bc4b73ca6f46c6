"""The base of every configuration section: frozen, and no key it does not know."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

ENV_PREFIX = "AGENT_MEMORY__"


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
