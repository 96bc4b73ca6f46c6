"""Retrieval latency on real text: `retrieve(k=10)` on stores built from the dev conversations, not templates.

`python scripts/bench_retrieve.py --text real --sizes 10000,100000 --keep /tmp/latency-real` builds each store from
LoCoMo dev's turns, then LongMemEval dev's haystack turns (read where the user keeps them; nothing is copied),
repeated with dates shifted past the whole corpus's span and session ids prefixed by the copy, until the size is
reached. Every turn lands in one namespace, as one user's store would, through the real `process_turns` with the
shipped defaults (the save decision judges, so fewer memories than turns are kept). Then, as a running daemon
would have it: the idle work the ingest left is done (filling.do_idle_work: the context vectors, a no-op while
`embedding.context_vectors` is off, as shipped, and the digests of the memories waiting for them; stores built
before 2026-12-07's idle digests held none) and the `index` sleep job builds HNSW for every collection that holds
points (text, and context when on). The questions are LoCoMo dev's (200, evenly spread over its three
conversations), embedded by the real model at query time.

**Stored vectors are the real model's, each distinct text embedded once** (`CachingEmbedder`): a repeated turn
has the same words, so its vector is the same, and the model would take hours on two cores for 100k long turns.
This measures retrieval, not ingest; the cache lives in `--keep` beside the stores (0600), so the 100k store
reuses what the 10k one embedded. `--text both` also builds the synthetic store of latency.py at each size the
same way (context vectors caught up, both collections indexed), so the two kinds of text meet the same code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from hashlib import blake2b
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.bench import latency, perf
from agent_memory.bench.datasets import locomo_turns, longmemeval_turns
from agent_memory.bench.filling import do_idle_work, ingest
from agent_memory.bench.latency import Latency, PooledEmbedder
from agent_memory.bench.perf import percentile
from agent_memory.bench.questions import locomo_questions
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.sleep.jobs import run_job
from agent_memory.storage.private import make_private_file

log = logging.getLogger(__name__)
BEGIN, END = "<!-- bench-retrieve-real:begin -->", "<!-- bench-retrieve-real:end -->"
LAYERS = ("keyword", "grep", "embed", "semantic", "context", "time", "graph", "rank")  # Recalled.timings keys
LOCOMO = Path("../shared/data/locomo/locomo_dev.json")
LONGMEMEVAL = Path("../shared/data/longmemeval/longmemeval_s_dev.json.gz")
NAMESPACE, CHUNK, CACHE = "default", 2048, "embeddings.npz"


def real_turns(locomo: Path, longmemeval: Path, size: int) -> list[TurnInput]:
    """`size` turns: LoCoMo's, then LongMemEval's haystacks', then again with every date moved past the corpus's
    whole span and the session ids prefixed by the copy; one namespace. The original namespace (a conversation, a
    question's haystack) stays in the session id, so two haystacks' sessions of one name stay apart."""
    base = [*locomo_turns(locomo), *longmemeval_turns(longmemeval)]
    first, last = min(t.at for t in base if t.at), max(t.at for t in base if t.at)
    span = timedelta(days=(last - first).days + 2)
    turns: list[TurnInput] = []
    copy = 0
    while len(turns) < size:
        for turn in base[: size - len(turns)]:
            session = f"r{copy}/{turn.namespace}/{turn.session_id}"[:128]
            at = turn.at + span * copy if turn.at else None
            turns.append(replace(turn, session_id=session, namespace=NAMESPACE, at=at))
        copy += 1
    return turns


def real_questions(locomo: Path, count: int) -> list[str]:
    """`count` LoCoMo questions, evenly spread over the file (so over its conversations)."""
    questions = [q.text for q in locomo_questions(locomo)]
    return [questions[i * len(questions) // count] for i in range(min(count, len(questions)))]


class CachingEmbedder:
    """The Embedder Protocol around a real one: each distinct text goes through the model once, and its vector is
    kept (in memory and, on `save()`, in `path`), so a repeated turn costs nothing. Questions pass straight
    through to the model's query path."""

    def __init__(self, inner: Embedder, path: Path | None = None) -> None:
        self.inner, self.path = inner, path
        self.name, self.dimension = inner.name, inner.dimension
        self.query_is_document = False  # the cache may hold vectors another precision made
        self._vectors: dict[bytes, np.ndarray] = {}
        self.embedded = 0  # texts that went through the model

    async def load(self) -> None:
        await self.inner.load()
        if self.path is not None and self.path.exists() and not self._vectors:
            with np.load(self.path) as saved:
                self._vectors = dict(zip((bytes(k) for k in saved["keys"]), saved["vectors"], strict=True))

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [_key(text) for text in texts]
        missing = dict(zip(keys, texts, strict=True))
        missing = {k: t for k, t in missing.items() if k not in self._vectors}
        if missing:
            vectors = await self.inner.embed(list(missing.values()))
            self._vectors.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))
            self.embedded += len(missing)
        if not keys:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._vectors[k] for k in keys])

    async def embed_query(self, text: str) -> np.ndarray:
        return await self.inner.embed_query(text)

    def save(self) -> None:
        """Write the cache (0600) beside the stores; a later run, or a larger store, starts from it."""
        if self.path is None or not self._vectors:
            return
        keys = np.array(list(self._vectors), dtype="S16")
        partial = self.path.with_name(self.path.name + ".partial.npz")
        make_private_file(partial)
        with partial.open("wb") as fh:
            np.savez(fh, keys=keys, vectors=np.stack(list(self._vectors.values())))
        partial.replace(self.path)

    async def aclose(self) -> None:
        self.save()
        await self.inner.aclose()


