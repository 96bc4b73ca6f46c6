"""The real-text latency benchmark, run small on the real engines: its corpus, its cache, its report's structure."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from agent_memory.bench.during_import import BEGIN as DURING_BEGIN
from agent_memory.bench.during_import import END as DURING_END
from agent_memory.bench.during_import import main as during_import
from agent_memory.bench.grep_bench import main as grep_bench
from agent_memory.bench.latency import MARKER
from agent_memory.bench.latency import main as bench_retrieve
from agent_memory.bench.latency_real import (
    BEGIN,
    CACHE,
    END,
    NAMESPACE,
    CachingEmbedder,
    main,
    real_questions,
    real_turns,
)
from agent_memory.embeddings.text import Embedder

SESSION = [
    {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel last week."},
    {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! My sister breeds parrots in Leeds."},
    {"speaker": "Ana", "dia_id": "D1:3", "text": "My pottery class starts on Thursday evenings, at the studio."},
    {"speaker": "Ben", "dia_id": "D1:4", "text": "I ran the Brighton half marathon in 1:52 last spring."},
]
LOCOMO = [
    {
        "sample_id": "tiny-1",
        "conversation": {"session_1_date_time": "10:00 am on 3 March, 2024", "session_1": SESSION},
        "qa": [
            {"question": "What is the name of Ana's cat?", "evidence": ["D1:1"], "category": 4},
            {"question": "Where does Ben's sister breed parrots?", "evidence": ["D1:2"], "category": 4},
            {"question": "What was Ben's half marathon time?", "evidence": ["D1:4"], "category": 2},
        ],
    }
]
HAYSTACK = [
    {"role": "user", "content": "I am planning a trip to Lisbon in June and want a quiet hotel near the river."},
    {"role": "assistant", "content": "Alfama and Belem have quiet hotels close to the Tagus; book early for June."},
]
LONGMEMEVAL = [
    {
        "question_id": question,
        "haystack_dates": ["2024/03/10 (Sun) 09:00"],
        "haystack_session_ids": ["shared"],  # the same session name in two haystacks: kept apart in one namespace
        "haystack_sessions": [HAYSTACK],
    }
    for question in ("q1", "q2")
]


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    locomo, longmemeval = tmp_path / "locomo.json", tmp_path / "lme.json"
    locomo.write_text(json.dumps(LOCOMO), encoding="utf-8")
    longmemeval.write_text(json.dumps(LONGMEMEVAL), encoding="utf-8")
    return locomo, longmemeval


def test_the_corpus_repeats_the_dev_turns_with_shifted_dates_in_one_namespace(data: tuple[Path, Path]) -> None:
    turns = real_turns(*data, 19)  # one copy is 4 + 2 + 2 = 8 turns: two copies and three turns of a third
    assert len(turns) == 19 and {t.namespace for t in turns} == {NAMESPACE}
    assert len({(t.session_id, t.turn_number) for t in turns}) == 19  # no turn lands on another's place
    assert [t.content for t in turns[8:16]] == [t.content for t in turns[:8]]
    assert turns[0].content == "Ana: I adopted a grey cat named Pixel last week." and turns[4].role == "user"
    assert turns[4].session_id == "r0/q1/shared" and turns[6].session_id == "r0/q2/shared"
    assert turns[8].session_id == "r1/tiny-1/session_1" and turns[16].session_id == "r2/tiny-1/session_1"
    first, last = min(t.at for t in turns[:8] if t.at), max(t.at for t in turns[:8] if t.at)
    assert all(t.at is not None and t.at > last for t in turns[8:])  # the next copy starts after the corpus ends
    assert turns[8].at is not None and turns[16].at is not None and turns[16].at - turns[8].at == turns[8].at - first
    assert real_questions(data[0], 2) == ["What is the name of Ana's cat?", "Where does Ben's sister breed parrots?"]


async def test_the_cache_embeds_each_distinct_text_once(tmp_path: Path, embedder: Embedder) -> None:
    cache = CachingEmbedder(embedder, tmp_path / CACHE)
    await cache.load()
    texts = ["a red bike", "a quiet hotel", "a red bike"]
    vectors = await cache.embed(texts)
    assert cache.embedded == 2 and vectors.shape == (3, embedder.dimension)
    assert np.allclose(vectors, await embedder.embed(texts), atol=1e-6)
    assert np.array_equal(vectors[0], vectors[2])
    assert np.array_equal(await cache.embed(["a quiet hotel"]), vectors[1:2]) and cache.embedded == 2
    assert (await cache.embed([])).shape == (0, embedder.dimension)
    cache.save()
    assert stat.S_IMODE((tmp_path / CACHE).stat().st_mode) == 0o600
    again = CachingEmbedder(embedder, tmp_path / CACHE)
    await again.load()
    assert np.array_equal(await again.embed(texts), vectors) and again.embedded == 0  # read back, not embedded
    question = await again.embed_query("where is the hotel?")
    assert np.array_equal(question, await embedder.embed_query("where is the hotel?"))


def arguments(data: tuple[Path, Path], options: str) -> list[str]:
    """A benchmark's command line: `options`, then the small LoCoMo and LongMemEval files of `data`."""
    locomo, longmemeval = data
    return [*options.split(), "--data-locomo", str(locomo), "--data-longmemeval", str(longmemeval)]


