"""`agent-memory reembed`: move a store to the configured text model, in place (reembed.py).

It owns the store while it works, so no daemon may run on it (the owner lock says which one does). It stages every
new vector, resumably; sets the vector store aside (a projection of SQLite); swaps the vectors in one transaction;
and opens the store once with the new model, which rebuilds the vector store from SQLite at the new size.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_memory.config import Config
from agent_memory.errors import ConfigError

if TYPE_CHECKING:  # the CLI imports no engine until a command needs one (tests/test_light_faces.py)
    from agent_memory.embeddings.text import Embedder

Say = Callable[[str], None]


async def cmd_reembed(config: Config, args: argparse.Namespace) -> int:
    report = await reembed_store(config, say=lambda line: print(line, file=sys.stderr, flush=True))
    if report["done"]:
        print(
            f"re-embedded {report['memories']} memories, {report['gaps']} gap questions and {report['topics']} digest "
            f"topics with {report['model']} ({report['dimension']} dimensions, was {report['was']}); "
            f"{report['indexed']} text vectors indexed"
        )
    else:
        print(f"the store's {report['memories']} text vectors are already {report['model']}'s: nothing to do")
    return 0


async def reembed_store(
    config: Config, *, say: Say = print, limit: int | None = None, embedder: Embedder | None = None
) -> dict[str, Any]:
    """Every text vector of the store in `config.data_dir` made again by `config`'s text model (`embedder`, when
    given, is that model, and stays open). With `limit`, stop after staging that many (what an interruption
    leaves: the next run resumes). Returns what was done."""
    if config.vectors.url:
        raise ConfigError(
            "reembed rebuilds the vector store from SQLite in the data directory; a store whose vectors live on a "
            f"Qdrant server ({config.vectors.url}) is not re-embedded in place: make a new store for the new model"
        )
    data_dir = config.data_dir
    if not (data_dir / "memory.db").is_file():
        raise ConfigError(f"No store in {data_dir} (no memory.db): nothing to re-embed")
    from agent_memory.engines import make_embedder
    from agent_memory.manager import MemoryManager
    from agent_memory.storage.outbox import TEXT

    model = embedder or make_embedder(config)
    try:
        await model.load()  # a model of another size than embedding.dimension is refused here
        report = await _reembed(config, model, say, limit)
        if report["done"]:
            async with MemoryManager.open(config, embedder=model) as manager:  # the vectors rebuilt at the new size
                report["indexed"] = await manager.vectors.count(TEXT)
        return report
    finally:
        if embedder is None:
            await model.aclose()


async def _reembed(config: Config, embedder: Embedder, say: Say, limit: int | None) -> dict[str, Any]:
    """Stage, set the vector store aside and swap, holding the store's owner lock throughout."""
    from agent_memory.reembed import Reembedder
    from agent_memory.storage.journal import JsonlJournal
    from agent_memory.storage.lock import OwnerLock
    from agent_memory.storage.records import SqliteRecords

    data_dir = config.data_dir
    lock = OwnerLock(data_dir / "owner.lock")
    await asyncio.to_thread(lock.acquire)  # StoreLocked, naming the daemon, while one runs on this store
    try:
        async with AsyncExitStack() as stack:
            journal = await JsonlJournal.open(
                data_dir / "logs", fsync=False, segment_max_bytes=config.journal.segment_max_bytes
            )
            stack.push_async_callback(journal.aclose)
            records = await SqliteRecords.open(data_dir / "memory.db")
            stack.push_async_callback(records.aclose)
            was = await records.text_vector_size()
            if await records.vector_models() == {embedder.name} and was == config.embedding.dimension:
                return {"done": False, "memories": len(await records.vector_sources()), "model": embedder.name}
            reembedder = Reembedder(records, journal, embedder, config.embedding)
            staged = await reembedder.stage(limit=limit, progress=_progress(say))
            if staged.left:
                say(f"stopped with {staged.left} of {staged.memories} memories left; run reembed again to go on")
                return {"done": False, "memories": staged.memories, "model": staged.model, "left": staged.left}
            await asyncio.to_thread(_set_aside, data_dir / "vectors")
            swapped = await reembedder.swap()
    finally:
        lock.release()
    return {
        "done": True,
        "memories": swapped.memories,
        "gaps": swapped.gaps,
        "topics": swapped.topics,
        "model": swapped.model,
        "dimension": config.embedding.dimension,
        "was": was,
    }


def _progress(say: Say) -> Callable[[int, int], None]:
    started = time.monotonic()

    def report(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-9)
        left = (total - done) / rate if rate else 0.0
        say(f"embedded {done} of {total} memories ({rate:.0f}/s, about {left:.0f} s left)")

    return report


def _set_aside(vectors: Path) -> None:
    """Remove the vector store: it holds the old model's vectors, and SQLite rebuilds it. Renamed first, so a crash
    while it is deleted leaves no half store where the next open looks."""
    if not vectors.exists():
        return
    old = vectors.with_name(vectors.name + ".reembedded")
    if old.exists():
        shutil.rmtree(old)
    vectors.rename(old)
    shutil.rmtree(old)
