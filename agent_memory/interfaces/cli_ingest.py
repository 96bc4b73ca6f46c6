"""`agent-memory ingest FILE`: a conversation history into the store, in batches, resumable, with progress.

- **Its format** is told from the file unless `--format` names it (bench/datasets.py, `detect_format`): JSONL, or a
  JSON list known by its first item's keys (a ChatGPT or Claude export, as its zip or its conversations.json;
  LoCoMo; LongMemEval).
- **Checked first.** The file is read once and checked whole before a turn is written (a bad turn anywhere means
  nothing is written), then read again to ingest: both passes stream it, a line at a time for JSONL, so memory
  holds one batch of turns and one key per turn for the duplicate check (about 100 bytes a turn), never the
  file's text. A format that is one JSON list (a ChatGPT or Claude export, LoCoMo, LongMemEval) is read an item
  at a time (json_stream.py): a conversation or a question in memory, not the document.
- **Resumable.** A turn the store already has, by (namespace, session, turn number), is skipped, so running the
  same command again after an interruption (Ctrl-C, a crash, `--limit`) writes only what is missing, and a batch
  is all or nothing (one transaction), so no turn is half there. `--no-resume` refuses a stored turn instead, as an
  error; `--skip N` still starts at the file's turn N+1.
- **Long turns.** A turn over `max_content_bytes`, up to `max_turn_bytes`, is logged whole and remembered in chunks
  (long_turns.py); the summary counts them. Over `max_turn_bytes` the check refuses the file.
- **Progress** on stderr: a tqdm bar on a terminal; otherwise a line after the first batch and every 10 s (turns
  done, turns/s of the turns written, ETA), so a log file shows it too.
- **The next batch is embedded while this one commits** (`prepare_turns(..., bulk=True)`, by the import's model):
  the save decision, SQLite and the projections of one batch overlap the model's passes over the next: +5% on
  LoCoMo dev and on LongMemEval's turns, alternated (docs/benchmarks.md). A batch over MAX_PREPARED_TEXTS turns is
  not prepared.
- **Digests at the end.** Opened here (no daemon), the store is closed when the command ends, so the digests an
  idle store makes of an import (`sleep.digest_idle_min` memories waiting or more: sleep/digests.py) are made
  before it does, and a line on stdout says what they were; through a daemon, the daemon makes them once idle.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from itertools import islice
from typing import Any, Protocol

from agent_memory.config import Config
from agent_memory.errors import AgentMemoryError, DuplicateTurn, InvalidInput
from agent_memory.interfaces.routing import LocalStore, Processed, Store, open_store
from agent_memory.models import TurnInput, utc_now
from agent_memory.validation import MAX_PREPARED_TEXTS, check_turn

READ_AS = {
    "chatgpt": "a ChatGPT export",
    "claude": "a Claude export",
    "locomo": "LoCoMo conversations",
    "longmemeval": "LongMemEval questions",
}
PROGRESS_EVERY = 10.0
"""Seconds between two progress lines when stderr is not a terminal."""


def _duplicate(exc: InvalidInput) -> bool:
    """A turn the store already holds: DuplicateTurn from the manager, or from the daemon (its code)."""
    return isinstance(exc, DuplicateTurn) or exc.code == "duplicate_turn"


@dataclass
class Tally:
    written: int = 0
    saved: int = 0
    skipped: int = 0
    long_turns: int = 0
    chunks: int = 0
    writing: float = 0.0
    """Wall seconds of the batches that wrote turns, each from the end of the one before it, so a batch's wait for
    its embeddings (made ahead, while the batch before was written) counts: the rate and the ETA are of those."""
    mark: float = 0.0
    """When the last batch ended (or the first began)."""
    skipping: bool = False
    """The last batch held turns the store had: a resumed import is still passing over what it wrote before (so
    its next batches are not embedded ahead: they may be stored too)."""

    def add(self, results: Sequence[Processed]) -> None:
        self.written += len(results)
        self.saved += sum(r.saved for r in results)
        split = [r.chunks for r in results if r.chunks]
        self.long_turns, self.chunks = self.long_turns + len(split), self.chunks + sum(split)

    def begin(self, now: float) -> None:
        self.mark = now

    def batch_ended(self, now: float, *, wrote: bool) -> None:
        """A batch ended at `now`: its time since the last one ended counts if it wrote turns (a resumed import's
        batches of stored turns pass quickly, and would make the rate a lie)."""
        if wrote:
            self.writing += now - self.mark
        self.mark = now

    @property
    def rate(self) -> float:
        return self.written / self.writing if self.writing > 0 else 0.0


async def cmd_ingest(config: Config, args: argparse.Namespace) -> int:
    if args.format == "auto":
        from agent_memory.bench.datasets import detect_format

        args.format = await asyncio.to_thread(detect_format, args.file)
        detected = args.format
    else:
        detected = None
    count = await asyncio.to_thread(check_input, config, args)
    if detected in READ_AS:  # said once the file is known good: a refused one gets its one line of error
        sys.stderr.write(f"ingest: {args.file.name} is read as {READ_AS[detected]}\n")
    tally, started = Tally(), time.perf_counter()
    resume = not getattr(args, "no_resume", False)
    async with open_store(config) as store:
        with Progress(count, sys.stderr) as progress:
            turns = input_turns(args)
            batches = iter(lambda: list(islice(turns, args.batch)), [])
            ahead = prepared_ahead(store, batches, wanted=lambda: not tally.skipping)
            tally.begin(time.perf_counter())
            async with contextlib.aclosing(ahead) as ready:
                async for batch in ready:
                    written = tally.written
                    try:
                        await _ingest_batch(store, batch, tally, resume=resume)
                    except AgentMemoryError as exc:
                        done = tally.written + tally.skipped
                        exc.args = (_stopped_at(exc, args, done, len(batch), resume=resume),)
                        raise
                    tally.batch_ended(time.perf_counter(), wrote=tally.written > written)
                    progress.update(len(batch), tally)
        sys.stdout.write(summary(tally, config, time.perf_counter() - started) + "\n")
        if isinstance(store, LocalStore):  # a daemon digests the import once it is idle; this process ends now
            sys.stdout.write(await _digested(store))
    return 0


async def _digested(store: LocalStore) -> str:
    """The digests an idle store would make of the import (sleep/digests.py), made before the process ends, and a
    line that says what they were; nothing under `sleep.digest_idle_min` memories waiting (or with the idle digests
    off): the digest job gathers those (`memories_to_digest` in `stats` counts them)."""
    digests, started = store.manager.digests, time.perf_counter()
    waiting = await digests.left()
    sleep = store.manager.config.sleep
    if waiting < sleep.digest_idle_min or not sleep.digest_idle_delay:
        return ""
    sys.stderr.write(f"ingest: gathering the statements of {waiting} memories into digests\n")
    counts = await digests.catch_up()
    return (
        f"digests: {counts['digests_new']} new and {counts['digests_rewritten']} rewritten from "
        f"{counts['statements']} statements in {counts['memories_read']} memories, "
        f"in {time.perf_counter() - started:.1f} s\n"
    )


class Prepares(Protocol):
    async def prepare_turns(self, texts: Sequence[str], *, bulk: bool = False) -> None: ...


async def prepared_ahead(
    store: Prepares,
    batches: Iterator[list[TurnInput]],
    *,
    wanted: Callable[[], bool] = lambda: True,
    bulk: bool = True,
) -> AsyncGenerator[list[TurnInput], None]:
    """Each batch once its texts are embedded by the import's model (`prepare_turns(..., bulk=True)`; `bulk=False`:
    by the model of live turns, for batches sent without `bulk`) and the next batch's are on their way: what the
    caller does with one batch (the save decision, SQLite, the projections) overlaps the model's passes over the
    next. The next batch is prepared only while `wanted()` (not while a resumed import passes over turns the store
    has), and not over MAX_PREPARED_TEXTS texts: then its turns embed it. Closing the generator stops a preparation
    under way. Each batch is read from `batches` on a worker thread: decoding a file (a large conversation of an
    export) never holds the event loop."""
    empty: list[TurnInput] = []
    batch = await asyncio.to_thread(next, batches, empty)
    ready = _prepare(store, batch, bulk=bulk) if wanted() else None
    try:
        while batch:
            following = await asyncio.to_thread(next, batches, empty)
            if ready is not None:
                await ready  # this batch's vectors: its turns find them, and the model is free for the next
            ready = _prepare(store, following, bulk=bulk) if wanted() else None
            yield batch
            batch = following
    finally:
        if ready is not None:
            ready.cancel()


def _prepare(store: Prepares, batch: Sequence[TurnInput], *, bulk: bool) -> asyncio.Task[None] | None:
    texts = [t.content for t in batch if isinstance(t.content, str)]
    if not texts or len(texts) > MAX_PREPARED_TEXTS:
        return None
    return asyncio.ensure_future(store.prepare_turns(texts, bulk=bulk))


async def _ingest_batch(store: Store, batch: list[TurnInput], tally: Tally, *, resume: bool) -> None:
    """One transaction for the batch's new turns. Resuming, the stored ones are left out first (asked of the
    store opened here; through a daemon a batch refused for one is sent again a turn at a time)."""
    skipped = tally.skipped
    try:
        await _write_new(store, batch, tally, resume=resume)
    finally:
        tally.skipping = tally.skipped > skipped


async def _write_new(store: Store, batch: list[TurnInput], tally: Tally, *, resume: bool) -> None:
    if resume and isinstance(store, LocalStore):
        keys = [(t.namespace, t.session_id, t.turn_number) for t in batch]
        stored = await store.manager.records.stored_turns(keys)  # one query for the batch
        fresh = [t for t, key in zip(batch, keys, strict=True) if key not in stored]
        tally.skipped += len(batch) - len(fresh)
        batch = fresh
    if not batch:
        return
    try:
        results = await store.process_turns(batch, bulk=True)
    except InvalidInput as exc:
        if not resume or not _duplicate(exc):
            raise
        await _one_at_a_time(store, batch, tally)
        return
    tally.add(results)


async def _one_at_a_time(store: Store, batch: Sequence[TurnInput], tally: Tally) -> None:
    for turn in batch:
        try:
            results = await store.process_turns([turn], bulk=True)
        except InvalidInput as exc:
            if not _duplicate(exc):
                raise
            tally.skipped += 1
            continue
        tally.add(results)


def summary(tally: Tally, config: Config, seconds: float) -> str:
    """The closing line. An import's memories are embedded by `embedding.import_precision` (a daemon's own
    configuration decides for the turns it takes); the line says when that is int8, to be upgraded."""
    line = f"ingested {tally.written} turns, {tally.saved} kept as memories, into {config.data_dir}"
    notes = []
    embedding = config.embedding
    if tally.saved and embedding.backend == "onnx" and embedding.import_precision != embedding.document_precision:
        later = "made again in float32 while the store is idle" if embedding.upgrade_vectors else "left as they are"
        notes.append(f"embedded by the {embedding.import_precision} model, {later}")
    if tally.skipped:
        notes.append(f"{tally.skipped} already stored, skipped")
    if tally.long_turns:
        noun = "long turn" if tally.long_turns == 1 else "long turns"
        notes.append(f"{tally.long_turns} {noun} split into {tally.chunks} chunks")
    line += f" ({'; '.join(notes)})" if notes else ""
    return line + f" in {seconds:.1f} s ({tally.rate:.1f} turns/s while writing)"


class Writes(Protocol):
    """Where Progress writes: stderr, or anything with its three methods (the benchmark harness's progress lines)."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...

    def isatty(self) -> bool: ...


class Progress:
    """Turns done, turns/s and the ETA, on stderr: tqdm's bar on a terminal, plain lines otherwise."""

    def __init__(self, total: int, out: Writes, *, every: float = PROGRESS_EVERY) -> None:
        self.total, self.out, self.every, self.done = total, out, every, 0
        self._last: float | None = None
        self._bar: Any = None
        if out.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="turn", desc="ingest", file=out)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def update(self, turns: int, tally: Tally) -> None:
        self.done += turns
        if self._bar is not None:
            self._bar.update(turns)
            return
        now = time.monotonic()
        if self._last is None or now - self._last >= self.every or self.done >= self.total:
            self._last = now
            self.out.write(self.line(tally) + "\n")
            self.out.flush()

    def line(self, tally: Tally) -> str:
        left = max(self.total - self.done, 0)
        eta = timedelta(seconds=round(left / tally.rate)) if tally.rate > 0 else None
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        return (
            f"ingest: {self.done}/{self.total} turns{share}, {tally.rate:.1f} turns/s, "
            f"ETA {eta if eta is not None else 'unknown'}"
        )


