"""The daemon's settings: the sleep jobs it schedules and the HTTP server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator

from agent_memory.config.base import Section


class SleepConfig(Section):
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
    index_min_unindexed: int = Field(default=5000, ge=1)
    """Index upkeep builds a collection's HNSW index (in a child process) once this many points are unindexed;
    below it an exact scan is fast enough. With the namespace and status filters, a search of the 10k real-text
    store took 0.20-0.28 ms indexed and 0.87-1.38 ms with 500-4,000 points unindexed (about 1.5 ms at 5,000), and
    that store, every point moved, answered `retrieve` 0.5-0.9 ms faster at p50 once rebuilt (a 1.2-1.3 s build;
    docs/sleep.md, "Index upkeep")."""
    dream_walk_count: int = Field(default=0, ge=0)
    """Dream exploration (the `dream` job): semi-random walks per namespace, and as many memories probed for cluster
    bridges. Off (0) since 2026-12-07: at 50, inside a full cycle, its links paid LoCoMo dev recall in one fold of
    three on each store (0.001-0.003), nothing on LongMemEval dev, and lowered LoCoMo's MRR in two folds of the
    keep-all store (docs/benchmarks.md, "Sleep jobs by folds"). At 0 the job reads nothing and links nothing; the
    links an earlier run made stay (they are in `memory_links` and the graph, and the walk follows them)."""
    dream_walk_length: int = Field(default=4, ge=2)
    """Hops per dream walk; its two ends become a candidate link."""
    dream_similarity_threshold: float = Field(default=0.7, ge=-1.0, le=1.0)
    """A candidate link is committed as a DREAM_LINK when its two memories are at least this similar (cosine)."""
    keyword_boost: float = Field(default=0.0, ge=0.0)
    """Keyword reweighting (the `reweight` job): a word carried by connected memories weighs up to 1 + keyword_boost
    in the keyword layer (in proportion to the share of its memories that have a connected memory carrying it too).
    Off (0) since 2026-12-07: at 0.5 it cost LoCoMo dev recall in two folds of three on both stores and paid nothing
    on LongMemEval dev (docs/benchmarks.md, "Sleep jobs by folds"). At 0 the job keeps no weight, so every word
    weighs 1."""
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
    digest_idle_min: int = Field(default=100, ge=1)
    """Once this many memories wait for the digest job (an import, a long session), a background task places their
    statements, and those of any that arrive meanwhile, as soon as the store is idle, instead of at the job's next
    hourly run: a multi-hop question asked a minute after an import finds its digests (LoCoMo dev, evidence recall
    at 2,048 tokens +0.025 to +0.028, in every fold; docs/sleep.md). Fewer wait for the job, so a live chat's
    digests are not rewritten at every pause."""
    digest_idle_delay: timedelta = Field(default=timedelta(seconds=10), ge=timedelta(0))
    """How long no write may be committed and no question asked before that background task steps; it steps back
    when someone writes or asks. Zero turns it off (the job alone writes digests)."""
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


class ServeConfig(Section):
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
    switch_interval: timedelta = Field(default=timedelta(microseconds=500), ge=timedelta(0), le=timedelta(seconds=1))
    """Python's thread switch interval while the daemon serves (`sys.setswitchinterval`): how long a thread running
    Python keeps the interpreter once another thread wants it. Python's own is 5 ms. A question's steps (the event
    loop, its model pass, its keyword search, its SQLite reads) run on several threads and hand the interpreter to
    each other; while an import runs Python on the others, each hand-off waited up to 5 ms, and at 0.5 ms a question
    asked during an import answers in about half the time at p95 (docs/benchmarks.md). Zero leaves Python's."""
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
