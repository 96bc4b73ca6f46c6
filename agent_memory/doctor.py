"""`agent-memory doctor`: do the stores agree with SQLite and the log? With --repair, make them agree.

Each vector point's payload fields that a search filters on (namespace, status, tier, event time) are compared with
its memory's: a point whose status or event time drifted would be searched as what it is not.

SQLite and the log are the truth. The graph and the vectors are rebuilt from SQLite (vectors from their stored
blobs, so no re-embedding: the text collection from MiniLM's, the image collection from CLIP's). The log is never
rewritten. Logged turns that SQLite lacks are indexed by --repair (recovery.py, over the whole log); a turn row
whose offset is wrong is pointed at its record when the record is elsewhere in the log; a record that is gone or
unreadable is reported and cannot be repaired. The row counts stats() reads (kept by triggers) are compared with
the tables and recounted by --repair.

Image files are checked against the image memories that name them: a file no memory names (a write that crashed
before its transaction, or its temporary copy) is removed by --repair once it is older than ORPHAN_GRACE, so a
turn being written at that moment is never touched; a file an image memory names but the folder lacks is
reported, and no repair can bring it back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent_memory.errors import CorruptRecord
from agent_memory.models import Disagreement, DoctorReport, LogPosition
from agent_memory.storage.base import GraphStore, VectorStore
from agent_memory.storage.graph_projection import SESSION_KEYS
from agent_memory.storage.image_files import remove_files, stored_files
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.outbox import CONTEXT, IMAGE, TEXT, vector_items
from agent_memory.storage.records import SqliteRecords

log = logging.getLogger(__name__)
ORPHAN_GRACE = timedelta(minutes=10)
UNNAMED_FILES = "image files no memory names"
UNINDEXED = "logged turns missing from SQLite"
MISPLACED = "turn offsets that do not point at their record"
COUNTS = "kept row counts that differ from the tables"
PAYLOADS = "whose payload differs from SQLite (namespace, status, tier or event time)"
Place = tuple[int, int, int]  # a log position as plain numbers (segment, offset, length): records.turn_positions
Turn = tuple[str, Place, str]  # a turn's id, where its record is, its checksum


async def check(
    records: SqliteRecords, graph: GraphStore, vectors: VectorStore, journal: JsonlJournal, data_dir: Path
) -> DoctorReport:
    truth = await records.memory_ids()
    found: list[Disagreement] = []
    searched = await records.searched_payloads()
    points = {collection: await vectors.payloads(collection) for collection in (TEXT, IMAGE, CONTEXT)}
    expected = (
        ("graph", "memories", truth, await graph.memory_ids()),
        ("vectors", "memories", await records.embedded_ids(), set(points[TEXT])),
        ("vectors", "image vectors", await records.embedded_ids(image=True), set(points[IMAGE])),
        ("vectors", "context vectors", await records.context_ids(), set(points[CONTEXT])),
    )
    for store, what, wanted, ids in expected:
        if missing := sorted(wanted - ids):
            found.append(Disagreement(store, f"missing {what}", tuple(missing)))
        if extra := sorted(ids - truth):
            found.append(Disagreement(store, f"{what} unknown to SQLite", tuple(extra)))
    for collection, what in ((TEXT, "memories"), (IMAGE, "image vectors"), (CONTEXT, "context vectors")):
        if stale := await asyncio.to_thread(_stale_points, points[collection], searched):  # 100k: 0.14 s
            found.append(Disagreement("vectors", f"{what} {PAYLOADS}", tuple(stale)))
    turns = await records.turn_positions()
    found.extend(await _check_log(turns, journal, await records.shadowed_ids()))
    found.extend(await _check_image_files(records, data_dir))
    kept, counted = await records.counts(), await records.counted_by_scan()
    if drifted := sorted(name for name in kept.keys() | counted.keys() if kept.get(name, 0) != counted.get(name, 0)):
        found.append(Disagreement("records", COUNTS, tuple(drifted)))
    return DoctorReport(
        memories=len(truth),
        turns=len(turns),
        pending_outbox=await records.pending_outbox_count(),
        disagreements=tuple(found),
    )


def _stale_points(points: dict[str, dict[str, Any]], searched: dict[str, dict[str, Any]]) -> list[str]:
    """The points whose payload differs from their memory's, sorted; a point SQLite lacks is reported apart."""
    return sorted(i for i, payload in points.items() if i in searched and _stale(payload, searched[i]))


