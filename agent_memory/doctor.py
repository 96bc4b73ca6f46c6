"""`agent-memory doctor`: do the stores agree with SQLite and the log? With --repair, make them agree.

SQLite and the log are the truth. The graph and the vectors are rebuilt from SQLite (vectors from their stored
blobs, so no re-embedding: the text collection from MiniLM's, the image collection from CLIP's). The log is never rewritten: a log disagreement is reported, and logged turns that
SQLite lacks are indexed the next time the store opens.
"""

from __future__ import annotations

from agent_memory.errors import CorruptRecord
from agent_memory.models import Disagreement, DoctorReport, LogPosition, TurnRow
from agent_memory.storage.base import GraphStore, VectorStore
from agent_memory.storage.journal import JsonlJournal
from agent_memory.storage.outbox import IMAGE, TEXT, vector_items
from agent_memory.storage.records import SqliteRecords


async def check(records: SqliteRecords, graph: GraphStore, vectors: VectorStore, journal: JsonlJournal) -> DoctorReport:
    truth = await records.memory_ids()
    found: list[Disagreement] = []
    expected = (
        ("graph", "memories", truth, await graph.memory_ids()),
        ("vectors", "memories", await records.embedded_ids(), await vectors.ids(TEXT)),
        ("vectors", "image vectors", await records.embedded_ids(image=True), await vectors.ids(IMAGE)),
    )
    for store, what, wanted, ids in expected:
        if missing := sorted(wanted - ids):
            found.append(Disagreement(store, f"missing {what}", tuple(missing)))
        if extra := sorted(ids - truth):
            found.append(Disagreement(store, f"{what} unknown to SQLite", tuple(extra)))
    turns = await records.turns()
    found.extend(await _check_log(turns, journal))
    return DoctorReport(
        memories=len(truth),
        turns=len(turns),
        pending_outbox=await records.pending_outbox_count(),
        disagreements=tuple(found),
    )


async def _check_log(turns: list[TurnRow], journal: JsonlJournal) -> list[Disagreement]:
    logged: dict[LogPosition, tuple[str, str]] = {}
    try:
        async for position, record in journal.scan():
            logged[position] = (record.turn_id, record.checksum)
    except CorruptRecord as exc:
        return [Disagreement("log", f"unreadable record ({exc})", ())]
    wrong = [t.turn_id for t in turns if logged.get(t.position) != (t.turn_id, t.checksum)]
    indexed = {t.turn_id for t in turns}
    unindexed = [turn_id for turn_id, _ in logged.values() if turn_id not in indexed]
    found = []
    if wrong:
        found.append(Disagreement("log", "turn offsets that do not point at their record", tuple(wrong)))
    if unindexed:
        found.append(Disagreement("log", "logged turns missing from SQLite", tuple(unindexed)))
    return found


async def rebuild(
    records: SqliteRecords, graph: GraphStore, vectors: VectorStore, report: DoctorReport
) -> tuple[str, ...]:
    stores = {d.store for d in report.disagreements}
    done = []
    if "graph" in stores:
        await rebuild_graph(records, graph)
        done.append("graph rebuilt from SQLite")
    if "vectors" in stores:
        await rebuild_vectors(records, vectors)
        done.append("vectors rebuilt from the stored embeddings")
    return tuple(done)


async def rebuild_graph(records: SqliteRecords, graph: GraphStore) -> None:
    """Reload the whole graph from SQLite (Kuzu COPY under the hood)."""
    await graph.rebuild(await records.all_graph_memories())


async def rebuild_vectors(records: SqliteRecords, vectors: VectorStore) -> None:
    """Reload the text and the image collections from the blobs SQLite keeps: no model is needed."""
    memories = await records.get_memories(sorted(await records.memory_ids()))
    await vectors.rebuild(TEXT, vector_items(await records.stored_vectors(memories)))
    await vectors.rebuild(IMAGE, vector_items(await records.stored_vectors(memories, image=True)))
