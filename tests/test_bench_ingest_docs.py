"""The ingest benchmark's docs blocks: each kind of turn rewrites its own block and leaves the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_memory.bench.ceiling import EmbeddingCeiling
from agent_memory.bench.perf import BEGIN, END, IngestFigures, markers, percentile, render, write_docs


def _figures(rate_seconds: float) -> IngestFigures:
    return IngestFigures(4, 1.0, 2.0, 1.0, 2.0, 100, rate_seconds, 0.5, "always")


def test_each_kind_of_turn_has_a_block_of_its_own(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n## Ingest\n\n{BEGIN}\nold LoCoMo figures\n{END}\n\nafter\n")
    begin, end = markers("longmemeval", llm=False)
    assert (begin, end) != (BEGIN, END) and markers("locomo", llm=False) == (BEGIN, END)
    write_docs(render(_figures(2.0), Path("haystacks.json"), 64, "longmemeval"), docs, begin=begin, end=end)
    text = docs.read_text()
    assert "old LoCoMo figures" in text and text.count(begin) == 1 and "| 50 turns/s | >= 60 turns/s |" in text
    write_docs(render(_figures(4.0), Path("haystacks.json"), 64, "longmemeval"), docs, begin=begin, end=end)
    text = docs.read_text()
    assert text.count(begin) == 1 and "| 25 turns/s |" in text and "| 50 turns/s |" not in text  # rewritten
    write_docs(render(_figures(1.0), Path("locomo.json"), 64), docs)
    text = docs.read_text()
    assert "old LoCoMo figures" not in text and "| 100 turns/s | >= 300 turns/s |" in text and "| 25 turns/s |" in text


def test_a_percentile_is_a_share_of_the_sorted_values_and_a_share_past_one_is_refused() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1, unsorted on purpose
    assert percentile(values, 0.5) == 51.0 and percentile(values, 0.95) == 95.0
    assert percentile(values, 0.0) == 1.0 and percentile(values, 1.0) == 100.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        percentile(values, 95)  # the maximum, once, for a p95
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_the_import_and_its_upgrade_are_rows_of_their_own_when_measured() -> None:
    plain = render(_figures(2.0), Path("locomo.json"), 64)
    assert "agent-memory ingest" not in plain and "upgrade" not in plain  # not measured: no row
    measured = IngestFigures(4, 1.0, 2.0, 1.0, 2.0, 100, 2.0, 0.5, "always", "", None, 0.5, 60, 0.25)
    text = render(measured, Path("locomo.json"), 64)
    assert "| the same, as `agent-memory ingest` imports (int8 documents, `embedding.import_precision`) " in text
    assert "| 200 turns/s | >= 300 turns/s |" in text  # 100 turns in 0.5 s, against the same goal
    assert "| then the upgrade to float32 while idle, on the next open (60 memories) | 240 memories/s | |" in text


def test_the_imports_model_and_its_int8_ceiling_are_rows_when_measured() -> None:
    """Each figure with its ceiling beside it: the import's int8 model alone and the int8 ceiling, when measured."""
    ceiling = EmbeddingCeiling(100, 37.0, 0.8, 160.0, 170.0, 80.0, 240.0)
    text = render(IngestFigures(4, 1.0, 2.0, 1.0, 2.0, 100, 2.0, 0.5, "always", "", ceiling), Path("l.json"), 64)
    assert "| the embedder alone, all 100 turns in one call | 170 turns/s | |" in text
    assert "| the import's int8 model alone, the same call | 240 turns/s | |" in text
    assert "| ceiling for the int8 model: the same operations at this machine's 80 GOP/s " in text
    float32_only = EmbeddingCeiling(100, 37.0, 0.8, 160.0, 170.0)
    text = render(IngestFigures(4, 1.0, 2.0, 1.0, 2.0, 100, 2.0, 0.5, "always", "", float32_only), Path("l.json"), 64)
    assert "int8 model alone" not in text and "ceiling for the int8 model" not in text
