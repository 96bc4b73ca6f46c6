"""The write path after the log: judge each turn, then commit the turns, memories and decisions.

A component the manager builds in `open()`; `MemoryManager.process_turns` validates and logs the turns, then hands
them here. For each turn: its emotion (the caller's, else the lexicon's or the LLM's), its text features, its
vector, how new it is against the store and how unexpected in its session, and whether it is near an open retrieval
gap. The save decider (save_decider.py) decides on them. A turn over max_content_bytes is not judged: its chunks are
built by long_turns.py and committed in the same transaction.

Images shared with a turn are read, decoded and CLIP-embedded before anything is written (image_memory.py), and
become image memories in the turn's transaction, whatever the decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from datetime import datetime

import numpy as np

from agent_memory.cognition.emotion import EmotionScorer
from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.cognition.novelty import (
    RECENT_VECTORS,
    UNKNOWN_NOVELTY,
    RecentVectors,
    TurnVectors,
    earlier_in_batch,
    session_surprise,
)
from agent_memory.cognition.salience import asks_question
from agent_memory.cognition.save_decision import is_phatic
from agent_memory.config import Config
from agent_memory.drafting import Drafter
from agent_memory.embeddings.text import Embedder
from agent_memory.long_turns import LongTurns
from agent_memory.models import LogPosition, LogRecord, Memory, SaveDecision, TurnResult, fresh_memory
from agent_memory.policy.controller import TurnSignals, surprise_of
from agent_memory.predecessors import Predecessors
from agent_memory.save_decider import Draft, SaveDecider, phatic
from agent_memory.scoring import nearest_gap, with_previous
from agent_memory.storage.base import VectorStore
from agent_memory.storage.journal import JsonlJournal, logged_turn
from agent_memory.storage.outbox import TEXT
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.rows import ImageCommit, ImagePlace, StoredImage, TurnCommit, image_commit
from agent_memory.validation import MAX_PREPARED_TEXTS, TURNS_PER_SLICE

log = logging.getLogger(__name__)


class WritePath:
    """Judges and commits turns already in the log. `decider` makes the save decision; `notify` wakes the projector.

    It keeps the caches a write reads before SQLite: each session's last turn, the last texts embedded in each
    session with their vectors, the latest memories' vectors (novelty), and texts embedded ahead of their turn.
    """

    def __init__(
        self,
        config: Config,
        *,
        records: SqliteRecords,
        journal: JsonlJournal,
        vectors: VectorStore,
        embedder: Embedder,
        extractor: SimpleExtractor,
        emotion: EmotionScorer,
        decider: SaveDecider,
        notify: Callable[[], None],
        clock: Callable[[], datetime],
        importer: Embedder | None = None,
    ) -> None:
        """`importer` embeds a bulk import's turns (`embedding.import_precision`: the int8 document pass, whose
        vectors the vector upgrade makes again in float32); `embedder` everything else."""
        self.config, self.records, self.journal, self.vectors = config, records, journal, vectors
        self.embedder, self.extractor, self.emotion, self.decider = embedder, extractor, emotion, decider
        self.importer = importer or embedder
        self.notify, self.clock = notify, clock
        self.long_turns = LongTurns(
            max_bytes=config.max_content_bytes,
            chunk_tokens=config.chunk_tokens,
            embed=embedder.embed,
            embedding_model=lambda: embedder.name,
            entities=extractor.entities,
            emotion=self.emotion.score,
        )  # a turn over max_content_bytes, logged whole and remembered in chunks (long_turns.py)
        self.recent = RecentVectors(RECENT_VECTORS)
        self.last_vector = TurnVectors()
        self.last_imported = TurnVectors(recent=0)  # an import's: summed only into the import's next turns
        self.prepared = PreparedVectors()  # texts embedded ahead of their turn (MemoryManager.prepare_turns)
        self.predecessors = Predecessors(records, journal)  # the turn each short turn is summed with, in any order
        self.drafter = Drafter(extractor=extractor, emotion=emotion)  # what each text says by itself

    def drop_caches(self) -> None:
        """Empty every cache of recent turns (words, vectors, last turn of each session): an erase does, so no
        cache in this process keeps what it took; they fill again from the next turns."""
        self.last_vector.clear()
        self.last_imported.clear()
        self.recent.clear()
        self.predecessors.clear()
        self.prepared.clear()

    def offer_question(self, text: str, vector: np.ndarray) -> None:
        """A question's vector, kept for the turn that often follows with the same text (the runtime and the proxy
        send the user's message as both), when the model embeds a question exactly as it embeds what is stored."""
        if self.embedder.query_is_document:
            self.prepared.put(self.embedder.name, text, vector)

    async def prepare(self, texts: Sequence[str], *, bulk: bool = False) -> None:
        """Embed `texts` (checked) ahead of their turns, by the model their turns will be embedded with (`bulk`: an
        import's, `importer`); a text already prepared, blank, phatic or long is skipped, as its turn would be."""
        using = self.importer if bulk else self.embedder
        wanted = [
            t
            for t in dict.fromkeys(texts)
            if t.strip()
            and not is_phatic(t)
            and not self.long_turns.is_long(t)
            and (using.name, t) not in self.prepared
        ]
        if wanted:
            for text, vector in zip(wanted, await using.embed(wanted), strict=True):
                self.prepared.put(using.name, text, vector)

    def start_embedding(self, records: Sequence[LogRecord], *, bulk: bool = False) -> asyncio.Task[np.ndarray]:
        """The model's pass over the turns that are not phatic, started at once: the log append, the drafts and the
        SQLite reads of `_read_ahead` run while it works (the embedding is most of a turn's time). A text embedded
        ahead by `prepare_turns` is taken from there instead of the model. `bulk`: an import's, by `importer`."""
        texts = [r.content for r in records if not phatic(r) and not self.long_turns.is_long(r.content)]
        return asyncio.ensure_future(self._embed_texts(texts, self.importer if bulk else self.embedder))

    async def _embed_texts(self, texts: Sequence[str], using: Embedder) -> np.ndarray:
        ready = [self.prepared.take(using.name, text) for text in texts]
        known = [vector for vector in ready if vector is not None]
        if known and len(known) == len(ready):
            return np.stack(known)
        fresh = await using.embed([text for text, vector in zip(texts, ready, strict=True) if vector is None])
        if not known:
            return fresh
        rest = iter(fresh)
        return np.stack([vector if vector is not None else next(rest) for vector in ready])

    async def commit(
        self,
        records: Sequence[LogRecord],
        positions: Sequence[LogPosition],
        images: Sequence[Sequence[StoredImage]] = (),
        embedding: asyncio.Task[np.ndarray] | None = None,
        *,
        bulk: bool = False,
    ) -> list[TurnResult]:
        """Judge the turns and commit them in one transaction, with an image memory per image shared with each.
        `embedding` is `start_embedding(records, bulk=bulk)` when the caller started it earlier; `bulk` embeds
        them with `importer`. A long turn is not judged:
        its chunks are built while the others are judged (long_turns.py), committed in the same transaction."""
        now = self.clock()
        groups = images or [()] * len(records)
        embedding = embedding or self.start_embedding(records, bulk=bulk)
        using = self.importer if bulk else self.embedder
        long = [i for i, r in enumerate(records) if self.long_turns.is_long(r.content)]
        short = [i for i in range(len(records)) if i not in set(long)] if long else list(range(len(records)))
        chunked = (
            asyncio.ensure_future(self.long_turns.commits(*_rows(long, records, positions, groups), now))
            if long
            else None
        )
        try:
            previous = await self.predecessors.of(records)  # long turns too: a short turn after one stands alone
            commits, results, drafts = await self._judged(
                *_rows(short, records, positions, groups),
                [previous.words[i] for i in short],
                embedding,
                now,
                using,
                bulk=bulk,
            )
            built = await chunked if chunked is not None else []
        except BaseException:
            embedding.cancel()  # no one waits for it now (done already: nothing happens)
            if chunked is not None:
                chunked.cancel()
            raise
        if built:  # back in the batch's order
            placed = dict(zip(short, zip(commits, results, strict=True), strict=True))
            placed |= dict(zip(long, built, strict=True))
            commits, results = [placed[i][0] for i in sorted(placed)], [placed[i][1] for i in sorted(placed)]
        low_water = self.journal.low_water(excluding=positions)
        await self.records.commit_turns(commits, now=now, recovery_start=low_water, bulk=bulk)
        await self._refresh_followers(previous.late, records, using, now)
        self.recent.extend((d.record.namespace, d.vector) for d in drafts if d.vector is not None and d.kept)
        self.notify()
        return results

    async def _judged(
        self,
        records: Sequence[LogRecord],
        positions: Sequence[LogPosition],
        groups: Sequence[Sequence[StoredImage]],
        previous: Sequence[str | None],
        embedding: asyncio.Task[np.ndarray],
        now: datetime,
        using: Embedder,
        *,
        bulk: bool,
    ) -> tuple[list[TurnCommit], list[TurnResult], list[Draft]]:
        """The commits and results of turns that are not long, judged and built, not yet committed; `previous`:
        the words of the turn logged just before each in its session (predecessors.py)."""
        if not records:
            await embedding  # of no text: nothing to wait for but the task itself
            return [], [], []
        drafts = await self.drafter.drafts(records, bulk=bulk)
        for draft, before in zip(drafts, previous, strict=True):
            draft.previous = before
        gaps = await self._read_ahead(drafts, now)
        open_drafts = [d for d in drafts if not d.phatic]
        for draft, vector in zip(open_drafts, await self._embed(open_drafts, await embedding, using), strict=True):
            draft.vector = vector
        await self._gather_signals(drafts, gaps)
        await asyncio.sleep(0)
        decisions = await self.decider.decide(drafts)
        commits, results = [], []
        for index, (draft, position, decision, shared) in enumerate(
            zip(drafts, positions, decisions, groups, strict=True)
        ):
            if index and index % TURNS_PER_SLICE == 0:
                await asyncio.sleep(0)
            commit = self._turn_commit(draft, position, decision, now, using.name, shared)
            commits.append(commit)
            draft.kept = commit.memory is not None
            memory_id = commit.memory.memory_id if commit.memory else None
            pictures = tuple(image.memory.memory_id for image in commit.images)
            results.append(TurnResult(draft.record.turn_id, position, decision.save, memory_id, decision, pictures))
        return commits, results, drafts

    async def _refresh_followers(
        self, late: Sequence[LogRecord], records: Sequence[LogRecord], using: Embedder, now: datetime
    ) -> None:
        """The vectors of the logged turns just above turns that arrived late, made again (predecessors.py). The
        turns are committed: a failure here is logged, not raised, and leaves those vectors as they were written
        (`agent-memory reembed` makes every vector again)."""
        if not late:
            return
        try:
            await self.predecessors.refresh(
                late, records, embed=using.embed, model=using.name, settings=self.config.embedding, now=now
            )
        except Exception:
            log.exception("the vectors after %d turns that arrived late were not made again", len(late))

    async def _read_ahead(self, drafts: Sequence[Draft], now: datetime) -> dict[str, list[tuple[str, np.ndarray]]]:
        """What the signals need from SQLite, read while the model works: for each turn that is not phatic, the
        memories just before it in its session (unless this batch holds `save.session_window` turns before it),
        and the open gaps of each namespace."""
        window = self.config.save.session_window
        in_batch: dict[tuple[str, str], int] = {}
        gaps: dict[str, list[tuple[str, np.ndarray]]] = {}
        for draft in drafts:
            if draft.phatic:
                continue
            record = draft.record
            key = (record.namespace, record.session_id)
            if in_batch.get(key, 0) < window:
                draft.earlier = await self.records.memories_before(*key, record.turn_number, window)
            in_batch[key] = in_batch.get(key, 0) + 1
            if record.namespace not in gaps:
                gaps[record.namespace] = await self._open_gap_vectors(record.namespace, now)
        return gaps

    async def _embed(self, drafts: Sequence[Draft], own: np.ndarray, using: Embedder) -> np.ndarray:
        """Each turn's vector (phatic turns are not given), from `own`, the model's vector of each turn's text
        alone. A short turn after a short one in its session gets the sum of both turns' embeddings,
        re-normalised, so "It is bright orange" is found by what "it" was. The one before is the turn logged just
        before it (`_before`): a turn of this batch, one of the session's last turns in the cache, or else
        (a phatic turn, the first turn after a restart) its words go through the model again.

        Summing the two vectors replaced embedding the two texts joined: half the text goes through the model,
        and on LoCoMo dev (2,048 tokens) evidence recall went 0.846 -> 0.859 on the judged store and 0.868 ->
        0.867 keeping every turn; see docs/benchmarks.md."""
        cache = self.last_vector if using is self.embedder else self.last_imported  # never one model's in another's
        rows = {((d.record.namespace, d.record.session_id), d.record.content): i for i, d in enumerate(drafts)}
        priors: list[int | np.ndarray | str | None] = []  # a row of `own`, a cached vector, or words to embed
        for draft in drafts:
            session = (draft.record.namespace, draft.record.session_id)
            before = self._before(draft)
            if before is None:
                priors.append(None)
            elif (session, before) in rows:
                priors.append(rows[(session, before)])
            else:
                hit = cache.get(session, before)
                priors.append(hit if hit is not None else before)
        misses = list(dict.fromkeys(p for p in priors if isinstance(p, str)))
        again = dict(zip(misses, await using.embed(misses), strict=True)) if misses else {}
        vectors, weight = own.copy(), self.config.embedding.previous_weight
        for row, prior in enumerate(priors):
            if prior is None:
                continue
            vector = own[prior] if isinstance(prior, int) else again[prior] if isinstance(prior, str) else prior
            vectors[row] = with_previous(own[row], vector, weight)
        cache.remember(
            [((d.record.namespace, d.record.session_id), d.record.content, v) for d, v in zip(drafts, own, strict=True)]
        )
        return vectors

    def _before(self, draft: Draft) -> str | None:
        """The words a short turn is embedded with: those of the turn logged just before it in its session (kept or
        not), when that one is short too; None for a long turn, a note, or a session's first turn. Reembed and the
        vector upgrade apply the same rule (reembed.py, `embed_as_written`), so a vector does not depend on how the
        turns were batched, nor on which of them were kept."""
        record, limit = draft.record, self.config.embedding.with_previous_max_chars
        if len(record.content) > limit or record.note is not None:  # a note stands alone: no neighbour's words
            return None
        before = draft.previous
        return before if before is not None and len(before) <= limit else None

    # ----- signals: novelty, session surprise, gaps --------------------------------------------------

    async def _gather_signals(self, drafts: Sequence[Draft], gaps: dict[str, list[tuple[str, np.ndarray]]]) -> None:
        """Novelty, session surprise and the nearest open gap of each turn; `gaps` are each namespace's open gaps
        (`_read_ahead`). A turn is compared with what is stored, the recent turns' cache and the turns before it
        in this batch (`earlier_in_batch`, on a worker thread: it grows with the square of a batch's size)."""
        settings, window = self.config.save, self.config.save.session_window
        stored = await self._nearest_stored(drafts)
        vectors, namespaces = [d.vector for d in drafts], [d.record.namespace for d in drafts]
        earlier = await asyncio.to_thread(earlier_in_batch, vectors, namespaces) if len(drafts) > 1 else {}
        sessions: dict[tuple[str, str], deque[np.ndarray]] = {}  # each session's last turns of this batch
        for index, draft in enumerate(drafts):
            if index and index % TURNS_PER_SLICE == 0:
                await asyncio.sleep(0)  # a large batch lets other callers in between its slices
            record = draft.record
            novelty = session = 0.0
            gap_id = None
            if draft.vector is not None:
                found = [stored[id(draft)], self.recent.best(record.namespace, draft.vector), earlier.get(index)]
                scores = [score for score in found if score is not None]
                novelty = UNKNOWN_NOVELTY if not scores else 1.0 - max(0.0, max(scores))
                before = sessions.setdefault((record.namespace, record.session_id), deque(maxlen=window))
                session = self._session_surprise(draft, list(before))
                gap_id = nearest_gap(draft.vector, gaps[record.namespace], settings.gap_similarity)
                before.append(draft.vector)
            surprise = surprise_of(novelty, session, novelty_weight=settings.novelty_weight)
            draft.signals = TurnSignals(
                draft.text,
                record.role,
                draft.phatic,
                draft.emotion.valence,
                draft.emotion.arousal,
                draft.emotion_source,
                novelty,
                session,
                surprise,
                gap_id,
                asks_question(draft.previous),
            )

    async def _nearest_stored(self, drafts: Sequence[Draft]) -> dict[int, float | None]:
        """The best cosine between each turn with a vector and what is already stored in its namespace (None in
        an empty one), by `id(draft)`: one batched search per namespace, not one search per turn."""
        by_namespace: dict[str, list[Draft]] = {}
        for draft in drafts:
            if draft.vector is not None:
                by_namespace.setdefault(draft.record.namespace, []).append(draft)
        best: dict[int, float | None] = {}
        for namespace, group in by_namespace.items():
            vectors = [d.vector.tolist() for d in group if d.vector is not None]
            found = await self.vectors.search_many(TEXT, vectors, limit=1, where={"namespace": namespace})
            best.update((id(d), hits[0].score if hits else None) for d, hits in zip(group, found, strict=True))
        return best

    def _session_surprise(self, draft: Draft, before: list[np.ndarray]) -> float:
        """1 - the mean cosine to the turns just before it in its session (`before`: this batch's last ones, then
        the stored ones read ahead); 0.5 when it opens the session."""
        assert draft.vector is not None
        window = self.config.save.session_window
        if len(before) < window:
            stored = [vector for _, vector in draft.earlier or () if vector is not None][: window - len(before)]
            before = [np.frombuffer(b, dtype="<f4") for b in stored] + before
        return session_surprise(draft.vector, before)

    async def _open_gap_vectors(self, namespace: str, now: datetime) -> list[tuple[str, np.ndarray]]:
        found = await self.records.open_gaps(namespace, now=now)
        return [(gap.gap_id, np.frombuffer(vector, dtype="<f4")) for gap, vector in found if vector is not None]

    # ----- the decision ------------------------------------------------------------------------------

    # ----- rows --------------------------------------------------------------------------------------

    def _turn_commit(
        self,
        draft: Draft,
        position: LogPosition,
        decision: SaveDecision,
        now: datetime,
        model: str,
        images: Sequence[StoredImage] = (),
    ) -> TurnCommit:
        record = draft.record
        turn = logged_turn(record, position)
        shared = tuple(self._shared_image(draft, image, now) for image in images)  # kept whatever the decision
        if not decision.save or draft.vector is None:
            return TurnCommit(turn, decision, images=shared)
        memory = self._memory_for(draft, decision, now)
        embedding = draft.vector.astype("<f4").tobytes()
        gap = draft.signals.gap_id if draft.signals else None
        return TurnCommit(
            turn,
            decision,
            memory,
            embedding,
            model,
            fills_gap=gap,
            images=shared,
            derive_keywords=True,
            note=record.note,
        )

    def _shared_image(self, draft: Draft, image: StoredImage, now: datetime) -> ImageCommit:
        record = draft.record
        where = ImagePlace(record.namespace, record.session_id, record.at, record.turn_id)
        return image_commit(image, where, now, emotion=draft.emotion)

    def _memory_for(self, draft: Draft, decision: SaveDecision, now: datetime) -> Memory:
        """The memory a kept turn becomes; its keywords come later, from the projector (pending_keywords)."""
        record = draft.record
        return fresh_memory(
            namespace=record.namespace,
            memory_type=decision.memory_type,
            content=record.content,
            keywords=(),
            entities=draft.entities,
            created_at=now,
            event_at=record.at,
            valence=draft.emotion.valence,
            arousal=draft.emotion.arousal,
            surprise=round(draft.signals.surprise, 4) if draft.signals else 0.0,
            importance=decision.importance,
            confidence=decision.confidence,
            source_turn_id=record.turn_id,
            session_id=record.session_id,
            turn_number=record.turn_number,
            role=record.role,
        )


def _rows(
    rows: Sequence[int],
    records: Sequence[LogRecord],
    positions: Sequence[LogPosition],
    groups: Sequence[Sequence[StoredImage]],
) -> tuple[list[LogRecord], list[LogPosition], list[Sequence[StoredImage]]]:
    """The records, log positions and images of the batch's `rows`."""
    return [records[i] for i in rows], [positions[i] for i in rows], [groups[i] for i in rows]


class PreparedVectors:
    """Texts embedded ahead of their turn (`MemoryManager.prepare_turns`), each taken once by the write path, by
    the model that embedded it: an import's int8 vector is never a live turn's, nor the other way. Kept for the
    latest `size` texts only: a text prepared and never sent costs a little memory (1.5 KB), and is dropped."""

    def __init__(self, size: int = MAX_PREPARED_TEXTS) -> None:
        self._size = size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._vectors

    def put(self, model: str, text: str, vector: np.ndarray) -> None:
        self._vectors[model, text] = vector
        self._vectors.move_to_end((model, text))
        while len(self._vectors) > self._size:
            self._vectors.popitem(last=False)

    def take(self, model: str, text: str) -> np.ndarray | None:
        return self._vectors.pop((model, text), None)

    def clear(self) -> None:
        self._vectors.clear()
