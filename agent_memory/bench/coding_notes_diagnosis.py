"""Why fusion buries the vector layer's hit on the coding notes (issue #22): which signals put memories above it.

For each question whose note the semantic layer ranks in its own top 5 while the fused top 5 misses it, every
memory ranked above the note is counted under each signal without which it would have fallen below the note
(taken away one at a time: its keyword rank's share of the fused score, its graph step, its session lift, its
time factor), and described by two more: a keyword hit holding under half of the query's content words, and a
place on more search lists than the note. Asked through `recall()`, which records nothing, so the figures do not
depend on the order of the questions.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_memory.bench.coding_notes import K, NoteSet, notes_config, write_notes
from agent_memory.cognition.evidence import coverage, keyword_part
from agent_memory.config import RetrievalConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import RetrievalResult

SEARCH_LAYERS = ("keyword", "semantic", "grep", "time", "image")


FACTORS = ("mood", "decay", "time", "role")  # multiplicative; keyword, graph and session add to the score


def _decided_by(
    result: RetrievalResult, note: RetrievalResult, words: tuple[str, ...], retrieval: RetrievalConfig, top: float
) -> set[str]:
    """The signals without which `result` would fall below the buried `note` (each taken away alone), plus what
    describes it: a keyword hit on under half of the query's content words, more search lists than the note."""
    layers = result.layers
    factor = math.prod(layers[name].score for name in FACTORS if name in layers)
    additive = result.score / factor
    found = set()
    if "keyword" in layers:
        part = keyword_part(
            layers["keyword"], weight=retrieval.keyword_weight, top=top, rrf_k=retrieval.rrf_k, method=retrieval.fusion
        )
        if (additive - part) * factor < note.score:
            found.add("its keyword rank")
        if coverage(words, result.memory.content) < 0.5:
            found.add("(keyword hit on weak words)")
    for name, label in (("graph", "graph walk"), ("session", "session lift")):
        if name in layers and (additive - layers[name].score) * factor < note.score:
            found.add(label)
    if "time" in layers and result.score / layers["time"].score < note.score:
        found.add("time window")
    if sum(name in layers for name in SEARCH_LAYERS) > sum(name in note.layers for name in SEARCH_LAYERS):
        found.add("(on more lists than the note)")
    return found


async def diagnose(
    notes: NoteSet, embedder: Embedder, data_dir: Path, retrieval: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Counts of buried questions and of the signals that lift what ranks above the buried note."""
    asked_at = notes.asked_at
    counts: Counter[str] = Counter()
    buried: list[dict[str, Any]] = []
    windows = 0
    config = notes_config(data_dir, retrieval)
    async with MemoryManager.open(config, embedder=embedder, clock=lambda: asked_at) as manager:
        owners = await write_notes(manager, notes.notes)
        for query in notes.queries:
            recalled = await manager.recall(query.text, now=asked_at)
            windows += recalled.window is not None
            results = recalled.ranked.results
            relevant = [r for r in results if owners.get(r.memory.memory_id) in query.relevant]
            semantic = [r for r in relevant if "semantic" in r.layers and r.layers["semantic"].rank <= K]
            if not semantic or any(r.rank <= K for r in relevant):
                continue
            note = min(semantic, key=lambda r: r.rank)
            top = max((r.layers["keyword"].score for r in results if "keyword" in r.layers), default=0.0)
            above = [_decided_by(r, note, recalled.keywords, config.retrieval, top) for r in results[: note.rank - 1]]
            counts.update(signal for found in above for signal in found)
            buried.append({"query": query.query_id, "kind": query.kind, "fused_rank": note.rank, "above": len(above)})
    return {"buried": buried, "signals_above": dict(counts.most_common()), "questions_with_a_window": windows}
