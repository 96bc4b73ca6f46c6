"""`agent-memory export policy`: the labelled decisions as JSONL, one decision a line, for training a policy.

Save decisions come first (`"kind": "save"`), then retrievals (`"kind": "retrieval"`); the schema is in
docs/policy-export.md. Only labelled decisions unless asked for all. The file is written off the event loop, to a
temporary name renamed at the end, so a reader never sees half a file."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent_memory.storage.records import SqliteRecords

CHUNK = 1000


class _AtomicFile:
    def __init__(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        self.out = out
        fd, self.partial = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
        self.fh = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, lines: list[str]) -> None:
        self.fh.writelines(lines)

    def commit(self) -> None:
        self.fh.close()
        os.replace(self.partial, self.out)

    def discard(self) -> None:
        self.fh.close()
        Path(self.partial).unlink(missing_ok=True)


async def policy_lines(records: SqliteRecords, *, labelled_only: bool = True) -> AsyncIterator[tuple[str, list[str]]]:
    """The export's JSONL lines, in chunks of up to CHUNK: save decisions, then retrievals; each with its kind. The
    export job writes them to a file, the HTTP API streams them."""
    for kind, rows in (
        ("save", records.decision_rows(labelled_only=labelled_only)),
        ("retrieval", records.retrieval_rows(labelled_only=labelled_only)),
    ):
        async for chunk in _chunks(rows):
            yield kind, chunk


async def export_policy(records: SqliteRecords, out: Path, *, labelled_only: bool = True) -> dict[str, Any]:
    target = await asyncio.to_thread(_AtomicFile, out)
    counts = {"save": 0, "retrieval": 0}
    try:
        async for kind, chunk in policy_lines(records, labelled_only=labelled_only):
            await asyncio.to_thread(target.write, chunk)
            counts[kind] += len(chunk)
        await asyncio.to_thread(target.commit)
    except BaseException:
        await asyncio.to_thread(target.discard)
        raise
    return {**counts, "out": str(out), "labelled_only": labelled_only}


async def _chunks(rows: AsyncIterator[dict[str, Any]]) -> AsyncIterator[list[str]]:
    chunk: list[str] = []
    async for row in rows:
        chunk.append(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
