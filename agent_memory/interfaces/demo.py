"""`agent-memory demo`: a sample conversation goes in, questions come out, and a reopen proves nothing was lost."""

from __future__ import annotations

import tempfile
import textwrap
import time
from itertools import groupby
from pathlib import Path

from agent_memory.bench.datasets import read_jsonl
from agent_memory.config import Config
from agent_memory.interfaces.cli import format_result
from agent_memory.manager import MemoryManager

QUESTIONS = [
    ("How early is too early for a meeting?", None),
    ("Where does she live now?", None),
    ("What happened to the dog?", {"valence": -0.8, "arousal": 0.9}),
    ("What was her 10k race time?", None),
    ("Which flight is she taking to London?", None),
]


def default_conversation() -> Path:
    for base in (Path(__file__).resolve().parents[2], Path.cwd()):
        candidate = base / "data" / "sample_conversation.jsonl"
        if candidate.exists():
            return candidate
    raise FileNotFoundError("data/sample_conversation.jsonl not found; pass --data FILE")


async def run_demo(conversation: Path | None, *, data_dir: Path | None, config: Config) -> int:
    path = conversation or default_conversation()
    directory = data_dir or Path(tempfile.mkdtemp(prefix="agent-memory-demo-"))
    config = config.model_copy(update={"data_dir": directory})
    turns = list(read_jsonl(path))
    print(f"agent-memory demo: {len(turns)} turns from {path.name} into {directory}")
    print("Every turn is logged. The save decision keeps a turn as a memory when it is worth it (names, dates,")
    print("facts, plans, preferences, emotion, novelty, a reply to a question) and drops greetings, reactions and")
    print("boilerplate; each line says which, and why. A kept memory is shown with its type and the entities in")
    print("brackets, which become MENTIONS edges in the graph.\n")
    async with MemoryManager.open(config) as manager:
        started = time.perf_counter()
        for session_id, group in groupby(turns, key=lambda t: t.session_id):
            session = list(group)
            results = await manager.process_turns(session)
            print(f"== session {session_id} ({len(session)} turns)")
            for turn, result in zip(session, results, strict=True):
                mark = "kept   " if result.saved else "skipped"
                text = textwrap.shorten(str(turn.content), 70, placeholder="...")
                print(f"  {mark} {turn.role:<9} {text}")
                print(f"          why: {result.reason}")
                if result.memory_id is not None:
                    memory = await manager.get(result.memory_id)
                    print(f"          {memory.memory_type.value} [{', '.join(memory.entities)}]")
        await manager.flush()
        elapsed = time.perf_counter() - started
        before = await manager.stats()
        print(f"\ningested in {elapsed:.1f} s: {_summary(before)}\n")
        for question, mood in QUESTIONS:
            print(f"Q: {question}" + (f"  (asked with emotional context {mood})" if mood else ""))
            for hit in await manager.retrieve(question, k=3, emotional_context=mood):
                print(textwrap.indent(format_result(hit), "  "))
            print()
    print("closed the store; reopening it ...")
    async with MemoryManager.open(config) as manager:
        after = await manager.stats()
        report = await manager.doctor()
        first = await manager.retrieve(QUESTIONS[1][0], k=1)
    print(f"after reopen: {_summary(after)}")
    print(
        f"doctor: {'consistent' if report.consistent else 'INCONSISTENT'}; "
        f"top answer to {QUESTIONS[1][0]!r}: {first[0].memory.content if first else 'none'}"
    )
    same = before["records"]["turns"] == after["records"]["turns"] and _memories(before) == _memories(after)
    print("nothing lost." if same and report.consistent else "MISMATCH after reopen.")
    return 0 if same and report.consistent else 1


def _memories(stats: dict[str, object]) -> tuple[object, ...]:
    records = stats["records"]
    assert isinstance(records, dict)
    return records["memories"], stats["vectors"], stats["graph"]


def _summary(stats: dict[str, object]) -> str:
    records = stats["records"]
    assert isinstance(records, dict)
    graph = stats["graph"]
    assert isinstance(graph, dict)
    return (
        f"{records['turns']} turns logged ({stats['log_bytes']} bytes), {records['memories']} memories, "
        f"{records['sessions']} sessions, graph {graph.get('Entity', 0)} entities / "
        f"{graph.get('MENTIONS', 0)} mentions, {stats['vectors']} vectors"
    )
