"""The `agent-memory` commands for versioned facts: `remember`, `facts`, and `history SUBJECT ATTRIBUTE`; through
the daemon when one runs (interfaces/routing.py), like every command."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from agent_memory.config import Config
from agent_memory.interfaces.routing import open_store
from agent_memory.models import Fact


async def cmd_remember(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        fact = await store.remember_fact(
            args.subject, args.attribute, args.value, valid_at=args.at, source=args.source, namespace=args.namespace
        )
    print(json.dumps(fact_json(fact), indent=2) if args.json else fact_line(fact))
    return 0


async def cmd_facts(config: Config, args: argparse.Namespace) -> int:
    async with open_store(config) as store:
        found = await store.facts(args.subject, as_of=args.as_of, known_at=args.known_at, namespace=args.namespace)
    _show(found, as_json=args.json, empty="no facts")
    return 0


async def cmd_fact_history(config: Config, args: argparse.Namespace) -> int:
    """`history SUBJECT ATTRIBUTE`: every value, with the interval it was true in."""
    async with open_store(config) as store:
        found = await store.fact_history(args.memory_id, args.attribute, namespace=args.namespace)
    _show(found, as_json=args.json, empty=f"no values of {args.attribute!r} for {args.memory_id!r}")
    return 0


def _show(facts: list[Fact], *, as_json: bool, empty: str) -> None:
    if as_json:
        print(json.dumps([fact_json(f) for f in facts], indent=2))
    else:
        print("\n".join(fact_line(f) for f in facts) or empty)


def fact_json(fact: Fact) -> dict[str, Any]:
    data = asdict(fact)
    times = ("valid_at", "invalid_at", "recorded_at", "expired_at")
    return {**data, **{k: data[k].isoformat() if data[k] else None for k in times}, "sources": list(fact.sources)}


def fact_line(fact: Fact) -> str:
    until = f"until {fact.invalid_at:%Y-%m-%d}" if fact.invalid_at else "still true"
    seen = f", seen {fact.observation_count}x" if fact.observation_count > 1 else ""
    return f"{fact.subject} | {fact.attribute} | {fact.value}  (from {fact.valid_at:%Y-%m-%d}, {until}{seen})"
