"""The offline fact extractor against a labelled sample (issue #20): precision and recall of (attribute, value).

`python scripts/bench_facts.py [--data data/fact_sample.jsonl]`: each line is `{"text", "facts": [[attribute,
value], ...]}`, the facts a careful reader takes the speaker to state about themselves (none for a question, a
hypothetical, a negation, an opinion about something passing). A found fact is right when its attribute is the
labelled one and its value equals the labelled value (case and whitespace aside).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

from agent_memory.cognition.fact_extraction import extract
from agent_memory.facts import normalised

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "fact_sample.jsonl"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def score(path: Path) -> dict[str, object]:
    found = right = labelled = 0
    wrong: list[str] = []
    missed: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        want = {(normalised(a), normalised(v)) for a, v in item["facts"]}
        got = {(normalised(c.attribute), normalised(c.value)) for c in extract(item["text"], subject="user", now=NOW)}
        found, right, labelled = found + len(got), right + len(got & want), labelled + len(want)
        wrong += [f"{item['text']!r}: {a} = {v}" for a, v in sorted(got - want)]
        missed += [f"{item['text']!r}: {a} = {v}" for a, v in sorted(want - got)]
    return {
        "sentences": len(path.read_text(encoding="utf-8").splitlines()),
        "found": found,
        "labelled": labelled,
        "precision": round(right / found, 3) if found else 1.0,
        "recall": round(right / labelled, 3) if labelled else 1.0,
        "wrong": wrong,
        "missed": missed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the offline fact extractor's precision on a labelled sample")
    parser.add_argument("--data", type=Path, default=SAMPLE)
    report = score(parser.parse_args(argv).data)
    print(
        f"sentences={report['sentences']} found={report['found']} labelled={report['labelled']} "
        f"precision={report['precision']} recall={report['recall']}"
    )
    for kind in ("wrong", "missed"):
        for entry in report[kind]:  # type: ignore[attr-defined]
            print(f"  {kind}: {entry}")
    return 0
