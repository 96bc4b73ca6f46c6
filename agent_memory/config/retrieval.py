"""Retrieval settings: the layers, their fusion and weights, decay, and notes' own recall."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field

from agent_memory.config.base import Section


class RetrievalConfig(Section):
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
    """Weight of the ripgrep layer over the raw log (exact numbers, identifiers, quoted text); 0 turns it off (and
    ripgrep is not started). It earns no recall on the dev benchmarks and stays for what they do not ask: a part of
    an identifier ("9917357" of serial KX9917357), which no word of BM25 holds (docs/benchmarks.md, "Ablations by
    folds")."""
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
    entity_fanout: int = Field(default=0, ge=0)
    """The walk's entity step: an entity mentioned by more memories of the namespace than this (a speaker's own
    name) is too common to link through there; 0 links through no entity. Mentions in other namespaces do not count
    (migration 0029). Off (0) since 2026-12-07 (25 before): it paid in no more than one LoCoMo dev fold and cost
    LongMemEval dev (docs/benchmarks.md, "Ablations by folds")."""
    session_weight: float = Field(default=0.3, ge=0.0)
    """How much a session whose turns match as a whole lifts each of its turns."""
    locality_max_chars: int = Field(default=600, ge=0)
    """Session lift and neighbour hops apply to memories up to this long, and a context shows replies up to this
    long (`context_replies`): on long turns they spend the budget on filler (measured on LongMemEval)."""
    context_replies: int = Field(default=10, ge=0, le=100)
    """A context shows each of its first `context_replies` candidates with its reply, the turn logged after the
    memory's own when the save decision did not keep it (a reaction, a short answer), on the line under it, when
    the reply shares a content word with the question and both fit the budget; 0 turns it off (replies.py). The
    log holds the reply; no memory is made of it."""
    speaker_weight: float = Field(default=0.6, ge=0.0)
    """In a transcript (memories that open with their speaker's name, "Melanie: ..."), a question that names one of
    its speakers lifts what that speaker said, turns and digests, to score * (1 + speaker_weight); 0 turns it off.
    A namespace without such labels (a user's own turns, notes) is ranked as before (cognition/speakers.py)."""
    neutral_speakers: bool = True
    """In a transcript, the vector layers embed a question without the names of its speakers: a speaker's name is in
    most memories (their own label, the others' "Thanks, Melanie!"), and embedded it draws them all, whatever they
    are about. Who the question asks about is then weighed by `speaker_weight`; the keyword layer keeps the name."""
    mood_weight: float = Field(default=0.1, ge=0.0)
    """How much a memory whose valence and arousal match the query's emotional context is lifted."""
    decay_weight: float = Field(default=0.0, ge=0.0, le=1.0)
    """How much a faded memory loses: score * (1 - decay_weight * (1 - strength)). Off by default: at 0.05 it did
    not pay in every LoCoMo dev fold (recall +0.007 on one, −0.002/−0.003 on two, MRR lower on all three) and not
    at all on LongMemEval dev, and since every retrieval's accesses refresh strength, it made a ranking depend on
    the questions asked before it (docs/benchmarks.md, "Coding notes")."""
    time_boost: float = Field(default=0.3, ge=0.0)
    """A memory inside the query's time window gets score * (1 + time_boost)."""
    time_penalty: float = Field(default=1.0, ge=0.0, le=1.0)
    """A memory outside the query's time window keeps this share of its score. 1.0 (the default): a window lifts
    what it holds and lowers nothing. Ranking sees only the ratio of (1 + time_boost) to this share, and at 0.9 it
    paid in no fold of LoCoMo dev and not on LongMemEval dev (docs/benchmarks.md, "Ablations by folds"); a window
    read from a request ("a film for tonight") or a plan said before its time ("I fly to Oslo next month") then
    lowered the very memory asked for."""
    time_penalty_after: float = Field(default=1.0, ge=0.0, le=1.0)
    """A memory said after the query's window keeps this share instead of `time_penalty`: what is said after a time
    can tell of it ("in February I had the car serviced", said in March). The same value as `time_penalty` by
    default, but it does not follow it: set both to change how time weighs."""
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
    user_weight: float = Field(default=0.0, ge=0.0)
    """User turns over assistant turns (the other way when the question is about what the assistant said); 0 turns
    it off. Off since 2026-12-07 (0.15 before): it changed no LongMemEval dev or coding-notes figure, and LoCoMo's
    turns have no assistant (docs/benchmarks.md, "Ablations by folds")."""
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


class DecayConfig(Section):
    half_life: timedelta = timedelta(days=7)
    """Forgetting half-life for a memory never used again; use, arousal and surprise stretch it."""
    generation_floor: float = Field(default=0.3, ge=0.0, le=1.0)
    """A consolidated memory (generation >= 1) never decays below this."""


class NotesConfig(Section):
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
    graph_weight: float = Field(default=0.0, ge=0.0)
    """`retrieval.graph_weight` for notes' recall and boot: 0, no graph walk. Notes are written one by one, each
    about its own thing, so the walk's neighbours (the notes that share an entity or follow in a session) are not
    evidence for a question: on the six coding-notes sets, paraphrased recall@5 without it was never lower and
    higher on three (MiniLM: 0.833 -> 0.900 held out, 0.750 -> 0.786 on the fifth set and 0.714 -> 0.821 on the
    sixth, each written blind and scored once), MRR higher on all six; retrieve() keeps its walk (LoCoMo dev -0.016
    recall without it)."""
