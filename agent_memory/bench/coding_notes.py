"""A coding-memory retrieval check (issue #23): one project's notes, literal and paraphrased questions.

`agent_memory/bench/data/coding_notes.json` holds 68 notes a coding agent kept on one fictional project
(decisions, findings, procedures, facts, preferences, notes, handoffs; one to four sentences each) and 56
questions, half sharing distinctive words with their note ("literal") and half asking for the same thing in other
words ("paraphrased"), each naming the note(s) that answer it. It is ours, so it ships with the package.
`coding_notes_heldout.json` is a second project's (72 notes, 60 questions, 30 of each kind), written apart from
the first without running the retriever, for checking on other notes what was chosen on the first
(`load_notes(name=HELDOUT)`; its paraphrased questions share no word of six letters or more with their note).
`coding_notes_third.json` (`THIRD`: 70 notes, 56 questions) is a third project's, written the same way after
notes' retrieval setting was chosen with the first two in view, and scored once: the unbiased figure.
`coding_notes_fourth.json` (`FOURTH`: 70 notes, 56 questions) is a fourth project's, written after the third was
scored and before any setting changed: a second unbiased figure (its paraphrases are milder: 15 of 28 keep a word
of six letters from their note).
`coding_notes_fifth.json` (`FIFTH`: 70 notes, 56 questions) is a fifth project's (a collaborative editor), written
blind by a writer that read no other set and ran nothing, while the settings of a larger text model were chosen on
the first four, and scored once with the configurations named before it was read (docs/benchmarks.md, "Which text
model"). `coding_notes_sixth.json` (`SIXTH`: 70 notes, 56 questions) is a sixth project's (buoy firmware), written
blind the same way and scored once, with outcomes stated before it was read (docs/benchmarks.md, "Coding notes").

Each note is written as one user turn in a session of its own (`process_turns`, `save.keep_all`, so every note is
a memory), dated `day` days after the first note; the questions are asked a day after the last note, through
`notes.recall(k=5)`, what `memory_recall` asks (retrieve() with `notes.keyword_evidence`), which records its
accesses as an agent's retrievals do. A question is a hit when a memory of one
of its notes is in the top 5; MRR is over those 5. Each configuration gets a fresh store (68 turns: a few seconds),
so what one configuration's questions recorded cannot move another's. The order check asks the same questions
in the listed order and reversed, each on a fresh store, and counts the questions whose top 5 differ.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any

from agent_memory.bench.bootstrap import paired_interval
from agent_memory.bench.harness import ALONE_OFF
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import RetrievalResult, TurnInput

FIRST_NOTE_AT = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # the project's first note; a fixed date, so runs agree
K = 5
SHIPPED = "coding_notes"  # the set the defaults were judged on
HELDOUT = "coding_notes_heldout"  # another project's notes, written apart from it (read before notes' setting)
THIRD = "coding_notes_third"  # a third project's, written after the settings were chosen and scored once
FOURTH = "coding_notes_fourth"  # a fourth project's, written after the third was scored, before any new setting
FIFTH = "coding_notes_fifth"  # a fifth project's, written blind (no other set seen, no retriever run), scored once
SIXTH = "coding_notes_sixth"  # a sixth project's (firmware), written blind like the fifth, scored once
SETS = {"shipped": SHIPPED, "heldout": HELDOUT, "third": THIRD, "fourth": FOURTH, "fifth": FIFTH, "sixth": SIXTH}
KINDS = ("literal", "paraphrased")
NOTES_OWN = ("keyword_evidence", "graph_weight")  # retrieval settings notes' recall takes from notes.*
VARIANTS: dict[str, dict[str, Any]] = {
    "shipped defaults": {},
    "before (decay, anchors)": {"decay_weight": 0.05, "event_anchors": True},
    "keyword alone": {**ALONE_OFF, "keyword_weight": 1.0},
    "semantic alone": {**ALONE_OFF, "semantic_weight": 1.0},
    "grep alone": {**ALONE_OFF, "grep_weight": 1.0},
    "without keyword": {"keyword_weight": 0.0},
    "without grep": {"grep_weight": 0.0},
    "with graph walk": {"graph_weight": 0.5},  # retrieve()'s walk; notes rank without it (notes.graph_weight)
    "without session lift": {"session_weight": 0.0},
    "without time weights": {
        "time_boost": 0.0,
        "time_penalty": 1.0,
        "time_penalty_after": 1.0,
        "time_layer_weight": 0.0,
    },
    "with decay 0.05": {"decay_weight": 0.05},
    "with event anchors": {"event_anchors": True},
    "fusion rrf": {"fusion": "rrf"},
    "fusion blend": {"fusion": "blend"},
    "candidate limit 10": {"candidate_limit": 10},
    "evidence floor 0.3": {"evidence_floor": 0.3},
    "evidence floor 0.5": {"evidence_floor": 0.5},
    "keyword evidence 0.34": {"keyword_evidence": 0.34},
    "keyword evidence off": {"keyword_evidence": 0.0},
    "floor 0.3 + kw ev. 0.34": {"evidence_floor": 0.3, "keyword_evidence": 0.34},
    "floor 0.5 + kw ev. 0.34": {"evidence_floor": 0.5, "keyword_evidence": 0.34},
}
ORDER_CHECKED = ("shipped defaults", "before (decay, anchors)")  # asked again in reverse on a fresh store


@dataclass(frozen=True, slots=True)
class Note:
    note_id: str
    kind: str
    day: int
    text: str

    @property
    def written_at(self) -> datetime:
        """Notes of one day an hour apart, by the number in their id ("n07", "h07"), so no two share a time."""
        number = int("".join(c for c in self.note_id if c.isdigit()) or 0)
        return FIRST_NOTE_AT + timedelta(days=self.day, hours=number % 8)


@dataclass(frozen=True, slots=True)
class NoteQuery:
    query_id: str
    kind: str  # "literal" or "paraphrased"
    text: str
    relevant: frozenset[str]


@dataclass(frozen=True, slots=True)
class NoteSet:
    notes: tuple[Note, ...]
    queries: tuple[NoteQuery, ...]

    @property
    def asked_at(self) -> datetime:
        return FIRST_NOTE_AT + timedelta(days=max(n.day for n in self.notes) + 1)


def load_notes(path: Path | None = None, *, name: str = SHIPPED) -> NoteSet:
    """A set that ships with the package (SETS), or another file of the same shape at `path`."""
    text = (
        path.read_text("utf-8")
        if path
        else files("agent_memory.bench").joinpath(f"data/{name}.json").read_text("utf-8")
    )
    data = json.loads(text)
    notes = tuple(Note(n["id"], n["kind"], int(n["day"]), n["text"]) for n in data["notes"])
    queries = tuple(NoteQuery(q["id"], q["kind"], q["text"], frozenset(q["relevant"])) for q in data["queries"])
    return NoteSet(notes, queries)


def sliced(notes: NoteSet, queries: int) -> NoteSet:
    """The first `queries` questions of each kind and every note: a quick form for tests."""
    kept = [q for kind in KINDS for q in [q for q in notes.queries if q.kind == kind][:queries]]
    return NoteSet(notes.notes, tuple(kept))


def notes_config(
    data_dir: Path, retrieval: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """The shipped defaults (and AGENT_MEMORY__ overrides from `environ`, the process's when None), every note
    kept, image memory off, `retrieval` changed over them. Notes' recall ranks with notes.keyword_evidence and
    notes.graph_weight in place of retrieval's; here both hold the same values (the variant's when it names them),
    so notes.recall(), retrieve() and the diagnosis's recall() rank alike."""
    config = load_config(environ=environ, data_dir=str(data_dir), save__keep_all=True, image__enabled=False)
    changes = dict(retrieval or {})
    own = {key: changes.pop(key, getattr(config.notes, key)) for key in NOTES_OWN}
    return config.model_copy(
        update={
            "retrieval": config.retrieval.model_copy(update=changes | own),
            "notes": config.notes.model_copy(update=own),
        }
    )


