"""The retrieval latency benchmark, run small on the real engines: the report's structure, never its figures."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from agent_memory.bench.latency import (
    BEGIN,
    END,
    LAYERS,
    PooledEmbedder,
    bench_size,
    main,
    make_bases,
    make_queries,
    make_turns,
    render,
    write_docs,
)
from agent_memory.embeddings.text import Embedder


def test_the_corpus_is_deterministic_and_conversation_like() -> None:
    bases = make_bases(50, random.Random("bases"))
    turns = make_turns(300, bases, random.Random("turns"))
    again = make_turns(300, make_bases(50, random.Random("bases")), random.Random("turns"))
    assert [t.text for t in turns] == [t.text for t in again] and len({b.text for b in bases}) == 50
    assert all(10 <= len(t.text.split()) <= 60 for t in turns)
    assert all(a.at < b.at for a, b in zip(turns, turns[1:], strict=False))
    assert {t.session for t in turns} == set(range(15)) and {t.number for t in turns} == set(range(20))
    queries = make_queries(turns, 20, random.Random("queries"))
    assert len(queries) == 20 and all(q.endswith("?") for q in queries)


async def test_the_pooled_embedder_stays_near_its_base_vector() -> None:
    pool = np.eye(4, 384, dtype=np.float32)
    embedder = PooledEmbedder(pool, {"a turn": 2})
    first, again = await embedder.embed(["a turn"]), await embedder.embed(["a turn"])
    assert first.shape == (1, 384) and np.array_equal(first, again)
    assert abs(float(np.linalg.norm(first[0])) - 1.0) < 1e-5 and first[0] @ pool[2] > 0.9
    assert first[0] @ pool[2] == max(first[0] @ row for row in pool)


async def test_a_small_run_reports_every_layer(tmp_path: Path, embedder: Embedder) -> None:
    results = await bench_size(tmp_path / "store", 300, queries=8, seed=3, pool=50, warmup=2, embedder=embedder)
    assert [r.index for r in results] == ["exact scan", "HNSW"]
    for figures in results:
        assert figures.turns == figures.memories == 300
        assert figures.build_seconds > 0 and figures.optimize_seconds is not None
        for name in (*LAYERS, "fused"):
            latency = figures.layers[name]
            assert latency.runs >= 1 and 0 <= latency.p50_ms <= latency.p95_ms, name
        assert figures.layers["fused"].runs == 8 and figures.layers["fused"].p50_ms > 0
    with sqlite3.connect(tmp_path / "store" / "memory.db") as db:  # points a payload change moved out of the index
        db.execute(
            "INSERT INTO vector_index_moves (collection, moved) VALUES ('text', 300) "
            "ON CONFLICT (collection) DO UPDATE SET moved = excluded.moved"
        )
    again = await bench_size(tmp_path / "store", 300, queries=3, seed=3, pool=50, warmup=1, embedder=embedder)
    assert [r.index for r in again] == ["HNSW"] and again[0].build_seconds == results[0].build_seconds
    with sqlite3.connect(tmp_path / "store" / "memory.db") as db:  # the index job decided before the timing
        counts = db.execute("SELECT counts FROM job_runs WHERE job = 'index' ORDER BY run_id DESC").fetchone()
    assert counts is not None and json.loads(counts[0])["text"]["moved"] == 300

    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n## Ingest\n\nkept\n\n{BEGIN}\nold figures\n{END}\n\nafter\n")
    section = render(results, pool=50, warmup=2)
    write_docs(section, docs)
    text = docs.read_text()
    assert "old figures" not in text and "kept" in text and text.endswith(f"{END}\n\nafter\n")
    assert text.count(BEGIN) == 1 and "| 300 | exact scan |" in text and "| 300 | HNSW |" in text
    bare = tmp_path / "bare.md"
    bare.write_text("# Benchmarks\n")
    write_docs(section, bare)
    assert bare.read_text().startswith("# Benchmarks\n\n## Retrieval latency\n\n" + BEGIN)


def test_the_help_names_the_real_text_stores(capsys: pytest.CaptureFixture[str]) -> None:
    """--text is read before the synthetic benchmark's own options; its --help must still say it is there."""
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "--text {synthetic,real,both}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--text", "imaginary"])
    assert "invalid choice: 'imaginary'" in capsys.readouterr().err
