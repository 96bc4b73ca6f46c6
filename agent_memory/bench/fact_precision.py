"""A fact extractor against a labelled sample (issue #20): precision and recall of (attribute, value).

`python scripts/bench_facts.py [--data data/fact_sample.jsonl] [--extractor heuristic|llm] [--config FILE]`: each
line is `{"text", "facts": [[attribute, value], ...]}`, the facts a careful reader takes the speaker to state about
themselves (none for a question, a hypothetical, a negation, an opinion about something passing). A found fact is
right when its attribute is the labelled one and its value equals the labelled value (case and whitespace aside).

`--extractor llm` asks the model configured as `llm.model` (the TOML file, then AGENT_MEMORY__LLM__* variables), one
call per sentence as a lone user turn, through the write path's prompt and validation (llm/fact_prompt.py). A
sentence whose call fails as a whole counts as found nothing and is reported (`failed=`): the figure is the model's
alone, not the model's with the rules' fallback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from agent_memory.cognition.fact_extraction import extract
from agent_memory.config import load_config
from agent_memory.errors import ConfigError, LLMError
from agent_memory.facts import normalised
from agent_memory.llm.client import LiteLLMClient
from agent_memory.llm.fact_prompt import FactTurn, ask_facts

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "fact_sample.jsonl"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
Pairs = set[tuple[str, str]]


def by_rules(texts: list[str]) -> list[Pairs]:
    return [
        {(normalised(c.attribute), normalised(c.value)) for c in extract(t, subject="user", now=NOW)} for t in texts
    ]


async def by_llm(texts: list[str], client: LiteLLMClient) -> tuple[list[Pairs], int]:
    """What the model finds in each text (the client's semaphore bounds the calls in flight), and how many failed."""

    async def one(text: str) -> Pairs | None:
        try:
            answer = await ask_facts(client, [FactTurn("user", text, NOW)])
        except LLMError:
            return None
        return {(normalised(f.attribute), normalised(f.value)) for f in answer.facts}

    found = await asyncio.gather(*(one(text) for text in texts))
    return [pairs or set() for pairs in found], sum(pairs is None for pairs in found)


def score(path: Path, found_by: list[Pairs] | None = None) -> dict[str, object]:
    """The report for the sample at `path`; `found_by` is what an extractor found in each line (default: the
    offline rules)."""
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    founds = found_by if found_by is not None else by_rules([item["text"] for item in items])
    found = right = labelled = 0
    wrong: list[str] = []
    missed: list[str] = []
    for item, got in zip(items, founds, strict=True):
        want = {(normalised(a), normalised(v)) for a, v in item["facts"]}
        found, right, labelled = found + len(got), right + len(got & want), labelled + len(want)
        wrong += [f"{item['text']!r}: {a} = {v}" for a, v in sorted(got - want)]
        missed += [f"{item['text']!r}: {a} = {v}" for a, v in sorted(want - got)]
    return {
        "sentences": len(items),
        "found": found,
        "labelled": labelled,
        "precision": round(right / found, 3) if found else 1.0,
        "recall": round(right / labelled, 3) if labelled else 1.0,
        "wrong": wrong,
        "missed": missed,
    }


async def _llm_report(path: Path, config_path: Path | None, environ: Mapping[str, str]) -> dict[str, object]:
    config = load_config(config_path, environ)
    if not config.llm.model:
        raise ConfigError("--extractor llm needs llm.model (in --config, or AGENT_MEMORY__LLM__MODEL)")
    texts = [
        json.loads(line)["text"] for line in (await asyncio.to_thread(path.read_text, encoding="utf-8")).splitlines()
    ]
    client = LiteLLMClient(config.llm)
    try:
        found, failed = await by_llm(texts, client)
    finally:
        await client.aclose()
    return score(path, found) | {"model": config.llm.model, "failed": failed}


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a fact extractor's precision on a labelled sample")
    parser.add_argument("--data", type=Path, default=SAMPLE)
    parser.add_argument("--extractor", choices=["heuristic", "llm"], default="heuristic")
    parser.add_argument("--config", type=Path, default=None, help="a TOML config file (for --extractor llm)")
    args = parser.parse_args(argv)
    if args.extractor == "llm":
        try:
            report = asyncio.run(_llm_report(args.data, args.config, os.environ if environ is None else environ))
        except ConfigError as exc:
            print(f"bench_facts: {exc}", file=sys.stderr)
            return 2
        model = f"model={report['model']} failed={report['failed']} "
    else:
        report, model = score(args.data), ""
    print(
        f"extractor={args.extractor} {model}sentences={report['sentences']} found={report['found']} "
        f"labelled={report['labelled']} precision={report['precision']} recall={report['recall']}"
    )
    for kind in ("wrong", "missed"):
        for entry in report[kind]:  # type: ignore[attr-defined]
            print(f"  {kind}: {entry}")
    return 0
