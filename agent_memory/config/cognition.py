"""The write path's judgement: extraction, facts, the LLM client and the save decision."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field

from agent_memory.config.base import Section


class ExtractionConfig(Section):
    max_keywords: int = Field(default=8, ge=0)
    max_entities: int = Field(default=12, ge=0)
    refresh_batch: int = Field(default=200, ge=1)
    """Memories the entity refresh (entity_refresh.py) looks at a transaction, when the rules that find entities
    (or `max_entities`) changed since they were stored: about 60 ms of extraction for 200 LongMemEval-sized turns."""
    refresh_delay: timedelta = Field(default=timedelta(seconds=2), ge=timedelta(0))
    """How long no write may be committed and no question asked before the entity refresh starts; it then goes on,
    batch after batch, until someone writes or asks."""


class FactsConfig(Section):
    multi_valued: tuple[str, ...] = ("likes", "dislikes", "visited", "allergic_to", "has_pet", "friend", "hobby")
    """Attributes that hold several values at once: a new value is added beside the others instead of closing the
    current one (every other attribute is single-valued). Compared after normalising (case, whitespace)."""
    extract_on_write: bool = False
    """Find the facts each user turn states about its speaker (name, job, employer, home, relationships, pets, likes,
    dislikes, allergies, plans) as the turn is stored, and remember them through the policy step. Off by default
    until its effect on the benchmarks' contexts is measured (the facts block takes part of their budget)."""
    block_match: Literal["speaker", "words"] = "speaker"
    """Which facts about the speaker open a first-person query's context: "speaker", all of them (up to 20);
    "words", only those whose attribute or value shares a content word with the query. A prototype (issue #20): on
    LongMemEval dev's knowledge-update questions "speaker" spent a median 153 (up to 271) of a 512-token context's
    tokens on likes and plans no question asked about."""
    extractor: Literal["auto", "heuristic", "llm"] = "auto"
    """What finds those facts: "heuristic", the offline first-person rules; "llm", the configured model (a validated
    JSON prompt, the rules reading any batch it fails on); "auto", the LLM when `llm.model` is set, else the rules."""


class LLMConfig(Section):
    model: str = ""
    """Any litellm model string ("gpt-4o-mini", "anthropic/claude-3-5-haiku-latest", "ollama/llama3",
    "openai/<name>" with api_base for a local server). Empty: no LLM, every decision is the offline heuristic."""
    api_base: str = ""
    """The server to call, for a local OpenAI-compatible server or Ollama; empty means the provider's default."""
    api_key: str = ""
    """The key to send; empty means the provider's usual environment variable (OPENAI_API_KEY, ...)."""
    timeout: timedelta = timedelta(seconds=20)
    """How long one call may take before it counts as failed and the heuristic decides instead."""
    max_retries: int = Field(default=1, ge=0)
    """Retries after a failed or malformed answer, before falling back to the heuristic."""
    concurrency: int = Field(default=4, ge=1)
    """LLM calls in flight at once (one asyncio.Semaphore)."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    batch_size: int = Field(default=1, ge=1, le=64)
    """Turns judged by one call when process_turns hands over several (bounds cost on bulk ingest)."""
    score_emotion: bool = False
    """Ask the LLM for valence and arousal too (in the same call as the save verdict), instead of the lexicon."""


class SaveConfig(Section):
    keep_all: bool = False
    """Keep every turn but a phatic one, without judging it: an archive. Also the baseline the benchmarks compare
    the save decision with."""
    save_confidence_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """A turn is kept when the LLM's confidence (or the heuristic's salience) reaches this."""
    fast_path_arousal: float = Field(default=0.85, ge=0.0, le=1.0)
    """A turn this arousing is kept at once, without asking the LLM, and marked fast-path."""
    fast_path_surprise: float = Field(default=0.8, ge=0.0, le=1.0)
    """A turn this surprising (unlike anything stored, and unexpected in its session) is kept at once too."""
    gap_threshold_reduction: float = Field(default=0.7, ge=0.0, le=1.0)
    """Near an open retrieval gap the threshold is multiplied by this, so what was missed is easier to keep."""
    gap_similarity: float = Field(default=0.5, ge=-1.0, le=1.0)
    """A turn whose vector is at least this close (cosine) to an open gap's query is near it; a kept one fills it."""
    novelty_weight: float = Field(default=0.7, ge=0.0, le=1.0)
    """Surprise = novelty_weight * (1 - max cosine to stored memories) + the rest * session unexpectedness."""
    session_window: int = Field(default=3, ge=1)
    """Session unexpectedness compares a turn with this many turns before it in its session."""
    max_keep_share: float = Field(default=0.7, gt=0.0, le=1.0)
    """Habituation: in a namespace whose recent turns all look worth keeping, the bar rises to the score that at
    most this share of them reached, fast-path ones counted; 1.0 turns it off."""
    keep_share_window: int = Field(default=200, ge=4)
    """... over this many of the namespace's latest judged turns (it starts once 20 are known)."""