def _key(text: str) -> bytes:
    return blake2b(text.encode(), digest_size=16).digest()


async def daemon_ready(manager: MemoryManager) -> dict[str, float]:
    """The store as a daemon would have it after a pause: its idle work done (context vectors, digests), then the
    collections' HNSW built by the `index` sleep job. Returns the seconds each took."""
    context = await do_idle_work(manager)
    started = time.perf_counter()
    await run_job(manager, "index", force=True)
    await manager.flush()
    return {"context_seconds": context, "index_seconds": time.perf_counter() - started}


async def build_real(config: Config, turns: Sequence[TurnInput], embedder: CachingEmbedder) -> dict[str, Any]:
    """Every turn through `process_turns` (the benchmark's batches: 64, never straddling a session), saving the
    embedding cache every CHUNK turns; then `daemon_ready`."""
    started, figures = time.perf_counter(), {}
    async with MemoryManager.open(config, embedder=embedder) as manager:
        for start in range(0, len(turns), CHUNK):
            await ingest(manager, turns[start : start + CHUNK])
            embedder.save()
            done = min(start + CHUNK, len(turns))
            log.info("built %d of %d turns in %.0f s (%d texts embedded)", done, len(turns),
                     time.perf_counter() - started, embedder.embedded)  # fmt: skip
        figures["build_seconds"] = time.perf_counter() - started
        figures |= await daemon_ready(manager)
        figures["memories"] = (await manager.stats())["records"]["memories"]
    return figures


async def build_synthetic(config: Config, size: int, *, seed: int, pool: int) -> dict[str, Any]:
    """latency.py's synthetic store of `size` turns (every turn kept, pooled vectors), then `daemon_ready` with the
    same pooled embedder; returns its figures, its questions and their time."""
    bases = latency.make_bases(pool, random.Random(f"bases-{seed}"))
    turns = latency.make_turns(size, bases, random.Random(f"turns-{seed}-{size}"))
    questions = latency.make_queries(turns, 200, random.Random(f"queries-{seed}-{size}"))
    real = make_embedder(config)
    await real.load()
    pooled = PooledEmbedder(await real.embed([b.text for b in bases]), {t.text: t.base for t in turns})
    await real.aclose()
    figures: dict[str, Any] = {"build_seconds": await latency.build_store(config, turns, pooled)}
    async with MemoryManager.open(config, embedder=pooled) as manager:
        figures |= await daemon_ready(manager)
        figures["memories"] = (await manager.stats())["records"]["memories"]
    return figures | {"questions": questions, "now": (turns[-1].at + timedelta(days=1)).isoformat()}


@dataclass(frozen=True)
class Run:
    text: str  # "real" or "synthetic"
    turns: int
    memories: int
    pace_ms: float
    load_before: float  # 1-minute load average when the questions started, and when they ended
    load_after: float
    layers: dict[str, Latency]  # LAYERS plus "fused"
    build: dict[str, Any]


async def time_questions(
    manager: MemoryManager, queries: Sequence[str], now: datetime, *, warmup: int, pace: float
) -> tuple[float, float, dict[str, Latency]]:
    """As latency.py times them (every question through `recall` for the stage timings, then through
    `retrieve(k=10)` for the wall clock), with `pace` seconds of idle after each question, as an agent waiting
    for its model would leave. Returns the load average before and after, and each layer's latency."""
    if manager.records.keyword_index is not None:  # built in the background from the first search
        await manager.records.keyword_index.wait()
    for query in queries[:warmup]:
        await manager.retrieve(query, k=10, now=now)
    load, samples = os.getloadavg()[0], {"fused": list[float]()}
    for query in queries:
        for layer, ms in (await manager.recall(query, now=now)).timings.items():
            samples.setdefault(layer, []).append(ms)
        await asyncio.sleep(pace)
    for query in queries:
        started = time.perf_counter()
        await manager.retrieve(query, k=10, now=now)
        samples["fused"].append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(pace)
    layers = {name: Latency(len(v), statistics.median(v), percentile(v, 0.95)) for name, v in samples.items()}
    return load, os.getloadavg()[0], layers


