"""Token counters for the context budget: ceil(chars/4) by default, or tiktoken's cl100k_base, offline.

tiktoken downloads its BPE files on first use. litellm's wheel ships the cl100k_base file under the name tiktoken
caches it as (the sha1 of its URL), so pointing TIKTOKEN_CACHE_DIR there makes the exact counter work with no
network. When the file is missing we refuse rather than let tiktoken reach the internet.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
from pathlib import Path
from typing import Protocol

from agent_memory.errors import ConfigError

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class CharCounter:
    """ceil(len/4): the usual estimate for English; never zero for non-empty text."""

    name = "chars/4"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)


class TiktokenCounter:
    """cl100k_base, exact for OpenAI's GPT-3.5/4 family, loaded from the BPE file litellm ships."""

    name = "cl100k_base"

    def __init__(self) -> None:
        cache = _bundled_bpe_dir()
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
        import tiktoken

        self._encoding = tiktoken.get_encoding("cl100k_base")

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def _bundled_bpe_dir() -> Path:
    spec = importlib.util.find_spec("litellm")
    locations = list(spec.submodule_search_locations or []) if spec else []
    wanted = hashlib.sha1(CL100K_URL.encode()).hexdigest()
    for location in locations:
        folder = Path(location) / "litellm_core_utils" / "tokenizers"
        if (folder / wanted).is_file():
            return folder
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured and (Path(configured) / wanted).is_file():
        return Path(configured)
    raise ConfigError(
        "The cl100k_base token counter needs tiktoken's BPE file, which litellm's wheel ships; it was not found "
        "(is litellm installed?). Use retrieval.token_counter = 'chars' instead."
    )


def make_counter(name: str) -> TokenCounter:
    if name == "chars":
        return CharCounter()
    if name == "cl100k_base":
        return TiktokenCounter()
    raise ConfigError(f"Unknown token counter {name!r}: use 'chars' or 'cl100k_base'")