def input_turns(args: argparse.Namespace) -> Iterator[TurnInput]:
    from agent_memory.bench.datasets import READERS

    stop = args.skip + args.limit if args.limit else None
    turns = islice(READERS[args.format](args.file), args.skip, stop)
    return (replace(t, namespace=args.namespace) for t in turns) if args.namespace else turns


def check_input(config: Config, args: argparse.Namespace) -> int:
    """How many turns the file gives; InvalidInput for the first that is unreadable, invalid (over
    `max_turn_bytes` included) or given twice."""
    now = utc_now()
    first_at: dict[tuple[str, str, int], int] = {}
    try:
        for number, turn in enumerate(input_turns(args), args.skip + 1):
            key = (turn.namespace, turn.session_id, turn.turn_number)
            try:
                check_turn(turn, max_bytes=config.max_turn_bytes, now=now)
                if key in first_at:
                    raise InvalidInput(
                        f"turn_number {key[2]} of session {key[1]!r} in namespace {key[0]!r} is already turn "
                        f"{first_at[key]} of the file"
                    )
            except InvalidInput as exc:
                exc.args = (f"turn {number} of {args.file.name}: {exc}",)
                raise
            first_at[key] = number
    except InvalidInput as exc:
        if first_at:  # a turn after good ones: say that those were not written either
            exc.args = (f"{exc}; nothing was ingested (the whole file is checked before a turn is written)",)
        raise
    return len(first_at)


def _stopped_at(exc: AgentMemoryError, args: argparse.Namespace, done: int, size: int, *, resume: bool) -> str:
    """What a refused batch says when earlier batches were committed (or found stored): which turns it held, and
    how to go on: the same command again when resuming, else `--skip`."""
    if not done:
        return str(exc)  # nothing of this run was written
    first = args.skip + done + 1
    held = f"turn {first}" if size == 1 else f"turns {first}-{first + size - 1}"
    if resume:
        went = f"turns {args.skip + 1}-{first - 1} were committed or already stored before them"
        return f"{held} of {args.file.name}: {exc}; {went}: fix the file, then run the same command again"
    went = f"turns {args.skip + 1}-{first - 1} were committed before them"
    return f"{held} of {args.file.name}: {exc}; {went}: fix the file, then resume with --skip {first - 1}"
