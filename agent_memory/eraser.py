"""Erase, with proof: the one exception to "the log is never rewritten" (issue #20, section 4).

`erase` removes every byte of the named content from every file of the data directory and proves it:

1. resolve what goes (storage/erase_records.py: the turns, the memories made from them or named, what they were
   made from, the merges and digests made from them), and write the intent row: ids, log places and the erased
   words masked. From here on a crash is finished by `resume` on the next open;
2. replace each log record by a tombstone of its length (storage/journal.py), so every other offset reads back;
3. purge every SQLite row that holds the words, in one transaction (digests rewritten without the erased
   statements, merged memories erased and their other sources made active), with outbox rows for each memory;
4. clear the write path's caches of recent turns (their words and vectors), delete the image files no other memory
   names, and drain the outbox: the projector deletes the points and nodes;
5. drop the retrieval records that quote the words, merge FTS5's segments, checkpoint SQLite's WAL (TRUNCATE),
   Kuzu and Qdrant Edge (secure_delete is on, so freed pages hold zeros). Kuzu keeps a deleted node's strings in
   its pages even then, so when an entity goes with the erase the graph is rebuilt into new files;
6. the proof (erase_scan.py): every file of the data directory scanned for each distinctive 16-byte window of the
   erased words. A store file that still holds one is compacted harder (SQLite VACUUM, the graph rebuilt) and
   scanned again; the report says files, bytes and hits, and hits must be 0.

The intent's masked words are cleared when the erase is done; the erase row keeps ids, counts and the proof.
What is not covered, and said so in docs/corrections.md: a Qdrant server (`vectors.url`) keeps its files
elsewhere, and freed disk blocks below the file system (an SSD's remapped cells) are beyond any file scan.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.cognition.digest import Statement, render
from agent_memory.config import EmbeddingConfig
from agent_memory.erase_scan import Needles, ScanReport, mask, scan_tree, unmask
from agent_memory.errors import InvalidInput, RecordErased
from agent_memory.models import Extraction, new_id
from agent_memory.reembed import embed_as_written
from agent_memory.storage.base import GraphStore, VectorStore
from agent_memory.storage.erase_records import Closure, DigestRewrite, ErasureRecords
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.records import SqliteRecords
from agent_memory.validation import check_identifier

log = logging.getLogger(__name__)
Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
REASON_MAX = 500
QUOTING = (("retrieval_events", "query"), ("retrieval_gaps", "query"), ("compaction_history", "queries"))
"""Free-text columns of records that may quote what was erased (a question asked about it): such rows go."""


@dataclass(frozen=True)
class ErasePlan:
    """What an erase takes (all a dry run shows)."""

    memory_ids: tuple[str, ...]
    turn_ids: tuple[str, ...]
    log_records: int
    digests_rewritten: tuple[str, ...]
    sources_restored: tuple[str, ...]
    images: int
    text_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "memory_ids": list(self.memory_ids),
            "turn_ids": list(self.turn_ids),
            "log_records": self.log_records,
            "digests_rewritten": list(self.digests_rewritten),
            "sources_restored": list(self.sources_restored),
            "images": self.images,
            "text_bytes": self.text_bytes,
        }


@dataclass(frozen=True)
class EraseResult:
    erase_id: str
    plan: ErasePlan
    proof: ScanReport
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "erase_id": self.erase_id,
            **self.plan.as_dict(),
            "proof": self.proof.as_dict(),
            "seconds": round(self.seconds, 3),
        }


class Eraser:
    def __init__(
        self,
        records: SqliteRecords,
        journal: JsonlJournal,
        graph: GraphStore,
        vectors: VectorStore,
        *,
        drain: Callable[[], Awaitable[int]],
        flush_retrievals: Callable[[], Awaitable[None]],
        drop_caches: Callable[[], None],
        embed: Embed,
        extract: Callable[[str], Extraction],
        min_statements: int,
        embedding: EmbeddingConfig,
        data_dir: Path,
        clock: Callable[[], datetime],
    ) -> None:
        self._records, self._store, self._journal = records, ErasureRecords(records), journal
        self._graph, self._vectors, self._drain, self._flush_retrievals = graph, vectors, drain, flush_retrievals
        self._drop_caches = drop_caches
        self._embed, self._extract, self._min = embed, extract, min_statements
        self._embedding = embedding  # how the write path mixes a short turn with the one before it
        self._dir, self._clock = data_dir, clock
        self._lock = asyncio.Lock()  # one erase at a time: each compacts and scans the whole directory

    async def plan(
        self,
        *,
        memory_ids: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        session_id: str | None = None,
        namespace: str = "default",
        whole_namespace: bool = False,
    ) -> ErasePlan:
        """What `erase` with the same arguments would take; nothing is changed."""
        closure, texts = await self._resolve(memory_ids, turn_ids, session_id, namespace, whole_namespace)
        return _plan(closure, texts)

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
        started = asyncio.get_running_loop().time()
        reason = _check_reason(reason)
        async with self._lock:
            closure, texts = await self._resolve(memory_ids, turn_ids, session_id, namespace, whole_namespace)
            needles = await asyncio.to_thread(Needles.of, texts)  # a session's words: seconds of numpy, off the loop
            if needles.hits(reason.lower().encode("utf-8")).size:
                raise InvalidInput("reason quotes the text being erased; it is kept, so say why without quoting it")
            erase_id = new_id()
            selector = {
                "memory_ids": sorted(memory_ids),
                "turn_ids": sorted(turn_ids),
                "session_id": session_id,
                "whole_namespace": whole_namespace,
            }
            packed = mask(json.dumps(texts, ensure_ascii=False).encode("utf-8"))
            await self._store.write_intent(erase_id, namespace, reason, selector, closure, packed, self._clock())
            proof = await self._carry_out(erase_id, closure, texts, purged=False)
        return EraseResult(erase_id, _plan(closure, texts), proof, asyncio.get_running_loop().time() - started)

    async def resume(self) -> list[str]:
        """Finish every erase a crash cut short (from its intent row); returns their ids."""
        finished = []
        async with self._lock:
            for row in await self._store.unfinished():
                texts = json.loads(unmask(bytes(row["texts"])).decode("utf-8")) if row["texts"] is not None else []
                log.warning("erase %s was cut short (%s): finishing it", row["erase_id"], row["state"])
                proof = await self._carry_out(
                    row["erase_id"], Closure.from_row(row), texts, purged=row["state"] == "purged"
                )
                if proof.hits:
                    log.error("erase %s finished with %d hits: %s", row["erase_id"], proof.hits, proof.locations)
                finished.append(str(row["erase_id"]))
        return finished

    async def erased(self, memory_id: str) -> tuple[str, str] | None:
        return await self._store.erased(memory_id)

    # ----- the steps ---------------------------------------------------------------------------------------

    async def _resolve(
        self, memory_ids: Sequence[str], turn_ids: Sequence[str], session_id: str | None, namespace: str, whole: bool
    ) -> tuple[Closure, list[str]]:
        check_identifier("namespace", namespace)
        if session_id is not None:
            check_identifier("session_id", session_id)
        if not (memory_ids or turn_ids or session_id is not None or whole):
            raise InvalidInput("erase needs memory_ids, turn_ids, session_id or whole_namespace: nothing was named")
        closure = await self._store.resolve(
            namespace, memory_ids=memory_ids, turn_ids=turn_ids, session_id=session_id, whole_namespace=whole
        )
        for digest in sorted(closure.digests):  # a digest left with too few statements goes with them
            topic = await self._store.digest_topic(digest)
            kept = await self._store.digest_sources(topic[0], closure.memory_ids) if topic else []
            if len(kept) < self._min:
                closure.digests.discard(digest)
                closure.memory_ids.add(digest)
        texts = await self._store.texts(closure)
        texts += await self._logged_texts(closure)
        return closure, texts

    async def _logged_texts(self, closure: Closure) -> list[str]:
        found = []
        for position, _ in closure.places:
            try:
                found.append((await self._journal.read(position)).content)
            except RecordErased:
                continue  # a resumed erase: this record is a tombstone already
        return found

    async def _carry_out(self, erase_id: str, closure: Closure, texts: list[str], *, purged: bool) -> ScanReport:
        steps = _Steps()
        if not purged:
            await self._flush_retrievals()  # a retrieval waiting to be recorded may name what goes
            rewrites = await self._digest_rewrites(closure)  # before the log goes: it reads the statements' memories
            steps.done("digests")
            followers = await self._followers(closure)
            steps.done("followers")
            await self._journal.erase(closure.places, erase_id)
            steps.done("log")
            await self._store.purge(erase_id, closure, rewrites, self._clock(), followers)
            self._drop_caches()  # every cache of what went: recent turns' words and vectors, the speakers' counts
            steps.done("sqlite")
        await asyncio.to_thread(self._remove_images, closure.images, await self._records.media_paths())
        await self._drain()
        steps.done("projections")
        if closure.rebuild_graph:
            await self._graph.rebuild_fresh(await self._records.all_graph_memories())
            steps.done("graph_rebuild")
        proof = await self._prove(closure, texts, steps)
        proof = dataclasses.replace(proof, steps=steps.seconds)
        await self._store.finish(erase_id, proof.as_dict(), self._clock())
        await self._store.compact_files(vacuum=False)  # the intent's masked words: zeroed, and the WAL cut
        return proof

    async def _followers(self, closure: Closure) -> dict[str, tuple[int, bytes]]:
        """The vectors, made again without the erased turns, of the memories that may have been embedded with one
        (storage/reembed_records.py, `vector_followers`): memory id -> (revision, float32 vector)."""
        sources = await self._records.vector_followers(closure.turn_ids, closure.memory_ids)
        if not sources:
            return {}
        vectors = await embed_as_written(sources, journal=self._journal, embed=self._embed, settings=self._embedding)
        return {s.memory_id: (s.revision, v.astype("<f4").tobytes()) for s, v in zip(sources, vectors, strict=True)}

    async def _digest_rewrites(self, closure: Closure) -> list[DigestRewrite]:
        rewrites = []
        for digest in sorted(closure.digests):
            topic = await self._store.digest_topic(digest)
            if topic is None:
                continue
            topic_id, speaker = topic
            kept = await self._store.digest_sources(topic_id, closure.memory_ids)
            statements = [Statement(str(r[0]), speaker, datetime.fromisoformat(r[1]), str(r[2])) for r in kept]
            content = render(speaker, statements)
            vectors = await self._embed([content, *(s.text for s in statements)])
            said = await asyncio.to_thread(self._extract, f"{speaker}: " + " ".join(s.text for s in statements))
            latest = kept[-1]
            rewrites.append(
                DigestRewrite(
                    digest,
                    topic_id,
                    content,
                    tuple(said.keywords),
                    tuple(said.entities),
                    vectors[0].astype("<f4").tobytes(),
                    vectors[1:].astype("<f8").sum(axis=0).tobytes(),
                    len(statements),
                    (latest[3], latest[4], latest[5], latest[6]),
                )
            )
        return rewrites

    def _remove_images(self, erased: set[str], still_named: set[str]) -> None:
        for relative in sorted(erased - still_named):  # an image file is shared by every memory of the same bytes
            (self._dir / relative).unlink(missing_ok=True)

    async def _prove(self, closure: Closure, texts: list[str], steps: _Steps) -> ScanReport:
        needles = await asyncio.to_thread(Needles.of, texts)
        live = await self._store.live_texts(closure)
        await asyncio.to_thread(needles.drop_shared, live)
        logged = await self._journal.contents(excluding=closure.turn_ids)
        await asyncio.to_thread(needles.drop_shared, logged)
        steps.done("distinctive")
        await self._flush_retrievals()
        for table, column in QUOTING:
            rows = await self._store.quoting(table, column)
            quoting = await asyncio.to_thread(_quoting, needles, rows)
            await self._store.drop_quoting(table, quoting)
        await self._store.compact_files(vacuum=False)
        await self._graph.checkpoint()
        await self._vectors.flush()
        steps.done("compact")
        report = await asyncio.to_thread(scan_tree, self._dir, needles)
        steps.done("scan")
        if any(place.startswith("memory.db") for place in report.locations):
            log.info("erase: SQLite still holds freed pages with erased words: VACUUM")
            await self._store.compact_files(vacuum=True)
            report = await asyncio.to_thread(scan_tree, self._dir, needles)
            steps.done("vacuum_and_scan")
        return report


def _quoting(needles: Needles, rows: list[tuple[str, str]]) -> list[str]:
    """The rows whose text holds a needle (every retrieval ever recorded: a worker thread's work)."""
    return [rowid for rowid, text in rows if needles.hits(text.lower().encode("utf-8")).size]


class _Steps:
    """Seconds each step of an erase took, for its report."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.perf_counter()

    def done(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = round(now - self._mark, 3)
        self._mark = now


def _plan(closure: Closure, texts: list[str]) -> ErasePlan:
    return ErasePlan(
        tuple(sorted(closure.memory_ids)),
        tuple(sorted(closure.turn_ids)),
        len(closure.places),
        tuple(sorted(closure.digests)),
        tuple(sorted(closure.restored)),
        len(closure.images),
        sum(len(text.encode("utf-8")) for text in texts),
    )


def _check_reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("erase needs a reason (why the words must go); it is kept with the erase's record")
    if len(reason) > REASON_MAX:
        raise InvalidInput(f"reason is {len(reason)} characters; at most {REASON_MAX}")
    return reason.strip()
