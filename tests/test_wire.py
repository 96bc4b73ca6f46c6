"""`plain` (interfaces/wire.py) writes what FastAPI's `jsonable_encoder(asdict(x))` wrote, for every model the API
sends, taken from a real store: the routes switched to it, and their answers must not change shape."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

import pytest
from fastapi.encoders import jsonable_encoder

from agent_memory.interfaces.http import context_json
from agent_memory.interfaces.wire import plain
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

AT = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def old(value: Any) -> Any:
    """What the routes wrote before: FastAPI's encoder over `asdict`."""
    return jsonable_encoder(asdict(value))


def test_plain_takes_the_models_value_kinds_as_jsonable_encoder_does() -> None:
    class Colour(StrEnum):
        RED = "red"

    class Size(Enum):
        BIG = 3

    @dataclass
    class Inner:
        at: datetime
        day: date
        where: Path

    @dataclass
    class Outer:
        name: str
        colour: Colour
        size: Size
        inner: Inner
        items: tuple[Inner, ...]
        tags: frozenset[str]
        table: dict[str, float]
        nothing: None = None

    value = Outer(
        "x", Colour.RED, Size.BIG, Inner(AT, AT.date(), Path("a/b")), (Inner(AT, AT.date(), Path("c")),),
        frozenset({"t"}), {"k": 0.5},
    )  # fmt: skip
    assert plain(value) == old(value)
    assert json.dumps(plain(value)) == json.dumps(old(value))


def test_plain_refuses_what_the_api_never_writes_naming_its_type() -> None:
    with pytest.raises(TypeError, match="bytes is not a JSON value"):
        plain({"blob": b"\x00"})
    with pytest.raises(TypeError, match="object is not a JSON value"):
        plain([object()])


async def test_every_model_the_api_sends_is_written_as_before(manager: MemoryManager) -> None:
    turns = [
        TurnInput(
            session_id="s1", turn_number=i, role="user", content=text, at=AT.replace(minute=i)
        )
        for i, text in enumerate(
            [
                "My sister Dana moved to Lisbon in May 2024 and works as a nurse there.",
                "We chose PostgreSQL over MySQL for the billing service because of row-level security.",
                "Remember that the deploy key lives in vault at secret/deploy and rotates every 90 days.",
            ]
        )
    ]  # fmt: skip
    processed = await manager.process_turns(turns)
    memory = await manager.get(processed[0].memory_id or "", original=True)
    assert plain(memory) == old(memory) and memory.original

    results = await manager.retrieve("Where does Dana live?", k=3)
    assert results and all(plain(r.memory) == old(r.memory) for r in results)
    assert all(plain(r.layers) == jsonable_encoder({n: asdict(h) for n, h in r.layers.items()}) for r in results)

    context = await manager.context("Where does Dana work?", budget_tokens=400)
    fact = await manager.remember_fact("Dana", "city", "Lisbon", valid_at=AT)
    context = await manager.context("Where does Dana work?", budget_tokens=400)
    assert context.items and context.facts
    assert plain(list(context.excluded)) == [asdict(e) for e in context.excluded]
    assert plain(list(context.facts)) == jsonable_encoder([asdict(f) for f in context.facts])
    assert plain(fact) == old(fact)
    json.dumps(context_json(context))  # JSON throughout

    decisions = await manager.observe_facts([p.turn_id for p in processed])
    assert all(plain(d) == old(d) for d in decisions)
    updated = await manager.update(memory.memory_id, "My sister Dana moved to Porto.", expected_revision=1)
    assert plain(updated) == old(updated)
    history = await manager.history(memory.memory_id)
    assert history and all(plain(r) == old(r) for r in history)

    note = await manager.notes.write("Chose Redis streams for the job queue.", kind="decision", tags=["queue"])
    handoff = await manager.notes.handoff("Queue wired", ["load test it"], ["the dev Redis is shared"])
    assert plain(note) == old(note) and plain(handoff) == old(handoff)
    page = await manager.notes.list_notes(limit=5)
    assert page.notes and all(plain(n) == old(n) for n in page.notes)
    boot = await manager.notes.boot("queue work")
    assert plain(boot) == old(boot)

    report = await manager.doctor()
    assert plain(report) == old(report)
