"""Re-embedding: a store's text vectors made again by another text model, in place, with nothing else changed.

A store keeps the vectors of the model that made it, and one of another size refuses to open (engines.py,
`check_vector_size`). To move a store to another model (a larger one for a project's notes: docs/retrieval.md,
"Another text model"), every vector a text model made is made again by the new one, from what the write path made
it from:
- a memory's own vector: its words; a short turn memory whose words are still its logged turn's (not revised, not
  compressed) also takes the turn logged just before it in its session, as bulk ingest embeds it (write_path.py,
  `_embed`: the sum of both turns' vectors, the one before weighted by `embedding.previous_weight`, re-normalised);
  notes and the chunks of a long turn stand alone, as they were written;
- a retrieval gap's vector: its question, embedded as a question;
- a digest topic's total: the sum of its statements' unit vectors;
- context vectors are dropped, and made again by the next model that computes them (context_vectors.py).

Memories, revisions, facts, forgotten and erased memories and the log are untouched: only vectors change, so
nothing comes back that was forgotten (a replay of the log would bring it back). `stage` makes the new vectors in
batches, each committed to a staging table, so an interrupted run resumes where it stopped; a memory changed since
its vector was staged is embedded again. `swap` then moves every vector in one transaction, after the caller has
set the vector store aside (a projection, rebuilt from SQLite on the next open with the new model's size).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agent_memory.config import EmbeddingConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.scoring import with_previous
from agent_memory.storage.base import Journal
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.reembed_records import VectorSource

log = logging.getLogger(__name__)
BATCH = 256  # memories a staged batch holds: one model call and one transaction
Progress = Callable[[int, int], None]
"""(memories this run has staged so far, memories this run stages in all)"""


@dataclass(frozen=True, slots=True)
class Staged:
    model: str
    memories: int  # memories that hold a text vector
    resumed: int  # their vectors already staged by an earlier run, still current
    staged: int  # staged by this run
    seconds: float

    @property
    def left(self) -> int:
        return self.memories - self.resumed - self.staged


@dataclass(frozen=True, slots=True)
class Swapped:
    model: str
    memories: int
    gaps: int
    topics: int


class Reembedder:
    """Makes a store's text vectors again with `embedder` (loaded); see the module docstring."""

    def __init__(
        self,
        records: SqliteRecords,
        journal: Journal,
        embedder: Embedder,
        settings: EmbeddingConfig,
        *,
        batch: int = BATCH,
    ) -> None:
        self._records, self._journal, self._embedder = records, journal, embedder
        self._settings, self._batch = settings, batch

    async def stage(self, *, limit: int | None = None, progress: Progress | None = None) -> Staged:
        """Stage a new vector for every memory that has no current one staged, at most `limit` of them (None:
        all), a batch per transaction."""
        started = time.perf_counter()
        model = self._embedder.name
        sources = await self._records.vector_sources()
        have = await self._records.staged_vectors(model)
        todo = [s for s in sources if have.get(s.memory_id) != s.revision]
        resumed = len(sources) - len(todo)
        if limit is not None:
            todo = todo[:limit]
        done = 0
        for start in range(0, len(todo), self._batch):
            chunk = todo[start : start + self._batch]
            vectors = await self._vectors(chunk)
            rows = [
                (s.memory_id, s.revision, v.astype(np.float32).tobytes()) for s, v in zip(chunk, vectors, strict=True)
            ]
            await self._records.stage_vectors(rows, model)
            done += len(chunk)
            if progress is not None:
                progress(done, len(todo))
        return Staged(model, len(sources), resumed, done, time.perf_counter() - started)

    async def swap(self) -> Swapped:
        """Every staged vector into its memory, with the gaps' and topics' new vectors, in one transaction; a
        StorageError, and nothing changed, if a memory's current vector is not staged."""
        model = self._embedder.name
        expected = {s.memory_id: s.revision for s in await self._records.vector_sources()}
        questions = await self._records.gap_questions()
        gaps = {
            gap_id: (await self._embedder.embed_query(text)).astype(np.float32).tobytes() for gap_id, text in questions
        }
        topics = {}
        for topic_id, sentences in (await self._records.topic_sentences()).items():
            vectors = await self._embedder.embed(sentences)
            topics[topic_id] = np.asarray(vectors, dtype=np.float64).sum(axis=0).astype("<f8").tobytes()
        swapped = await self._records.swap_vectors(model, gaps=gaps, topics=topics, expected=expected)
        return Swapped(model, swapped, len(gaps), len(topics))

    async def _vectors(self, sources: Sequence[VectorSource]) -> np.ndarray:
        return await embed_as_written(
            sources, journal=self._journal, embed=self._embedder.embed, settings=self._settings
        )


async def embed_as_written(
    sources: Sequence[VectorSource],
    *,
    journal: Journal,
    embed: Callable[[Sequence[str]], Awaitable[np.ndarray]],
    settings: EmbeddingConfig,
) -> np.ndarray:
    """The vectors the write path makes for `sources` with the model behind `embed`: each one's words, and for a
    short turn memory still holding its logged words, the turn before it (`source.before`) as well: the sum of
    both vectors, that one weighted by `embedding.previous_weight`, re-normalised (write_path.py, `_embed`)."""
    befores = [await _before(source, journal, settings.with_previous_max_chars) for source in sources]
    contents = [s.content for s in sources]
    mine = set(contents)  # the turn before is mostly the memory before, in this batch: its vector is made once
    extra = list(dict.fromkeys(b for b in befores if b is not None and b not in mine))
    embedded = await embed(contents + extra)
    own = embedded[: len(sources)]
    prior = dict(zip(contents, own, strict=True)) | dict(zip(extra, embedded[len(sources) :], strict=True))
    vectors = np.array(own, dtype=np.float32, copy=True)
    for row, before in enumerate(befores):
        if before is not None:
            vectors[row] = with_previous(own[row], prior[before], settings.previous_weight)
    return vectors


async def _before(source: VectorSource, journal: Journal, limit: int) -> str | None:
    """The words of the turn a memory is embedded with: the one before its own, when both are short and the memory
    still holds its turn's words; None otherwise."""
    if source.alone or source.turn is None or source.before is None or len(source.content) > limit:
        return None
    if (await journal.read(source.turn)).content != source.content:  # revised or compressed since
        return None
    before = (await journal.read(source.before)).content
    return before if len(before) <= limit else None