async def write_notes(manager: MemoryManager, notes: Sequence[Note]) -> dict[str, str]:
    """Each note as one user turn in its own session; returns memory id -> note id."""
    turns = [TurnInput(f"note-{n.note_id}", 0, n.text, role="user", at=n.written_at) for n in notes]
    results = await manager.process_turns(turns)
    await manager.flush()
    return {r.memory_id: n.note_id for n, r in zip(notes, results, strict=True) if r.memory_id is not None}


@dataclass(frozen=True, slots=True)
class Answer:
    query: NoteQuery
    ranked: tuple[str, ...]  # note ids of the top K, best first
    results: tuple[RetrievalResult, ...]

    @property
    def first(self) -> int | None:
        return next((i for i, note in enumerate(self.ranked, 1) if note in self.query.relevant), None)


async def ask_all(
    config: Config, embedder: Embedder, notes: NoteSet, order: Sequence[NoteQuery] | None = None
) -> list[Answer]:
    """A fresh store in `config.data_dir`, every note written, every question asked once through notes.recall(k=5)
    (what memory_recall asks), in `order` (the file's when None). The clock stands at the time the questions are
    asked, so the accesses they record are dated then too."""
    asked_at = notes.asked_at
    async with MemoryManager.open(config, embedder=embedder, clock=lambda: asked_at) as manager:
        owners = await write_notes(manager, notes.notes)
        answers = []
        for query in order or notes.queries:
            results = [result for result, _ in await manager.notes.recall(query.text, k=K)]
            ranked = tuple(owners.get(r.memory.memory_id, "?") for r in results)
            answers.append(Answer(query, ranked, tuple(results)))
    return answers