def test_a_small_real_run_builds_once_and_reports_every_layer(
    data: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keep, docs = tmp_path / "keep", tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n## Retrieval latency\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    argv = arguments(data, f"--sizes 24 --queries 3 --keep {keep} --out {docs}")
    assert main(argv) == 0
    build = json.loads((keep / "real-24" / MARKER).read_text())
    assert build["turns"] == 24 and 0 < build["memories"] <= 24 and build["embedded"] <= 8 + 8  # turns + contexts
    assert build["index_seconds"] > 0 and len(build["questions"]) == 3
    report = capsys.readouterr().out
    assert "| 24 | real |" in report and "keyword" in report and "context" in report
    text = docs.read_text()
    assert "old" not in text and text.endswith(f"{END}\n\nafter\n") and "| 24 | real |" in text
    store = keep / "real-24" / "memory.db"
    with sqlite3.connect(store) as db:  # as a newer code's vector upgrade leaves a kept store: points moved
        db.execute(
            "INSERT INTO vector_index_moves (collection, moved) VALUES ('text', 24) "
            "ON CONFLICT (collection) DO UPDATE SET moved = excluded.moved"
        )
    assert bench_retrieve(["--text", "real", *argv, "--pace", "0,5"]) == 0  # kept: timed again, not rebuilt
    assert json.loads((keep / "real-24" / MARKER).read_text()) == build
    assert capsys.readouterr().out.count("| 24 | real |") == 4  # two paces, in both tables
    with sqlite3.connect(store) as db:  # the index job ran before the timing, as the daemon runs it when it starts
        runs = db.execute("SELECT status, counts FROM job_runs WHERE job = 'index' ORDER BY run_id").fetchall()
    assert runs[-1][0] == "ok" and json.loads(runs[-1][1])["text"]["moved"] == 24


def test_the_grep_benchmark_times_both_ways_over_several_segments_with_the_same_hits(
    data: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/bench_grep.py, small: a log of the dev turns cut into several segments, each question with grep
    terms searched one rg in turn and side by side, the same hits both ways."""
    locomo = json.loads(data[0].read_text(encoding="utf-8"))
    locomo[0]["qa"].append({"question": 'Who said "half marathon" in 2024?', "evidence": ["D1:4"], "category": 4})
    data[0].write_text(json.dumps(locomo), encoding="utf-8")
    asked = {"question_type": "single-session-user", "question_date": "2024/03/11 (Mon) 10:00", "answer": "Alfama"}
    haystacks = [{**entry, **asked, "answer_session_ids": ["shared"]} for entry in LONGMEMEVAL]  # no gold: not asked
    data[1].write_text(json.dumps(haystacks), encoding="utf-8")
    args = ["--sizes", "40", "--repeat", "2", "--segment-bytes", "1024", "--keep", str(tmp_path / "logs")]
    assert grep_bench(["--locomo", str(data[0]), "--longmemeval", str(data[1]), *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 questions with grep terms; limit 50; 2 rounds")
    row = out.strip().splitlines()[-1].split(" | ")
    assert row[0] == "| 40" and int(row[2]) > 3 and row[3] == "1" and row[-1] == "True |"
    assert len(list((tmp_path / "logs" / "logs-40").glob("segment-*.jsonl"))) == int(row[2])


def test_the_during_import_benchmark_questions_a_copy_while_it_imports(
    data: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/bench_during_import.py, small: the store is built once, copied, questioned idle and while the
    LongMemEval turns are imported into the copy; the kept store gets none of the imported turns."""
    keep, docs = tmp_path / "keep", tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n{DURING_BEGIN}\nold\n{DURING_END}\n\nafter\n")
    assert during_import(arguments(data, f"--size 24 --turns 4 --skip 0 --queries 3 --keep {keep} --out {docs}")) == 0
    report = capsys.readouterr().out
    rows = [line for line in report.splitlines() if line.startswith("| ") and "ms, p50" not in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| a question's embedding (`embed_query`)",
        "| a live turn's embedding (`embed`)",
        "| `retrieve(k=10)`, LoCoMo dev questions",
        "| a live turn (`process_turn`), a session of its own",
    ]
    assert "4 LongMemEval dev turns in batches of 64" in report and "store of 24 turns" in report
    text = docs.read_text()
    assert "old" not in text and text.endswith(f"{DURING_END}\n\nafter\n") and rows[0] in text
    with sqlite3.connect(keep / "real-24" / "memory.db") as db:
        namespaces = {row[0] for row in db.execute("SELECT DISTINCT namespace FROM memories")}
    assert namespaces == {NAMESPACE}  # the imports and the live turns went into the copy
    assert [p.name for p in keep.iterdir() if p.name.startswith("during-import-")] == []  # the copy is gone
