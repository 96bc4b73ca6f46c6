"""The sleep job `compress` (issue #20, section 3): a cold memory's stored text cut to its salient sentences within
`sleep.compress_tokens` (cognition/compress.py). The log keeps every word, and `get(memory_id, original=True)`
reads them back.

Each cut is a revision like `update`'s (agent "sleep", reason "compress"): the memory's vector is re-embedded from
the cut words, its entities and keywords derived again, and the vectors, the graph, FTS5 and the keyword
projection follow through the outbox, in the same transaction. The revision it replaces is kept without its words
(storage/revision_records.LOGGED): they are the turn's, in the log, and SQLite does not hold them twice. So an agent
that read the memory before holds a stale revision and gets RevisionConflict, as after any change.

What it takes: active turn memories (generation 0, text) in the cold tier (`sleep.compress_tier`) of turns said at
least `sleep.compress_after` ago, longer than the cap, whose words are still their turn's: never a digest or a
merge (their lineage is their sources'), never a memory kept by the fast path (an intense or startling turn keeps
its words, as it is never compacted), never one an agent updated (its words are no longer the log's), and never
one compressed before (that was an update too), so a second run changes nothing. `dry_run` cuts and counts and
writes nothing.

A cut memory keeps its turn's logged length (`logged_chars`, migration 0032): retrieval judges whether a turn is
short enough to lean on its neighbours by it, not by the cut. A run first gives memories cut before that migration
theirs, reading their turns back from the log (`count_logged`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_memory.cognition.compress import Cut, salient_cut
from agent_memory.cognition.tokens import TokenCounter
from agent_memory.config import SleepConfig
from agent_memory.errors import StorageError
from agent_memory.models import LogPosition, LogRecord, Tier
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.revision_records import CompressibleRow, NewText
from agent_memory.validation import check_count, check_identifier

if TYPE_CHECKING:
    from agent_memory.manager import MemoryManager

AGENT, REASON = "sleep", "compress"
EMBED_CHUNK = 64
"""Cut memories per call to the embedder and per transaction: a turn arriving meanwhile waits for one chunk."""
MIN_SAVING = 0.2
"""A cut that keeps more than 1 - this of a memory's tokens is not worth a revision and a new vector: left as it is."""
Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]


@dataclass(frozen=True, slots=True)
class Planned:
    row: CompressibleRow
    cut: Cut
    tokens_before: int
    tokens_after: int