def scores(answers: Sequence[Answer]) -> dict[str, dict[str, float]]:
    """Recall@5 and MRR@5 per kind of question, and over all of them."""
    out: dict[str, dict[str, float]] = {}
    for kind in (*KINDS, "all"):
        rows = [a for a in answers if kind in ("all", a.query.kind)]
        if rows:
            out[kind] = {
                "n": len(rows),
                "recall@5": round(statistics.fmean(a.first is not None for a in rows), 3),
                "mrr": round(statistics.fmean(1 / a.first if a.first else 0.0 for a in rows), 3),
            }
    return out


def hits(answers: Sequence[Answer], kind: str) -> dict[str, float]:
    return {a.query.query_id: float(a.first is not None) for a in answers if a.query.kind == kind}


def bootstrap_difference(
    after: Mapping[str, float], before: Mapping[str, float], *, draws: int = 2000, seed: int = 23
) -> tuple[float, float, float]:
    """The mean paired difference after - before over the questions both hold, and a 95% percentile interval from
    resampling the questions."""
    keys = sorted(after.keys() & before.keys())
    deltas = [after[k] - before[k] for k in keys]
    if not deltas:
        return 0.0, 0.0, 0.0
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(deltas, k=len(deltas))) for _ in range(draws))
    return statistics.fmean(deltas), means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def order_changes(first: Sequence[Answer], second: Sequence[Answer]) -> int:
    """How many questions got a different top 5 (note ids, in order) when the questions came in another order."""
    again = {a.query.query_id: a.ranked for a in second}
    return sum(1 for a in first if again.get(a.query.query_id) != a.ranked)