async def prepare(root: Path, size: int, text: str, args: argparse.Namespace) -> tuple[Config, dict[str, Any]]:
    """Build the store of `size` turns of `text` in `root`, or reuse the finished build there; returns its config
    and its marker, which holds its questions and their time."""
    if text == "real":
        config = load_config(environ={}, data_dir=str(root), journal__fsync="never")  # shipped save decision
        turns = real_turns(args.data_locomo, args.data_longmemeval, size)
        corpus = blake2b("\n".join(f"{t.session_id}\t{t.content!s}" for t in turns).encode(), digest_size=8)
        wanted: dict[str, object] = {"turns": size, "text": text, "corpus": corpus.hexdigest()}
    else:
        config = load_config(environ={}, data_dir=str(root), journal__fsync="never", save__keep_all=True)
        wanted = {"turns": size, "text": text, "seed": args.seed, "pool": args.pool}
    build = latency._read_marker(root, wanted)
    if build is not None:
        return config, build
    if text == "real":
        cache = CachingEmbedder(make_embedder(config), root.parent / CACHE)
        await cache.load()
        try:
            figures = await build_real(config, turns, cache)
        finally:
            await cache.aclose()
        now = max(t.at for t in turns if t.at) + timedelta(days=1)
        questions = real_questions(args.data_locomo, args.queries)
        figures |= {"questions": questions, "now": now.isoformat(), "embedded": cache.embedded}
    else:
        figures = await build_synthetic(config, size, seed=args.seed, pool=args.pool)
    build = wanted | figures
    (root / latency.MARKER).write_text(json.dumps(build))
    return config, build


async def bench(root: Path, size: int, text: str, args: argparse.Namespace) -> list[Run]:
    """Time the questions on the store of `size` turns of `text` in `root` (built first if need be), once per pace."""
    config, build = await prepare(root, size, text, args)
    questions, now = build["questions"], datetime.fromisoformat(build["now"])
    runs: list[Run] = []
    async with MemoryManager.open(config) as manager:  # the real model embeds the questions
        await latency.as_the_daemon_opens_it(manager)
        for pace_ms in args.pace:
            before, after, layers = await time_questions(manager, questions, now, warmup=10, pace=pace_ms / 1000)
            runs.append(Run(text, size, build["memories"], pace_ms, before, after, layers, build))
            log.info("%s %d pace %g ms: fused %s", text, size, pace_ms, layers["fused"])
    return runs


def _cell(latency_: Latency | None, *, p50: bool = True) -> str:
    if latency_ is None:
        return "-"
    return f"{latency_.p50_ms:.1f} / {latency_.p95_ms:.1f}" if p50 else f"{latency_.p95_ms:.1f}"


def render(runs: Sequence[Run]) -> str:
    """The fused table (size x text kind), then each layer's p95."""
    fused = ["| turns | text | memories | pace ms | fused p50 / p95 | target | load before / after |", "|" + "---|" * 7]
    layers = ["| turns | text | pace ms | " + " | ".join(LAYERS) + " |", "|" + "---|" * (len(LAYERS) + 3)]
    for run in runs:
        target = latency.TARGETS.get(run.turns)
        verdict = f"<= {target:.0f}: {'met' if run.layers['fused'].p95_ms <= target else 'missed'}" if target else ""
        fused.append(
            f"| {run.turns:,} | {run.text} | {run.memories:,} | {run.pace_ms:g} | {_cell(run.layers['fused'])} | "
            f"{verdict} | {run.load_before:.1f} / {run.load_after:.1f} |"
        )
        cells = [_cell(run.layers.get(name), p50=False) for name in LAYERS]
        layers.append(f"| {run.turns:,} | {run.text} | {run.pace_ms:g} | " + " | ".join(cells) + " |")
    return "\n".join([BEGIN, *fused, "", *layers, END])


async def run(args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    texts = ("real", "synthetic") if args.text == "both" else ("real",)
    for size in args.sizes:
        for _ in range(args.repeat):
            for text in texts:
                name = f"real-{size}" if text == "real" else f"synthetic-{size}-seed-{args.seed}-pool-{args.pool}"
                if args.keep is None:
                    raise SystemExit("--text real needs --keep DIR (its stores and embedding cache live there)")
                runs += await bench(args.keep / name, size, text, args)
    return runs


def real_store_arguments(parser: argparse.ArgumentParser) -> None:
    """What `prepare` reads to build a real-text store: the data, the questions, and (for `--text both`) the
    synthetic store's seed and pool."""
    parser.add_argument("--data-locomo", type=Path, default=LOCOMO)
    parser.add_argument("--data-longmemeval", type=Path, default=LONGMEMEVAL)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool", type=int, default=3000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="retrieval latency on stores of real conversation turns")
    parser.add_argument("--text", choices=("real", "both"), default="real", help="both: also latency.py's synthetic")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100_000])
    real_store_arguments(parser)
    parser.add_argument("--pace", type=lambda s: [float(x) for x in s.split(",")], default=[0.0],
                        help="ms of idle after each question; several (0,50) time the store once per pace")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="time every store this many times, alternating")
    parser.add_argument("--keep", type=Path, help="the stores and the embedding cache; reused when present")
    parser.add_argument("--out", type=Path, help="write the tables between the bench-retrieve-real markers there")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True, mode=0o700)
    section = render(asyncio.run(run(args)))
    return perf.publish(section, args.out, begin=BEGIN, end=END, heading="Retrieval latency on real text")
