"""One long turn must not stop an import (issue #22): a turn over max_content_bytes is logged whole and remembered in
chunks, each findable; the turns around it are kept; over the hard cap every path refuses it; ingest resumes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_erase import raw_hits

from agent_memory import MemoryManager
from agent_memory.cognition.chunking import split_turn
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import ContentTooLarge, DuplicateTurn
from agent_memory.interfaces.cli import main
from agent_memory.models import TurnInput
from agent_memory.storage.outbox import TEXT

CREATURES = [
    "otter",
    "heron",
    "badger",
    "falcon",
    "walrus",
    "lynx",
    "beaver",
    "gecko",
    "moose",
    "ferret",
    "llama",
    "bison",
    "viper",
    "toucan",
    "squid",
    "marmot",
    "hyena",
    "koala",
    "pelican",
    "weasel",
]
THINGS = [
    "violin",
    "tractor",
    "lantern",
    "compass",
    "kettle",
    "telescope",
    "bicycle",
    "anchor",
    "quilt",
    "typewriter",
    "chisel",
    "harp",
    "canoe",
    "microscope",
    "saddle",
    "accordion",
    "furnace",
    "parachute",
    "trombone",
    "loom",
]
PLACES = [
    "Lisbon",
    "Nairobi",
    "Oslo",
    "Kyoto",
    "Lima",
    "Hanoi",
    "Quebec",
    "Tbilisi",
    "Perth",
    "Dakar",
    "Reykjavik",
    "Havana",
    "Bergen",
    "Cusco",
    "Tromso",
]


def codeword(i: int) -> str:
    """A word found in paragraph i only: letters, so FTS5 reads it as one token."""
    letters = "bcdfghjklmnpqrstvwxz"
    return "zq" + "".join(letters[(i // 20**k) % 20] for k in range(3)) + "vor"


def paragraph(i: int) -> str:
    """About 600 characters on a theme of its own (a creature, a thing, a place), with its codeword."""
    creature, thing, place = CREATURES[i % 20], THINGS[(i * 7 + i // 20) % 20], PLACES[(i * 3 + i // 15) % 15]
    return (
        f"Entry {i} of the field notebook, marked {codeword(i)}. In {place} a {creature} was seen dragging an old "
        f"{thing} along the harbour wall before sunrise. The keeper of the {thing} museum in {place} said the "
        f"{creature} had done this every spring for years, and nobody knew why it chose that {thing}. "
        f"Children from the {place} school drew the {creature} with its {thing}, and the drawings hang in the "
        f"town hall. A visiting scientist measured how far the {creature} carried the {thing}: about forty "
        f"metres, always towards the lighthouse."
    )


def long_text(size: int = 200_000) -> str:
    parts, total, i = [], 0, 0
    while total < size:
        parts.append(paragraph(i))
        total += len(parts[-1]) + 2
        i += 1
    return "\n\n".join(parts)


def around(long_turn: str) -> list[TurnInput]:
    """Three ordinary turns, the long one, three more: one session, one batch."""
    said = [
        "I adopted a grey cat named Pepper last week.",
        "Here is the whole field notebook I promised to paste:",
        "Tell me what you make of it.",
        "The notebook came from my grandmother's attic in Porto.",
        "She kept notes on animals all her life.",
        "Remind me to scan the photographs too.",
    ]
    turns = [TurnInput("notes", i, text, at=None) for i, text in enumerate(said[:3])]
    turns.append(TurnInput("notes", 3, long_turn))
    turns += [TurnInput("notes", 4 + i, text) for i, text in enumerate(said[3:])]
    return turns


def chunk_rows(config: Config) -> list[tuple[str, int, int, str]]:
    with sqlite3.connect(config.data_dir / "memory.db") as db:
        return db.execute(
            "SELECT c.memory_id, c.chunk, c.chunks, m.content FROM memory_chunks c "
            "JOIN memories m USING (memory_id) ORDER BY c.chunk"
        ).fetchall()


async def test_a_long_turn_amid_others_is_logged_whole_found_in_every_chunk_and_erased_whole(
    manager: MemoryManager, config: Config, embedder: Embedder
) -> None:
    text = long_text()
    assert len(text.encode()) > config.max_content_bytes  # the check can fail: it is a long turn

    results = await manager.process_turns(around(text))
    await manager.flush()

    assert len(results) == 7 and all(r.saved for r in results)
    long = results[3]
    assert long.chunks == len(split_turn(text, max_tokens=config.chunk_tokens)) > 200
    assert [r.chunks for i, r in enumerate(results) if i != 3] == [0] * 6
    assert "long turn" in long.reason and long.decision.policy == "long-turn"
    assert (await manager.read_turn(long.turn_id)).content == text  # logged whole: one record, every byte
    for i, result in enumerate(results):
        assert (await manager.read_turn(result.turn_id)).turn_number == i
    rows = chunk_rows(config)
    assert [r[0] for r in rows] == list(long.chunk_memory_ids) and {r[2] for r in rows} == {long.chunks}
    assert "".join(r[3] for r in rows).replace(" ", "") == "".join(text.split())  # every word once, in order
    stats = await manager.stats()
    assert stats["records"]["turns"] == 7 and stats["records"]["memories"] == 6 + long.chunks
    assert stats["vectors"]["text"] == 6 + long.chunks and stats["pending_outbox"] == 0

    paragraphs = text.split("\n\n")
    first = await manager.get(long.memory_id, original=True)
    assert first.source_turn_id == long.turn_id and first.original == text  # get leads to the turn
    by_content = {r[3]: r[0] for r in rows}
    for i, para in enumerate(paragraphs):  # one paragraph a chunk (under 640 chars, two over)
        memory_id = by_content[para]
        keyword = await manager.records.keyword_search("default", [codeword(i)], limit=3)
        assert [hit[0] for hit in keyword[:1]] == [memory_id], i
    with sqlite3.connect(config.data_dir / "memory.db") as db:
        stored = dict(db.execute("SELECT memory_id, embedding FROM memories"))
    for i, para in enumerate(paragraphs):  # each chunk embedded alone, in the vectors: its own vector finds it first
        vector = np.frombuffer(stored[by_content[para]], dtype="<f4")
        hits = await manager.vectors.search(TEXT, vector.tolist(), limit=1, where={"namespace": "default"})
        assert hits[0].memory_id == by_content[para] and hits[0].score > 0.99, i
    found = 0
    for i in range(0, len(paragraphs), 10):  # and a question in other words than the chunk's
        creature, thing, place = CREATURES[i % 20], THINGS[(i * 7 + i // 20) % 20], PLACES[(i * 3 + i // 15) % 15]
        query = await embedder.embed_query(f"Why does the {creature} in {place} drag a {thing} to the lighthouse?")
        hits = await manager.vectors.search(TEXT, query.tolist(), limit=5, where={"namespace": "default"})
        found += by_content[paragraphs[i]] in [h.memory_id for h in hits]
    assert found >= 0.8 * len(range(0, len(paragraphs), 10)), found

    context = await manager.context("why does the badger in Perth drag a furnace?", budget_tokens=2048)
    shown = [p for p in paragraphs if p in context.text]
    assert shown and len(shown) < len(paragraphs) // 4  # context() shows chunks, never the whole turn
    recalled = await manager.retrieve("Pepper the grey cat I adopted", k=3)
    assert recalled[0].memory.content.startswith("I adopted a grey cat")  # the turns around it are intact

    pieces = (codeword(3), codeword(117), "entry 57 of the field notebook")
    assert raw_hits(config.data_dir, pieces)  # the check can fail: the words are there before
    middle = long.chunk_memory_ids[len(long.chunk_memory_ids) // 2]
    plan = await manager.erase_plan(memory_ids=[middle])  # one chunk named: its turn and every sibling go
    assert set(plan.memory_ids) == set(long.chunk_memory_ids) and plan.turn_ids == (long.turn_id,)
    erased = await manager.erase(memory_ids=[middle], reason="pasted by mistake")
    assert erased.proof.hits == 0 and erased.proof.needles > 0
    assert raw_hits(config.data_dir, pieces) == [] and chunk_rows(config) == []
    stats = await manager.stats()
    assert stats["records"]["turns"] == 6 and stats["records"]["memories"] == 6
    assert (await manager.read_turn(results[4].turn_id)).content.startswith("The notebook came")


async def test_over_the_hard_cap_every_path_refuses_and_writes_nothing(config: Config, embedder: Embedder) -> None:
    small = config.model_copy(update={"max_content_bytes": 4000, "max_turn_bytes": 12_000})  # no 8 MiB string
    async with MemoryManager.open(small, embedder=embedder) as manager:
        with pytest.raises(ContentTooLarge, match="over max_turn_bytes=12000"):
            await manager.process_turn("s", 0, long_text(13_000))
        with pytest.raises(ContentTooLarge, match=r"turn #1: .*max_turn_bytes"):
            await manager.process_turns([TurnInput("s", 0, "fine"), TurnInput("s", 1, long_text(13_000))])
        stats = await manager.stats()
        assert stats["records"]["turns"] == 0 and stats["log_bytes"] == 0
        result = await manager.process_turn("s", 0, long_text(11_000))  # under the cap, over max_content_bytes
        assert result.chunks == len(split_turn(long_text(11_000), max_tokens=small.chunk_tokens)) > 10
        with pytest.raises(DuplicateTurn):  # a chunked turn is one turn: sent again, it is refused
            await manager.process_turn("s", 0, long_text(11_000))
        assert (await manager.stats())["records"]["memories"] == result.chunks


def test_split_turn_cuts_at_boundaries_and_keeps_every_character() -> None:
    log = "\n".join(f"2024-05-01T10:{i // 60:02d}:{i % 60:02d} worker-{i % 7} processed job {i} ok" for i in range(900))
    chunks = split_turn(log, max_tokens=200)
    assert all(len(c.text) <= 800 for c in chunks) and len(chunks) > 40
    assert all(c.text == log[c.start : c.end] for c in chunks)
    assert all(log[c.end] == "\n" for c in chunks[:-1])  # a log is cut at line ends
    assert "".join(log[a.end : b.start] for a, b in zip(chunks, chunks[1:], strict=False)).strip() == ""
    prose = " ".join(f"Sentence number {i} says something about item {i}." for i in range(400))
    assert all(c.text.endswith(".") for c in split_turn(prose, max_tokens=50))
    word = "x" * 1000
    assert [len(c.text) for c in split_turn(word, max_tokens=100)] == [400, 400, 200]
    assert split_turn("  \n\n ", max_tokens=10) == []


# ----- agent-memory ingest -----------------------------------------------------------------------------


def jsonl(path: Path, turns: Iterator[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    return path


def history() -> Iterator[dict[str, object]]:
    for session in range(3):
        for number in range(10):
            content = f"Session {session} turn {number}: I planted {number + 2} tomato seedlings on the balcony."
            if (session, number) == (1, 4):
                content = long_text(10_000)
            yield {"session_id": f"s{session}", "turn_number": number, "content": content}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_a_long_turn_is_chunked_and_a_rerun_resumes_without_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, source = str(tmp_path / "mem"), jsonl(tmp_path / "history.jsonl", history())
    settings = tmp_path / "small.toml"  # long from 8 KB: a 10 KB turn stands for a 70 KB one, at a seventh the time
    settings.write_text("max_content_bytes = 8000\n", encoding="utf-8")
    store = ("--data-dir", data, "--config", str(settings))
    code, out, err = run(capsys, *store, "ingest", str(source), "--batch", "8", "--limit", "17")
    assert code == 0 and "ingested 17 turns" in out and "1 long turn split into" in out, out
    assert "turns/s" in err and "ETA" in err, err  # the progress line, on stderr

    code, out, err = run(capsys, *store, "ingest", str(source), "--batch", "8")  # the rerun
    assert code == 0 and "ingested 13 turns" in out and "17 already stored, skipped" in out, out
    assert "long turn" not in out  # it was stored by the first run
    with sqlite3.connect(Path(data) / "memory.db") as db:
        keys = db.execute("SELECT session_id, turn_number FROM turns").fetchall()
        chunked = db.execute("SELECT count(DISTINCT turn_id) FROM memory_chunks").fetchone()[0]
    assert sorted(keys) == sorted((f"s{s}", n) for s in range(3) for n in range(10))  # all there, each once
    assert chunked == 1

    code, out, _ = run(capsys, *store, "ingest", str(source))
    assert code == 0 and "ingested 0 turns" in out and "30 already stored" in out