async def run(
    notes: NoteSet,
    *,
    variants: Mapping[str, Mapping[str, Any]] = VARIANTS,
    order_check: bool = True,
    embedder: Embedder | None = None,
    root: Path | None = None,
) -> dict[str, Any]:
    """Every variant on a fresh store, then the order check (ORDER_CHECKED). Returns the report."""
    report: dict[str, Any] = {"notes": len(notes.notes), "queries": len(notes.queries), "k": K, "variants": {}}
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        if embedder is None:
            embedder = make_embedder(notes_config(Path(scratch)))
            await embedder.load()
        answers: dict[str, list[Answer]] = {}
        for n, (name, changes) in enumerate(variants.items()):
            answers[name] = await ask_all(notes_config(Path(scratch) / f"v{n}", changes), embedder, notes)
            report["variants"][name] = scores(answers[name])
        baseline = answers.get("shipped defaults") or next(iter(answers.values()))
        report["differences"] = {
            name: {kind: bootstrap_difference(hits(found, kind), hits(baseline, kind)) for kind in KINDS}
            for name, found in answers.items()
        }
        report["hits"] = {name: {kind: hits(found, kind) for kind in KINDS} for name, found in answers.items()}
        report["misses"] = [
            {"query": a.query.query_id, "kind": a.query.kind, "text": a.query.text, "top": list(a.ranked)}
            for a in baseline
            if a.first is None
        ]
        from agent_memory.bench.coding_notes_diagnosis import diagnose  # it builds on this module

        report["diagnosis"] = {
            name: await diagnose(notes, embedder, Path(scratch) / f"diagnosis{n}", variants[name])
            for n, name in enumerate(name for name in ORDER_CHECKED if name in variants)
        }
        report["order_changes"] = {}
        for n, name in enumerate(name for name in ORDER_CHECKED if order_check and name in answers):
            config = notes_config(Path(scratch) / f"reversed{n}", variants[name])
            again = await ask_all(config, embedder, notes, list(reversed(notes.queries)))
            report["order_changes"][name] = order_changes(answers[name], again)
    return report


def pooled(reports: Mapping[str, Mapping[str, Any]], baseline: str = "shipped defaults") -> dict[str, Any]:
    """Several sets' reports (set name -> run()'s report) pooled: per variant and kind, recall@k over every
    question, and the paired difference from `baseline` with a 95% interval resampling sets, then questions."""
    out: dict[str, Any] = {}
    for name in next(iter(reports.values()))["hits"]:
        entry: dict[str, Any] = {}
        for kind in KINDS:
            rows = {s: list(r["hits"][name][kind].values()) for s, r in reports.items()}
            before = {s: [r["hits"][baseline][kind][q] for q in r["hits"][name][kind]] for s, r in reports.items()}
            delta, low, high = paired_interval(rows, before)
            every = [x for values in rows.values() for x in values]
            entry[kind] = {"recall@5": round(statistics.fmean(every), 3), "n": len(every)}
            entry[kind] |= {"delta": round(delta, 3), "interval": [round(low, 3), round(high, 3)]}
        out[name] = entry
    return out


def format_pooled(figures: Mapping[str, Any], sets: Sequence[str]) -> str:
    lines = [f"pooled over {len(sets)} sets ({', '.join(sets)}), against the shipped defaults (sets, then questions)"]
    for name, entry in figures.items():
        parts = [
            f"{kind} {e['recall@5']:.3f} ({e['delta']:+.3f} [{e['interval'][0]:+.3f}, {e['interval'][1]:+.3f}])"
            for kind, e in entry.items()
        ]
        lines.append(f"{name:<24} " + "  ".join(parts))
    return "\n".join(lines)


def format_report(report: Mapping[str, Any]) -> str:
    lines = [f"coding notes: {report['notes']} notes, {report['queries']} questions, recall@{report['k']}"]
    lines.append(f"{'configuration':<24} {'literal':>8} {'paraphr.':>9} {'all':>6} {'MRR lit.':>9} {'MRR par.':>9}")
    for name, figures in report["variants"].items():
        lit, par, both = (figures.get(k, {}) for k in (*KINDS, "all"))
        lines.append(
            f"{name:<24} {lit.get('recall@5', 0):>8.3f} {par.get('recall@5', 0):>9.3f} {both.get('recall@5', 0):>6.3f}"
            f" {lit.get('mrr', 0):>9.3f} {par.get('mrr', 0):>9.3f}"
        )
    for name, found in report.get("diagnosis", {}).items():
        lines.append(
            f"buried vector hits, {name}: {len(found['buried'])} questions, "
            f"{sum(b['above'] for b in found['buried'])} memories above them, lifted there by: "
            + ", ".join(f"{signal} {n}" for signal, n in found["signals_above"].items())
        )
    for name, changed in report.get("order_changes", {}).items():
        lines.append(f"order check, {name}: {changed} of {report['queries']} top-5 rankings differ when reversed")
    return "\n".join(lines)
