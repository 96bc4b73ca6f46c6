"""MemoryManager: the one object agents talk to, and the only code that touches more than one store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from agent_memory import doctor
from agent_memory.cognition.emotion import EmotionScorer, LexiconEmotion
from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.cognition.tokens import TokenCounter, make_counter
from agent_memory.config import Config
from agent_memory.context_vectors import ContextVectors
from agent_memory.embeddings.text import Embedder
from agent_memory.embeddings.visual import ClipEmbedder
from agent_memory.engines import (
    check_vector_size,
    import_embedder,
    make_embedder,
    open_projection,
    open_vectors,
    warn_other_model,
)
from agent_memory.entity_refresh import EntityRefresh
from agent_memory.eraser import ErasePlan, Eraser, EraseResult
from agent_memory.errors import ClosedError, DuplicateTurn, InvalidInput, MemoryErased, MemoryNotFound, TurnNotFound
from agent_memory.fact_extractors import make_fact_extractor
from agent_memory.facts import Facts
from agent_memory.image_memory import ImageMemory
from agent_memory.llm.client import LiteLLMClient
from agent_memory.models import (
    DoctorReport,
    EmotionalContext,
    Fact,
    FactDecision,
    JobRun,
    LogPosition,
    LogRecord,
    Memory,
    RetrievalResult,
    Revision,
    TurnId,
    TurnInput,
    TurnResult,
    new_id,
    utc_now,
)
from agent_memory.notes import Notes
from agent_memory.policy.controller import HeuristicPolicy, Policy
from agent_memory.project import exclude_data_dir
from agent_memory.read_path import ReadPath
from agent_memory.recall import Recall
from agent_memory.recovery import LogRecovery
from agent_memory.replies import Replies
from agent_memory.retrieval_log import RetrievalLog
from agent_memory.revisions import Revisions
from agent_memory.save_decider import SaveDecider
from agent_memory.sleep.digests import Digests
from agent_memory.speakers import TranscriptSpeakers
from agent_memory.storage.base import GraphStore, VectorStore
from agent_memory.storage.graph import KuzuGraph
from agent_memory.storage.grep import RipgrepJournalSearch
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.lock import OwnerLock
from agent_memory.storage.outbox import IMAGE, TEXT, Projector
from agent_memory.storage.private import make_private_dirs, make_private_tree
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import (
    check_batch,
    check_content,
    check_emotion,
    check_turn,
    turn_from_mapping,
)
from agent_memory.vector_upgrade import VectorUpgrade
from agent_memory.write_path import WritePath

log = logging.getLogger(__name__)
TurnKey = tuple[str, str, int]


class MemoryManager(ReadPath):
    """`async with MemoryManager.open(config) as m:`, or `m = MemoryManager(config); await m.initialize()`."""

    def __init__(
        self,
        config: Config,
        *,
        embedder: Embedder | None = None,
        extractor: SimpleExtractor | None = None,
        emotion: EmotionScorer | None = None,
        policy: Policy | None = None,
        llm: LiteLLMClient | None = None,
        image_embedder: ClipEmbedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.config = config
        self.clock = clock
        self._owns_embedder = embedder is None
        self.embedder: Embedder = embedder or make_embedder(config)
        self.extractor = extractor or SimpleExtractor(
            max_keywords=config.extraction.max_keywords, max_entities=config.extraction.max_entities
        )
        self.emotion: EmotionScorer = emotion or LexiconEmotion()
        self.policy = policy or HeuristicPolicy(config.save, config.retrieval)
        self._owns_llm = llm is None
        self.llm: LiteLLMClient | None = llm or (LiteLLMClient(config.llm) if config.llm.model else None)
        self._owns_image_embedder = image_embedder is None
        self.image_embedder = image_embedder or (
            ClipEmbedder(config.image, threads=config.embedding.threads) if config.image.enabled else None
        )
        self.token_counter: TokenCounter = make_counter(config.retrieval.token_counter)
        self._stack: AsyncExitStack | None = None
        self._inflight: set[TurnKey] = set()
        self.recovered_turns = 0

    # ----- lifecycle ---------------------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(cls, config: Config, **parts: Any) -> AsyncIterator[Self]:
        manager = cls(config, **parts)
        await manager.initialize()
        try:
            yield manager
        finally:
            await manager.close()

    async def initialize(self) -> None:
        """Take the owner lock, open the four stores, recover unindexed turns, replay the outbox."""
        if self._stack is not None:
            return
        data_dir = self.config.data_dir
        folders = ("logs", "graph") if self.config.vectors.url else ("logs", "graph", "vectors")
        await asyncio.to_thread(exclude_data_dir, data_dir)  # a project store is git-ignored before it exists
        await asyncio.to_thread(make_private_dirs, data_dir, *folders)  # 0700, before any engine opens
        async with AsyncExitStack() as stack:
            if self._owns_embedder:
                stack.push_async_callback(self.embedder.aclose)  # closed last, an open that fails included
            loading = asyncio.ensure_future(self.embedder.load())  # on its own thread while the engines open
            stack.push_async_callback(_finished, loading)  # an open that fails closes nothing the load still uses
            rebuild_graph, rebuild_vectors = await self._open_engines(stack)
            self._build_components()  # constructors only: nothing here touches an engine
            counting = asyncio.ensure_future(self.speakers.warm())  # a transcript's labels, counted as the model loads
            stack.push_async_callback(_finished, counting)
            stack.push_async_callback(self.write_path.drafter.aclose)
            self.images.start()  # deciding may import open-clip and torch: text memory does not wait for it
            stack.push_async_callback(self.images.stop)
            await loading  # 0.5-0.7 s of loading the text model, no longer after the 0.6-0.8 s of opening
            await warn_other_model(self.records, self.embedder.name, upgrading=self.vector_upgrade.stale)
            await doctor.rebuild_missing(
                self.records, self.graph, self.vectors, graph=rebuild_graph, vectors=rebuild_vectors
            )
            await self.retrieval_log.open()
            stack.push_async_callback(self.retrieval_log.aclose)
            self.recovered_turns = (await self.recovery.recover()).indexed
            await self.projector.drain()
            await self.eraser.resume()  # an erase a crash cut short is finished before anything reads
            await self.projector.recount()
            self.projector.start()
            stack.push_async_callback(self.projector.stop)
            self.context_vectors.start()
            stack.push_async_callback(self.context_vectors.stop)
            self.vector_upgrade.start()
            stack.push_async_callback(self.vector_upgrade.stop)
            await self.entity_refresh.start()
            stack.push_async_callback(self.entity_refresh.stop)
            self.digests.start()
            stack.push_async_callback(self.digests.stop)
            self._stack = stack.pop_all()

    async def _open_engines(self, stack: AsyncExitStack) -> tuple[bool, bool]:
        """Take the owner lock and open the log, SQLite, the graph and the vectors, each closed by `stack`; returns
        whether the graph and the vectors must be rebuilt (opened empty, or set aside as unreadable)."""
        data_dir = self.config.data_dir
        KuzuGraph.prepare()  # the graph's fork server starts while the log and SQLite open
        lock = OwnerLock(data_dir / "owner.lock")
        await asyncio.to_thread(lock.acquire)
        stack.callback(lock.release)
        stack.push_async_callback(asyncio.to_thread, make_private_tree, data_dir)  # once every engine closed
        self.journal = await JsonlJournal.open(
            data_dir / "logs",
            fsync=self.config.journal.fsync == "always",
            segment_max_bytes=self.config.journal.segment_max_bytes,
        )
        stack.push_async_callback(self.journal.aclose)
        self.records = await SqliteRecords.open(data_dir / "memory.db")
        stack.push_async_callback(self.records.aclose)
        await check_vector_size(self.records, self.config)
        if self.config.retrieval.keyword_projection:
            self.records.use_keyword_index()  # built from the first keyword search on
        else:
            await self.records.drop_keyword_changes()
        graph, rebuild_graph = await open_projection(data_dir / "graph", lambda: KuzuGraph.open(data_dir / "graph"))
        self.graph: GraphStore = graph
        stack.push_async_callback(self.graph.aclose)
        vectors, rebuild_vectors = await open_projection(data_dir / "vectors", lambda: open_vectors(self.config))
        self.vectors: VectorStore = vectors
        stack.push_async_callback(self.vectors.aclose)
        await asyncio.to_thread(make_private_tree, data_dir)  # Kuzu and Qdrant Edge create files by the umask
        if self.image_embedder is not None and self._owns_image_embedder:
            stack.push_async_callback(self.image_embedder.aclose)
        if self.llm is not None and self._owns_llm:
            stack.push_async_callback(self.llm.aclose)
        return rebuild_graph, rebuild_vectors

    def _build_components(self) -> None:
        """Build each component the manager delegates to, given what it touches (the engines are open)."""
        config, records, clock = self.config, self.records, self.clock
        self.projector = Projector(
            records,
            self.graph,
            self.vectors,
            clock=clock,
            batch=config.projector_batch,
            retry_delay=config.outbox_retry_delay,
            delay=config.projector_delay,
            read_delay=config.projector_read_delay,
            keywords=self.extractor.keywords,
        )
        notify = self.projector.notify
        self.images = ImageMemory(
            config,
            self.image_embedder,
            embedder=self.embedder,
            extractor=self.extractor,
            records=records,
            notify=notify,
            clock=clock,
        )
        self.save_decider = SaveDecider(config, self.policy, self.llm, records)
        self.write_path = WritePath(
            config,
            records=records,
            journal=self.journal,
            vectors=self.vectors,
            embedder=self.embedder,
            extractor=self.extractor,
            emotion=self.emotion,
            decider=self.save_decider,
            notify=notify,
            clock=clock,
            importer=import_embedder(self.embedder, config),
        )
        self.context_vectors = ContextVectors(
            records, self.journal, self.embedder, config.embedding, clock=clock, notify=notify
        )
        self.retrieval_log = RetrievalLog(records, self.embedder.embed_query, delay=config.retrieval.record_delay)

        def activity() -> int:  # grows with every write and every question: the idle work below yields to both
            return records.commits + self.retrieval_log.added

        self.vector_upgrade = VectorUpgrade(
            records,
            self.journal,
            self.embedder,
            config.embedding,
            clock=clock,
            notify=notify,
            activity=activity,
        )
        self.entity_refresh = EntityRefresh(
            records,
            self.extractor,
            config.extraction,
            clock=clock,
            notify=notify,
            activity=activity,
        )
        self.digests = Digests(
            records,
            self.embedder,
            self.extractor,
            config.sleep,
            clock=clock,
            notify=notify,
            activity=activity,
        )
        self.speakers = speakers = TranscriptSpeakers(records)
        self.replies = Replies(records, self.journal, speakers)
        self._reader = Recall(
            records=records,
            vectors=self.vectors,
            embedder=self.embedder,
            grep=RipgrepJournalSearch(config.data_dir / "logs"),
            config=config,
            images=self.images.on,
            recent=self.write_path.last_vector.recent,
            embedded=self.write_path.offer_question,  # a question is often the next user turn
            speakers=speakers,
        )
        self.recovery = LogRecovery(self.journal, records, index=self._index_logged, clock=clock)
        self.revisions = Revisions(
            records,
            embed=self.embedder.embed,
            embedding_model=lambda: self.embedder.name,
            entities=self.extractor.entities,
            max_bytes=config.max_content_bytes,
            clock=clock,
            notify=notify,
        )
        found_by = make_fact_extractor(config.facts, self.llm)  # the rules, or the LLM over them
        self._facts = Facts(records, multi_valued=config.facts.multi_valued, clock=clock, extractor=found_by)

        def drop_caches() -> None:  # an erase leaves no cache of what it took: recent turns, the speakers' counts
            self.write_path.drop_caches()
            speakers.drop()

        self.eraser = Eraser(
            records,
            self.journal,
            self.graph,
            self.vectors,
            drain=self.projector.drain,
            flush_retrievals=self.retrieval_log.flush,
            drop_caches=drop_caches,
            embed=self.embedder.embed,
            extract=self.extractor.extract,
            min_statements=config.sleep.digest_min_statements,
            embedding=config.embedding,
            data_dir=config.data_dir,
            clock=clock,
        )
        self.notes = Notes(
            records,
            self.process_turns,
            self._ranked,
            lambda: make_counter("cl100k_base"),
            clock,
            config.notes,
            config.data_dir,
        )

    async def _ranked(self, query: str, namespace: str, k: int) -> list[RetrievalResult]:
        """Notes' retrieval (recall and boot): retrieve() with notes' keyword evidence and graph weight."""
        notes = self.config.notes
        update = {"keyword_evidence": notes.keyword_evidence, "graph_weight": notes.graph_weight}
        settings = self.config.retrieval.model_copy(update=update)
        return await self._retrieve(query, None, None, k, namespace, None, None, retrieval=settings)

    async def close(self) -> None:
        """Finish projecting, then close every engine in reverse order. Idempotent."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            await self.settle()
        finally:
            await stack.aclose()

    def _check_open(self) -> None:
        if self._stack is None:
            raise ClosedError()

    # ----- the write path ----------------------------------------------------------------------------

    async def process_turn(
        self,
        session_id: str,
        turn_number: int,
        content: str | bytes,
        *,
        role: str = "user",
        emotional_context: EmotionalContext | Mapping[str, float] | None = None,
        at: datetime | None = None,
        namespace: str = "default",
        images: Sequence[bytes | Path] | None = None,
    ) -> TurnResult:
        """Log the turn (durably), decide whether it becomes a memory, and commit it with its projections.

        Each of `images` (encoded bytes or a file) becomes an image memory linked to the turn, kept whatever the
        text's decision; they are checked and embedded before anything is written."""
        turn = TurnInput(session_id, turn_number, content, role, emotional_context, at, namespace, images or ())
        return (await self.process_turns([turn]))[0]

    async def process_turns(
        self, turns: Sequence[TurnInput | Mapping[str, Any]], *, bulk: bool = False
    ) -> list[TurnResult]:
        """Bulk ingest: one log fsync, one embedding batch and one SQLite transaction for the lot.

        Every turn is validated first; one bad turn rejects the batch and nothing is written. A turn over
        `max_content_bytes`, up to the hard cap `max_turn_bytes`, is logged whole and remembered in chunks, each a
        memory of its own (long_turns.py); its result's `chunk_memory_ids` names them. `bulk` marks an import (a
        history brought in, not a conversation under way): what it keeps is embedded by
        `embedding.import_precision` (int8: about 1.5x the turns a second), and the vector upgrade makes those
        vectors again in float32 while the store is idle (vector_upgrade.py). A search does not wait for an import's
        batch: the call applies its own batch's vectors and keywords for reads before it returns.
        """
        self._check_open()
        check_batch(len(turns))
        now = self.clock()
        checked = [self._validate(t, i, now) for i, t in enumerate(turns)]
        keys = [(t.namespace, t.session_id, t.turn_number) for t, _ in checked]
        await self._claim(keys)
        try:
            images = await self.images.prepare([t.images for t, _ in checked])
            records = [
                LogRecord(
                    TurnId(new_id()),
                    t.namespace,
                    t.session_id,
                    t.turn_number,
                    role,
                    str(t.content),
                    t.at or now,
                    check_emotion(t.emotional_context),
                    images=tuple(image.media_path for image in shared),
                    note=t.note,
                )
                for (t, role), shared in zip(checked, images, strict=True)
            ]
            embedding = self.write_path.start_embedding(records, bulk=bulk)
            try:
                await self._recorded(gaps_only=True)  # a waiting retrieval record may open a gap the decision reads
                await self.images.store(images)
                positions = await self._append(records)
            except BaseException:
                embedding.cancel()
                raise
            try:
                results = await self.write_path.commit(records, positions, images, embedding, bulk=bulk)
            except BaseException:
                self.recovery.orphaned(records, positions)  # logged, not indexed: sent again, they are adopted
                raise
            self.journal.settle(positions)
            if self.config.facts.extract_on_write:
                await self._observe_facts(records)
            if bulk:
                await self._settle_import()
            return results
        finally:
            self._inflight.difference_update(keys)

    async def _settle_import(self) -> None:
        """An import's batch, applied for reads before its call returns: a search does not wait for an import's
        batches (Projector.catch_up_for_read), so the import applies its own. The batch is committed whatever
        happens here: a projection that fails is retried by the projector's task, as after any write."""
        try:
            await self.projector.settle_for_reads()
        except Exception:
            log.warning("an import's batch is committed; its projection is retried in the background", exc_info=True)

    async def _append(self, records: list[LogRecord]) -> list[LogPosition]:
        """Log the records. Cancelled meanwhile, the write goes on (on the journal's thread): wait for it to end,
        note the records as orphans (logged, not indexed: sent again, they are adopted), then be cancelled."""
        append = asyncio.ensure_future(self.journal.append_many(records))
        try:
            return await asyncio.shield(append)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self.recovery.orphaned(records, await append)
            raise

    def _validate(self, turn: TurnInput | Mapping[str, Any], index: int, now: datetime) -> tuple[TurnInput, Any]:
        if not isinstance(turn, TurnInput):
            turn = turn_from_mapping(turn)
        try:
            checked, _, role = check_turn(turn, max_bytes=self.config.max_turn_bytes, now=now)  # long: chunked
        except InvalidInput as exc:
            if index:
                exc.args = (f"turn #{index}: {exc.args[0]}",)
            raise
        return checked, role

    async def _claim(self, keys: list[TurnKey]) -> None:
        """Reserve the turn keys before the first await, so two concurrent calls cannot both pass the check."""
        seen: set[TurnKey] = set()
        for key in keys:
            if key in seen or key in self._inflight:
                raise DuplicateTurn(*key)
            seen.add(key)
        self._inflight.update(keys)
        try:
            await self.recovery.adopt(keys)  # a key whose commit failed earlier is indexed now, and so taken
            stored = await self.records.stored_turns(keys)
            if taken := next((key for key in keys if key in stored), None):
                raise DuplicateTurn(*taken)
        except BaseException:
            self._inflight.difference_update(keys)
            raise

    async def _recover_all(self) -> int:
        return (await self.recovery.recover(whole_log=True)).indexed

    async def _observe_facts(self, records: Sequence[LogRecord]) -> None:
        """The facts these committed turns state (facts.py); a failure costs the facts, never the turns."""
        try:
            await self._facts.observe(records)
        except Exception:
            log.warning("facts could not be extracted from %d turns; the turns are stored", len(records), exc_info=True)

    async def _index_logged(self, records: Sequence[LogRecord], positions: Sequence[LogPosition]) -> None:
        """Judge and commit turns that are already in the log (recovery), with the images they name."""
        await self.write_path.commit(records, positions, await self.images.recovered(records))

    async def remember_image(
        self,
        image: bytes | Path,
        caption: str | None = None,
        *,
        session_id: str | None = None,
        namespace: str = "default",
        at: datetime | None = None,
    ) -> Memory:
        """Remember an image (encoded bytes or a file) as a memory of its own: its CLIP vector for image and
        text-tower search, its caption (if any) for the text layers. The store keeps a copy of the bytes.
        ImageMemoryUnavailable (saying why) when image memory is off; docs/images.md."""
        self._check_open()
        return await self.images.remember(image, caption, session_id=session_id, namespace=namespace, at=at)

    async def image_memory_off(self) -> str | None:
        """Why image memory is off (the one message logged at start), or None when it is on."""
        self._check_open()
        return await self.images.off()

    async def get(self, memory_id: str, *, original: bool = False) -> Memory:
        """The memory as it is now, its accesses and keywords included, with `history_length` (earlier revisions
        kept) and `lineage` (what it was superseded or merged into, up to the current one). It does not wait for the projector's
        queue (that took seconds under concurrent writers): keywords still to be derived are derived for it here,
        as the projector will. With `original`, `Memory.original` holds its turn's words read back from the log
        (a compressed memory holds only its salient sentences); None for a digest or a merge."""
        self._check_open()
        await self._recorded()
        try:
            memory = await self.records.get_memory(memory_id)
        except MemoryNotFound:
            if erased := await self.eraser.erased(memory_id):
                raise MemoryErased(memory_id, *erased) from None
            raise
        if await self.records.keywords_pending(memory_id):
            memory = replace(memory, keywords=await self.projector.keywords_of(memory_id, memory.content))
        history, lineage = await self.revisions.history(memory_id), await self.revisions.lineage(memory_id)
        memory = replace(memory, history_length=len(history), lineage=tuple(lineage))
        if original and memory.source_turn_id is not None and memory.generation == 0:
            memory = replace(memory, original=(await self.read_turn(memory.source_turn_id)).content)
        return memory

    async def update(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory:
        """Correct a memory's words in place (re-embedded, re-indexed, re-projected); returns it at its new revision.
        RevisionConflict, with both revisions, when it is not at `expected_revision` (revisions.py)."""
        self._check_open()
        return await self.revisions.update(
            memory_id, content, expected_revision=expected_revision, agent=agent, reason=reason
        )

    async def supersede(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory:
        """Replace a memory by a new one saying `content` (returned); the old one stays, superseded, out of recall."""
        self._check_open()
        return await self.revisions.supersede(
            memory_id, content, expected_revision=expected_revision, agent=agent, reason=reason
        )

    async def forget(
        self, memory_id: str, *, expected_revision: int, agent: str | None = None, reason: str | None = None
    ) -> Memory:
        """Take a memory out of every recall path (keyword, vectors, grep, graph walk, time layer); the log keeps
        every word. Reversible with `restore`. RevisionConflict when it is not at `expected_revision`."""
        self._check_open()
        return await self.revisions.forget(memory_id, expected_revision=expected_revision, agent=agent, reason=reason)

    async def restore(self, memory_id: str, *, agent: str | None = None, reason: str | None = None) -> Memory:
        """Bring a forgotten memory back into recall."""
        self._check_open()
        return await self.revisions.restore(memory_id, agent=agent, reason=reason)

    async def erase(
        self,
        *,
        reason: str,
        memory_ids: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        session_id: str | None = None,
        namespace: str = "default",
        whole_namespace: bool = False,
    ) -> EraseResult:
        """Remove every byte of the named content from every file of the data directory, and prove it: the result's
        `proof` is a scan of every file for each distinctive 16-byte piece of the erased words (hits must be 0).
        Takes the turns named and their memories, the memories named and what they were made from, and the merges
        and digests made from them (eraser.py). Crash-safe: an erase cut short is finished on the next open."""
        self._check_open()
        return await self.eraser.erase(
            reason=reason, memory_ids=memory_ids, turn_ids=turn_ids, session_id=session_id, namespace=namespace,
            whole_namespace=whole_namespace,
        )  # fmt: skip

    async def erase_plan(
        self,
        *,
        memory_ids: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        session_id: str | None = None,
        namespace: str = "default",
        whole_namespace: bool = False,
    ) -> ErasePlan:
        """What `erase` with the same selection would take (a dry run): nothing is changed."""
        self._check_open()
        return await self.eraser.plan(
            memory_ids=memory_ids, turn_ids=turn_ids, session_id=session_id, namespace=namespace,
            whole_namespace=whole_namespace,
        )  # fmt: skip

    async def history(self, memory_id: str) -> list[Revision]:
        """Every earlier revision of a memory, oldest first: content, status, when, by which agent, why."""
        self._check_open()
        return await self.revisions.history(memory_id)

    async def remember_fact(
        self,
        subject: str,
        attribute: str,
        value: str,
        *,
        valid_at: datetime | None = None,
        source: str | None = None,
        confidence: float = 1.0,
        namespace: str = "default",
    ) -> Fact:
        """State that `subject`'s `attribute` is `value` from `valid_at` (default now); a new value closes the old
        one on a single-valued attribute, and the same value again is one more observation (facts.py)."""
        self._check_open()
        return await self._facts.remember(
            subject, attribute, value, valid_at=valid_at, source=source, confidence=confidence, namespace=namespace
        )

    async def facts(
        self,
        subject: str | None = None,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str = "default",
    ) -> list[Fact]:
        """What was true at `as_of`, as the store knew it at `known_at` (both default to now)."""
        self._check_open()
        return await self._facts.facts(subject, as_of=as_of, known_at=known_at, namespace=namespace)

    async def fact_history(self, subject: str, attribute: str, *, namespace: str = "default") -> list[Fact]:
        """Every value of (subject, attribute) with the interval it was true in."""
        self._check_open()
        return await self._facts.history(subject, attribute, namespace=namespace)

    async def prepare_turns(self, texts: Sequence[str], *, bulk: bool = False) -> None:
        """Embed texts that are about to be sent as turns, so their `process_turns` finds the vectors ready: the
        runtime and the proxy call it with the user's message while the model answers, when the model thread is
        idle, and `agent-memory ingest` with its next batch (`bulk`, by the import's model) while this one commits.
        A text prepared and never sent is dropped after MAX_PREPARED_TEXTS newer ones. Changes nothing in the store; a
        text that no turn could hold (not UTF-8, over max_turn_bytes) is refused as a turn would be."""
        self._check_open()
        checked = [check_content(t, max_bytes=self.config.max_turn_bytes, limit_name="max_turn_bytes") for t in texts]
        await self.write_path.prepare(checked, bulk=bulk)

    async def observe_facts(self, turn_ids: Sequence[str]) -> list[FactDecision]:
        """The policy step (STORE / MERGE / SUPERSEDE / REJECT, facts.py) on the facts these stored turns state, for
        a caller that runs it after the turns are stored (the runtime, once the answer is in). Unlike the write
        path's step (`facts.extract_on_write`) a failure is raised, not logged. A turn already through the step is
        not observed twice (that would count its facts again): its logged decisions are returned."""
        self._check_open()
        decided: list[FactDecision] = []
        fresh: list[LogRecord] = []
        for turn_id in turn_ids:
            logged = await self.records.fact_decisions(turn_id)
            if logged:
                decided += logged
            else:
                fresh.append(await self.read_turn(turn_id))
        return decided + (await self._facts.observe(fresh) if fresh else [])

    async def read_turn(self, turn_id: str) -> LogRecord:
        """The turn exactly as it was logged, read back through its byte offset."""
        self._check_open()
        row = await self.records.get_turn(turn_id)
        if row is None:
            raise TurnNotFound(turn_id)
        return await self.journal.read(row.position)

    async def flush(self) -> int:
        """Apply every pending projection (and write the last retrieval's record) now; returns how many outbox
        rows were applied."""
        self._check_open()
        return await self.settle()

    async def run_compaction(self, *, now: datetime | None = None) -> JobRun:
        """One consolidation cycle (docs/sleep.md): overlapping memories merged into generation+1 memories, each
        merge kept only if generative replay finds retrieval no worse than `sleep.merge_degradation_tolerance`.
        The run's report row is returned; its counts say how many merges were accepted and rejected."""
        self._check_open()
        from agent_memory.sleep.jobs import run_job  # the jobs build on the manager

        return await run_job(self, "compact", now=now)

    async def stats(self) -> dict[str, Any]:
        """Counts from every store, read without waiting for the writers: SQLite's from the counts its triggers
        keep (retrievals' waiting records written first), the graph's and the vectors' as of the projector's last
        batch; `pending_outbox` rows are not in those yet (after `flush()`, none are)."""
        self._check_open()
        await self._recorded()
        return {
            "data_dir": str(self.config.data_dir),
            "pid": os.getpid(),
            "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),  # the daemon's: serve.switch_interval
            "records": await self.records.counts(),
            "graph": dict(self.projector.counts["graph"]),
            "vectors": {TEXT: 0, IMAGE: 0} | self.projector.counts["vectors"],
            "image_memory": await self.image_memory_off() or "on",
            "pending_outbox": await self.records.pending_outbox_count(),
            "vectors_to_upgrade": await self.vector_upgrade.left(),  # an int8 import's, not yet float32's
            "vectors_moved": await self.records.index_moves(),  # out of the HNSW index since it was built
            "entities_to_refresh": await self.entity_refresh.left(),  # memories the extraction rules changed under
            "memories_to_digest": await self.digests.left(),  # their statements not yet placed in digest topics
            "log_bytes": self.journal.end_bytes(),
            "schema_version": await self.records.schema_version(),
            "keyword_index": await projected.status()
            if (projected := self.records.keyword_index)
            else {"state": "off"},
        }

    async def doctor(self, *, repair: bool = False) -> DoctorReport:
        """Compare the stores (ids, log offsets, image files); with `repair`, rebuild the projections from SQLite
        and remove image files no memory names."""
        self._check_open()
        await self.settle()
        data_dir = self.config.data_dir
        report = await doctor.check(self.records, self.graph, self.vectors, self.journal, data_dir)
        if repair and not report.consistent:
            repaired = await doctor.rebuild(
                self.records,
                self.graph,
                self.vectors,
                report,
                data_dir,
                journal=self.journal,
                recover=self._recover_all,
            )
            await self.settle()  # the turns recovery indexed reach the projections through the outbox
            report = await doctor.check(self.records, self.graph, self.vectors, self.journal, data_dir)
            await self.projector.recount()
            report = DoctorReport(report.memories, report.turns, report.pending_outbox, report.disagreements, repaired)
        return report


async def _finished(task: asyncio.Future[None]) -> None:
    """Wait for `task` to end, whatever its outcome: an open that failed has its own error to report."""
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved, so it is not logged as never retrieved