def _stale(payload: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a point's payload differs from its memory in a field a search filters on (event times within 1 ms)."""
    at = payload.get("event_at")
    if not isinstance(at, int | float) or abs(at - wanted["event_at"]) > 1e-3:
        return True
    return any(payload.get(field) != wanted[field] for field in ("namespace", "status", "tier"))


async def _check_log(turns: list[Turn], journal: JsonlJournal, shadowed: set[str]) -> list[Disagreement]:
    logged: dict[Place, tuple[str, str]] = {}
    try:
        async for position, record in journal.scan():
            logged[(position.segment, position.offset, position.length)] = (record.turn_id, record.checksum)
    except CorruptRecord as exc:
        return [Disagreement("log", f"unreadable record ({exc}; cannot be repaired)", ())]
    return await asyncio.to_thread(_log_disagreements, logged, turns, shadowed)  # 100k turns: 0.16 s of comparing


def _log_disagreements(
    logged: dict[Place, tuple[str, str]], turns: list[Turn], shadowed: set[str]
) -> list[Disagreement]:
    """The turns whose log record is elsewhere or gone, and the logged turns SQLite does not hold."""
    where = dict(logged.values())
    wrong = [(turn_id, checksum) for turn_id, place, checksum in turns if logged.get(place) != (turn_id, checksum)]
    indexed = {turn_id for turn_id, _, _ in turns}
    unindexed = [turn_id for turn_id, _ in logged.values() if turn_id not in indexed and turn_id not in shadowed]
    found = []
    if misplaced := [turn_id for turn_id, checksum in wrong if where.get(turn_id) == checksum]:
        found.append(Disagreement("log", MISPLACED, tuple(misplaced)))
    if gone := [turn_id for turn_id, checksum in wrong if where.get(turn_id) != checksum]:
        found.append(Disagreement("log", "turns whose log record is gone (cannot be repaired)", tuple(gone)))
    if unindexed:
        found.append(Disagreement("log", UNINDEXED, tuple(unindexed)))
    return found


async def _positions_of(journal: JsonlJournal, turn_ids: set[str]) -> dict[str, LogPosition]:
    found: dict[str, LogPosition] = {}
    async for position, record in journal.scan():
        if record.turn_id in turn_ids:
            found[record.turn_id] = position
    return found


async def _check_image_files(records: SqliteRecords, data_dir: Path) -> list[Disagreement]:
    files = await asyncio.to_thread(stored_files, data_dir)
    named = await records.media_paths()
    settled = time.time() - ORPHAN_GRACE.total_seconds()
    found = []
    if missing := sorted(named - set(files)):
        found.append(Disagreement("images", "image files missing (cannot be repaired)", tuple(missing)))
    if unnamed := sorted(name for name, written in files.items() if name not in named and written < settled):
        found.append(Disagreement("images", UNNAMED_FILES, tuple(unnamed)))
    return found


async def rebuild(
    records: SqliteRecords,
    graph: GraphStore,
    vectors: VectorStore,
    report: DoctorReport,
    data_dir: Path,
    *,
    journal: JsonlJournal,
    recover: Callable[[], Awaitable[int]],
) -> tuple[str, ...]:
    """Make the stores agree where they can: log records indexed (`recover` reads the whole log and returns how
    many turns it indexed), offsets corrected, counts recounted, projections rebuilt, unnamed image files removed."""
    kinds = {d.kind: d for d in report.disagreements}
    done = []
    if MISPLACED in kinds:
        moves = await _positions_of(journal, set(kinds[MISPLACED].ids))
        await records.move_turns(moves)
        done.append(f"{len(moves)} turn offsets pointed at their log records")
    if UNINDEXED in kinds:
        done.append(f"{await recover()} logged turns indexed from the log")
    if COUNTS in kinds:
        await records.recount()
        done.append("row counts recounted from the tables")
    stores = {d.store for d in report.disagreements}
    if "graph" in stores:
        await rebuild_graph(records, graph)
        done.append("graph rebuilt from SQLite")
    if "vectors" in stores:
        await rebuild_vectors(records, vectors)
        done.append("vectors rebuilt from the stored embeddings")
    for disagreement in report.disagreements:
        if disagreement.kind == UNNAMED_FILES:
            removed = await asyncio.to_thread(remove_files, data_dir, disagreement.ids)
            done.append(f"{removed} image files no memory names removed")
    return tuple(done)


async def rebuild_missing(
    records: SqliteRecords, graph_store: GraphStore, vector_store: VectorStore, *, graph: bool, vectors: bool
) -> None:
    """On open: rebuild the projections that could not be opened (`graph`, `vectors`), and those that are empty
    while SQLite holds memories they must hold (deleted, or never built) or in an older format, rather than serve an
    empty graph or index until someone runs doctor --repair. An empty one whose memories all wait in the outbox
    only lags: the outbox is replayed next."""
    if not await records.has_projected_memories():
        await records.set_projection_format("session_keys", SESSION_KEYS)
    else:
        if not graph and await records.projection_format("session_keys") != SESSION_KEYS:
            log.warning("the graph's session nodes are in an older format; rebuilding the graph from SQLite")
            graph = True
        if not graph and (await graph_store.counts())["Memory"] == 0:
            log.warning("the graph is empty while SQLite holds memories; rebuilding it from SQLite")
            graph = True
        if not vectors and await vector_store.count(TEXT) == 0 and await vector_store.count(IMAGE) == 0:
            log.warning("the vector index is empty while SQLite holds memories; rebuilding it from SQLite")
            vectors = True
    if graph:
        await rebuild_graph(records, graph_store)
        await records.set_projection_format("session_keys", SESSION_KEYS)
    if vectors:
        await rebuild_vectors(records, vector_store)


async def rebuild_graph(records: SqliteRecords, graph: GraphStore) -> None:
    """Reload the whole graph from SQLite (Kuzu COPY under the hood)."""
    await graph.rebuild(await records.all_graph_memories())


async def rebuild_vectors(records: SqliteRecords, vectors: VectorStore) -> None:
    """Reload the text, image and context collections from the blobs SQLite keeps: no model is needed."""
    memories = await records.get_memories(sorted(await records.memory_ids()))
    await vectors.rebuild(TEXT, vector_items(await records.stored_vectors(memories)))
    await vectors.rebuild(IMAGE, vector_items(await records.stored_vectors(memories, image=True)))
    await vectors.rebuild(CONTEXT, vector_items(await records.stored_context_vectors(memories)))