class Compressor:
    """Finds the memories compression takes and stores each one's cut as a revision."""

    def __init__(
        self,
        records: SqliteRecords,
        *,
        embed: Embed,
        embedding_model: str,
        keywords: Callable[[str], Sequence[str]],
        entities: Callable[[str], Sequence[str]],
        counter: TokenCounter,
        config: SleepConfig,
        notify: Callable[[], None],
        read: Callable[[LogPosition], Awaitable[LogRecord]],
    ) -> None:
        self._records, self._embed, self._model, self._read = records, embed, embedding_model, read
        self._keywords, self._entities, self._counter = keywords, entities, counter
        self._config, self._notify = config, notify

    async def run(
        self, now: datetime, *, cap: int | None = None, namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Cut every memory the policy takes, a page at a time, starting no chunk that would end past
        `sleep.compress_budget` (judged by the chunk before; `deferred` then, and the next run goes on: what is cut
        is not read again); returns what it read, cut and saved."""
        cap = self._config.compress_tokens if cap is None else check_count("cap", cap, low=0, high=1 << 20)
        if namespace is not None:
            check_identifier("namespace", namespace)
        counts: dict[str, Any] = {"read": 0, "compressed": 0, "tokens_before": 0, "tokens_after": 0}
        counts |= {"deferred": False, "cap": cap, "dry_run": dry_run}
        counts |= {"lengths_kept": 0, "lengths_unreadable": 0} if dry_run else await self.count_logged()
        deadline = time.monotonic() + self._config.compress_budget.total_seconds()
        last: float | None = None  # seconds the chunk before took; a run cuts one chunk at least
        after = 0
        while cap and (page := await self._page(now, cap, namespace, after)):
            after = page[-1].rowid
            planned = await asyncio.to_thread(self._plan, page, cap)
            counts["read"] += len(page)
            for start in range(0, len(planned), EMBED_CHUNK):
                if last is not None and time.monotonic() + last > deadline:
                    counts["deferred"] = True
                    break
                chunk, began = planned[start : start + EMBED_CHUNK], time.monotonic()
                stored = {p.row.memory_id for p in chunk} if dry_run else await self._store(chunk, now)
                _add(counts, [p for p in chunk if p.row.memory_id in stored])
                last = time.monotonic() - began
            if counts["deferred"]:
                break
        if counts["compressed"] and not dry_run:
            self._notify()
        return counts

    async def count_logged(self) -> dict[str, int]:
        """Give each memory cut before its logged length was kept (migration 0032) that length, read from its turn
        in the log; a turn the log cannot give back is counted and left (its memory is judged by its cut words)."""
        kept = unreadable = after = 0
        while page := await self._records.uncounted_cuts(after_rowid=after, limit=self._config.page_size):
            after, lengths = page[-1][0], {}
            for _, memory_id, position in page:
                try:
                    lengths[memory_id] = len((await self._read(position)).content)
                except StorageError:
                    unreadable += 1
            await self._records.set_logged_chars(lengths)
            kept += len(lengths)
        return {"lengths_kept": kept, "lengths_unreadable": unreadable}

    async def _page(self, now: datetime, cap: int, namespace: str | None, after: int) -> list[CompressibleRow]:
        tiers = [Tier.COLD.value] + ([Tier.WARM.value] if self._config.compress_tier == Tier.WARM.value else [])
        return await self._records.compressible(
            namespace=namespace,
            tiers=tiers,
            said_before=now - self._config.compress_after,
            min_chars=cap,  # a text of no more characters than the cap is within it (a token is a character or more)
            after_rowid=after,
            limit=self._config.page_size,
        )

    def _plan(self, page: Sequence[CompressibleRow], cap: int) -> list[Planned]:
        """The cuts worth making (on a worker thread: it is pure Python over a page of texts)."""
        planned = []
        for row in page:
            keywords = row.keywords or tuple(self._keywords(row.content))
            cut = salient_cut(
                row.content, cap=cap, count=self._counter.count, keywords=keywords, entities=self._entities(row.content)
            )
            if cut is None:
                continue
            before, after = self._counter.count(row.content), self._counter.count(cut.text)
            if after <= before * (1 - MIN_SAVING):
                planned.append(Planned(row, cut, before, after))
        return planned

    async def _store(self, chunk: Sequence[Planned], now: datetime) -> set[str]:
        vectors = await self._embed([p.cut.text for p in chunk])
        cuts = [
            (p.row.memory_id, p.row.revision, self._text(p.cut.text, vector))
            for p, vector in zip(chunk, vectors, strict=True)
        ]
        return set(await self._records.compress_many(cuts, at=now, agent=AGENT, reason=REASON))

    def _text(self, content: str, vector: np.ndarray) -> NewText:
        blob = np.asarray(vector, dtype="<f4").tobytes()
        return NewText(content, blob, self._model, tuple(self._entities(content)))


def _add(counts: dict[str, Any], done: Sequence[Planned]) -> None:
    counts["compressed"] += len(done)
    counts["tokens_before"] += sum(p.tokens_before for p in done)
    counts["tokens_after"] += sum(p.tokens_after for p in done)


async def run_compress(
    manager: MemoryManager,
    now: datetime,
    *,
    cap: int | None = None,
    namespace: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """The job: a Compressor over the manager's parts, run once (options left None come from `sleep.compress_*`)."""
    compressor = Compressor(
        manager.records,
        embed=manager.embedder.embed,
        embedding_model=manager.embedder.name,
        keywords=manager.extractor.keywords,
        entities=manager.extractor.entities,
        counter=manager.token_counter,
        config=manager.config.sleep,
        notify=manager.projector.notify,
        read=manager.journal.read,
    )
    return await compressor.run(now, cap=cap, namespace=namespace, dry_run=dry_run)
