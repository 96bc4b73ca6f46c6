"""Retrieval latency: p50/p95 of every recall layer and of the fused `retrieve`, on synthetic stores of 10k-100k turns.

`python scripts/bench_retrieve.py --sizes 10000,100000` builds one store per size through the real `process_turns`
path (log, SQLite, Kuzu, Qdrant Edge; no LLM), times ~200 questions, and writes the table into docs/benchmarks.md.
Turns are conversation-like (10-60 words from templates over names, places, activities, products, prices, feelings,
booking codes; sessions of 20 over 540 days; one seed). **Stored vectors come from a pool of N real all-MiniLM-L6-v2
embeddings** (N = 3,000 by default; embedding 100k turns one by one takes over 20 minutes on 2 cores): a turn is a
pooled base sentence plus varied clauses, and `PooledEmbedder` gives it the base sentence's real vector plus small
deterministic noise, re-normalised. Questions are embedded by the real model, so the fused figure includes that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from hashlib import blake2b
from pathlib import Path
from string import Formatter
from typing import Any

import numpy as np

from agent_memory.bench import perf
from agent_memory.bench.perf import percentile
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.engines import make_embedder
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput
from agent_memory.sleep.index import points_moved
from agent_memory.sleep.jobs import run_job
from agent_memory.storage.outbox import TEXT

log = logging.getLogger(__name__)
BEGIN, END = "<!-- bench-retrieve:begin -->", "<!-- bench-retrieve:end -->"
LAYERS = ("keyword", "grep", "embed", "semantic", "time", "graph", "rank")  # Recalled.timings keys
TARGETS = {10_000: 15.0, 100_000: 50.0}  # fused p95, ms
SESSION_TURNS, BATCH, MAX_WORDS = 20, 500, 60
NOISE = 0.015  # per-dimension sigma of a pooled vector's noise: cosine ~0.96 to its base sentence's vector
START, SPAN = datetime(2024, 1, 1, 8, tzinfo=UTC), timedelta(days=540)
MARKER = "bench-retrieve.json"
VOCABULARY = """
name: Maria|James|Aisha|Kenji|Sofia|Liam|Priya|Mateo|Chloe|Omar|Elena|Noah|Fatima|Lucas|Hana|Diego|Grace|Ivan
name: Zoe|Samuel|Leila|Arjun|Nora|Felix|Amara|Theo|Ingrid|Rafael|Yuki|Daniel
surname: Lopez|Chen|Okafor|Novak|Patel|Schmidt|Rossi|Tanaka|Haddad|Murphy|Silva|Kowalski|Nguyen|Berg
place: Lisbon|the farmers market|Kyoto|the climbing gym|Lake Tahoe|the public library|Barcelona|the dentist
place: Central Park|the new ramen place|Montreal|the hardware store|Edinburgh|the beach house|Denver|Oaxaca
activity: hiking|a pottery class|salsa dancing|a long bike ride|birdwatching|a cooking workshop|trail running
activity: a board game night|kayaking|a jazz concert|volunteering at the shelter|rock climbing|yoga|camping
product: standing desk|espresso machine|noise-cancelling headphones|road bike|air fryer|e-reader|hiking boots
product: mechanical keyboard|robot vacuum|tent|smartwatch|cast iron pan|drone|sewing machine|electric kettle
feeling: thrilled|exhausted|nervous|relieved|proud|a bit lonely|grateful|frustrated|calm|overwhelmed
relation: sister|brother|coworker|neighbour|best friend|cousin|manager|roommate|mom|dad
weekday: Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday
"""
TEMPLATES = """
base: {name} joined me for {activity} near {place}, and I felt {feeling} the whole afternoon.
base: I finally bought the {product} for ${price} after {name} kept recommending it.
base: My {relation} {name} is thinking about moving to {place} for a new job.
base: {name} {surname} told me the {product} they ordered still has not arrived, which made them {feeling}.
base: We tried {activity} at {place} with {name}, and it cost {price} dollars for the whole group.
base: I have been {feeling} since {name} cancelled our plans to visit {place}.
base: {name} lent me a {product} so I could try {activity} this season.
base: Remember that {name} {surname} is allergic to peanuts and prefers meeting at {place}.
base: I signed up for {activity} at {place}; the first session is on a {weekday} evening.
base: The {product} broke again, so I called support and {name} from the shop promised a refund.
base: My {relation} and I talked for {count} minutes about {activity}, and I felt {feeling} afterwards.
base: {name} recommended {place} for {activity}, but the reviews say it gets crowded on weekends.
clause: The booking reference was {code}.|It started around {hour}:{minute}pm and ran late.
clause: {name} said the {product} was worth every cent.|It took {count} minutes to get there from home.
clause: I want to remember this because it mattered to me more than I expected.
clause: We might do it again with {name} sometime next month if the weather holds.
clause: The receipt number was {receipt}, just in case I need it.
clause: Note to self: call {name} back about the {product} before {weekday}.
plain: What did {name} recommend?|How did I feel about {activity} with {name}?|What happened at {place}?
plain: Where is my {relation} thinking of moving?|What do I know about the {product}?|Why was I {feeling}?
plain: Who joined me for {activity}?
grep: What was booking {code} for?|What did {name} {surname} tell me?|What cost ${price}?|Which receipt was {receipt}?
time: What did I do with {name} {when}?|How was I feeling {when}?|Did I go to {place} {when}?|What did I buy {when}?
"""  # a base is the embedded part of a turn; clauses are variations around it, never embedded
PREFIXES = ("", "", "Honestly, ", "So ", "Oh, and ", "By the way, ", "Quick update: ")
KINDS = ("plain", "grep", "time", "plain", "grep", "time", "plain", "time", "grep", "plain")  # 40/30/30


def _table(text: str) -> dict[str, list[str]]:  # `key: a|b|c` lines; a key may take several
    table: dict[str, list[str]] = {}
    for line in text.strip().splitlines():
        key, options = line.split(": ", 1)
        table.setdefault(key, []).extend(options.split("|"))
    return table


WORDS, ASKS = _table(VOCABULARY), _table(TEMPLATES)
BASES, CLAUSES = ASKS["base"], ASKS["clause"]


def _fields(template: str) -> set[str]:
    return {field for _, field, _, _ in Formatter().parse(template) if field}


def _values(rng: random.Random) -> dict[str, str]:
    values = {slot: rng.choice(words) for slot, words in WORDS.items()}
    return values | {
        "price": str(rng.randrange(12, 2400)),
        "count": str(rng.randrange(5, 180)),
        "hour": str(rng.randrange(1, 12)),
        "minute": f"{rng.randrange(60):02d}",
        "code": f"{rng.choice('BCDFGHKLMNPRSTVXZ')}{rng.choice('AEHKLMNRSTXZ')}-{rng.randrange(1000, 99999)}",
        "receipt": f"{rng.randrange(1000, 9999)}-{rng.randrange(1000, 9999)}",
    }


@dataclass(frozen=True, slots=True)
class Base:
    text: str
    slots: Mapping[str, str]  # the values its template used


@dataclass(frozen=True, slots=True)
class Turn:
    text: str
    base: int  # index into the pool of base sentences
    session: int
    number: int
    at: datetime
    slots: Mapping[str, str]  # the base's slots plus the clauses' booking code or receipt, if any


def make_bases(count: int, rng: random.Random) -> list[Base]:
    """`count` distinct base sentences."""
    found: dict[str, Mapping[str, str]] = {}
    while len(found) < count:
        template, values = rng.choice(BASES), _values(rng)
        found.setdefault(template.format(**values), {k: values[k] for k in _fields(template)})
    return [Base(text, slots) for text, slots in found.items()]


def _turn_text(base: Base, rng: random.Random) -> tuple[str, dict[str, str]]:
    """A prefix, the base sentence and 0-4 distinct clauses, at most MAX_WORDS words; and the exact terms it added."""
    prefix, values = rng.choice(PREFIXES), _values(rng)
    keep_case = not prefix or base.text.split()[0] in {"I", *WORDS["name"]}
    parts = [prefix + (base.text if keep_case else base.text[0].lower() + base.text[1:])]
    added: dict[str, str] = {}
    for clause in rng.sample(CLAUSES, rng.choice((0, 0, 1, 1, 2, 3, 4))):
        text = clause.format(**values)
        if len(" ".join([*parts, text]).split()) <= MAX_WORDS:
            parts.append(text)
            added |= {k: values[k] for k in _fields(clause) & {"code", "receipt"}}
    return " ".join(parts), added


def make_turns(size: int, bases: Sequence[Base], rng: random.Random) -> list[Turn]:
    """`size` turns in sessions of 20, in time order over SPAN: a session every SPAN/sessions, a turn every 90 s."""
    step = SPAN / max(1, -(-size // SESSION_TURNS))
    turns: list[Turn] = []
    for index in range(size):
        session, number = divmod(index, SESSION_TURNS)
        if number == 0:
            opened = START + step * session + step * rng.random() / 2
        base_index = rng.randrange(len(bases))
        text, added = _turn_text(bases[base_index], rng)
        at = opened + timedelta(seconds=90 * number)
        turns.append(Turn(text, base_index, session, number, at, {**bases[base_index].slots, **added}))
    return turns


def _when(at: datetime, rng: random.Random) -> str:
    month = f"in {at:%B %Y}"  # the C locale: English month names
    return rng.choice((month, month, "last week", "last month", "recently", "three weeks ago"))


def make_queries(turns: Sequence[Turn], count: int, rng: random.Random) -> list[str]:
    """Questions about random stored turns: 40% plain, 30% with an exact term for grep, 30% with time words."""
    queries: list[str] = []
    while len(queries) < count:
        turn = rng.choice(turns)
        slots = {**turn.slots, "when": _when(turn.at, rng)}
        fitting = [q for q in ASKS[KINDS[len(queries) % len(KINDS)]] if _fields(q) <= slots.keys()]
        if fitting:
            queries.append(rng.choice(fitting).format(**slots))
    return queries


class PooledEmbedder:
    """The Embedder Protocol over a pool of real vectors: a known turn gets its base sentence's vector plus small
    deterministic noise, re-normalised; an unknown text gets a pool vector chosen by its hash. Named after the
    model the pool came from, so the store looks like one the real embedder built."""

    def __init__(self, pool: np.ndarray, bases: Mapping[str, int], *, noise: float = NOISE) -> None:
        self.pool, self.bases, self.noise = pool, bases, noise
        self.name, self.dimension = "all-MiniLM-L6-v2", int(pool.shape[1])
        self.query_is_document = True  # a question's vector is its text's pooled vector, as stored

    async def load(self) -> None:
        return None

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            digest = int.from_bytes(blake2b(text.encode(), digest_size=8).digest())
            vector = self.pool[self.bases.get(text, digest % len(self.pool))]
            vector = vector + np.random.default_rng(digest).normal(0.0, self.noise, self.dimension)
            out[row] = vector / np.linalg.norm(vector)
        return out

    async def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = (await self.embed([text]))[0]
        return vector

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class Latency:
    runs: int
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True)
class StoreFigures:
    turns: int
    memories: int
    index: str  # "exact scan" before optimize(), "HNSW" after
    build_seconds: float
    optimize_seconds: float | None
    load: float  # 1-minute load average when the questions started
    layers: Mapping[str, Latency]  # LAYERS plus "fused"


Timed = tuple[float, dict[str, Latency]]  # the load average when the questions started, and each layer's latency


async def build_store(config: Config, turns: Sequence[Turn], embedder: Embedder, *, batch: int = BATCH) -> float:
    """Every turn through `process_turns` in batches, projections included; returns the seconds it took."""
    started = time.perf_counter()
    async with MemoryManager.open(config, embedder=embedder) as manager:
        for start in range(0, len(turns), batch):
            chunk = turns[start : start + batch]
            await manager.process_turns([TurnInput(f"s{t.session:05d}", t.number, t.text, at=t.at) for t in chunk])
            if (start // batch) % 20 == 19:
                log.info("built %d of %d turns in %.0f s", start + batch, len(turns), time.perf_counter() - started)
        await manager.flush()
    return time.perf_counter() - started


async def _time_queries(manager: MemoryManager, queries: Sequence[str], now: datetime, warmup: int) -> Timed:
    if manager.records.keyword_index is not None:  # built in the background from the first search
        await manager.records.keyword_index.wait()
    for query in queries[:warmup]:
        await manager.retrieve(query, k=10, now=now)
    load, samples = os.getloadavg()[0], {"fused": list[float]()}
    for query in queries:  # all through recall first, then all through retrieve: each sees the same warm caches
        for layer, ms in (await manager.recall(query, now=now)).timings.items():
            samples.setdefault(layer, []).append(ms)
    for query in queries:
        started = time.perf_counter()
        await manager.retrieve(query, k=10, now=now)
        samples["fused"].append((time.perf_counter() - started) * 1000)
    return load, {name: Latency(len(v), statistics.median(v), percentile(v, 0.95)) for name, v in samples.items()}


async def as_the_daemon_opens_it(manager: MemoryManager) -> Mapping[str, Any] | None:
    """What the daemon does when it starts (sleep/index.py): with points moved out of an index, the index job
    decides whether to build before anything is timed. A store kept from an earlier run and opened by newer code,
    whose migrations or vector upgrade moved its points, would otherwise be timed on exact scans (100k real turns:
    p50 32.5 ms instead of about 10). Returns the job's report, None when nothing had moved."""
    if not await points_moved(manager):
        return None
    run = await run_job(manager, "index")
    log.info("index job at open (as the daemon runs it): %s", run.counts)
    return run.counts


async def measure_store(
    config: Config, queries: Sequence[str], now: datetime, build: dict[str, Any], *, warmup: int = 10, **parts: Any
) -> list[StoreFigures]:
    """Time the questions on the exact-scan vectors, then build the HNSW index (if the store has `optimize()`) and
    time them again. `build` is the store's marker; its `optimize_seconds` is set and saved once the index is built."""
    timed: list[tuple[str, Timed]] = []
    async with MemoryManager.open(config, **parts) as manager:
        memories = (await manager.stats())["records"]["memories"]
        optimize = getattr(manager.vectors, "optimize", None)
        if build.get("optimize_seconds") is None:  # else a kept store, indexed by an earlier run
            timed.append(("exact scan", await _time_queries(manager, queries, now, warmup)))
            if optimize is not None:
                started = time.perf_counter()
                await optimize(TEXT)
                build["optimize_seconds"] = time.perf_counter() - started
                (config.data_dir / MARKER).write_text(json.dumps(build))
        if build.get("optimize_seconds") is not None:
            await as_the_daemon_opens_it(manager)
            timed.append(("HNSW", await _time_queries(manager, queries, now, warmup)))
    turns, built, indexed = build["turns"], build["build_seconds"], build["optimize_seconds"]
    return [StoreFigures(turns, memories, index, built, indexed, load, layers) for index, (load, layers) in timed]


def _read_marker(root: Path, wanted: Mapping[str, object]) -> dict[str, Any] | None:
    """The finished build of the same corpus in `root`, None if `root` is empty; anything else is refused."""
    marker = root / MARKER
    build: dict[str, Any] = json.loads(marker.read_text()) if marker.exists() else {}
    if {key: build.get(key) for key in wanted} == wanted:
        return build
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} holds another or an unfinished build; delete it or choose another --keep")
    return None


async def bench_size(
    root: Path, size: int, *, queries: int, seed: int, pool: int, warmup: int = 10, embedder: Embedder | None = None
) -> list[StoreFigures]:
    """Build a store of `size` turns in `root` (or reuse the finished build of the same corpus there) and time it.

    `embedder` embeds the pool and the questions; None means the real one the configuration names."""
    config = load_config(environ={}, data_dir=str(root), journal__fsync="never", save__keep_all=True)
    bases = make_bases(pool, random.Random(f"bases-{seed}"))
    turns = make_turns(size, bases, random.Random(f"turns-{seed}-{size}"))
    questions = make_queries(turns, queries, random.Random(f"queries-{seed}-{size}"))
    corpus = blake2b("\n".join(t.text for t in turns).encode(), digest_size=8).hexdigest()  # the generator's version
    wanted = {"turns": size, "seed": seed, "pool": pool, "corpus": corpus}
    build = _read_marker(root, wanted)
    if build is None:
        real = embedder or make_embedder(config)
        await real.load()
        vectors = await real.embed([base.text for base in bases])
        if embedder is None:
            await real.aclose()
        pooled = PooledEmbedder(vectors, {turn.text: turn.base for turn in turns})
        build = wanted | {"build_seconds": await build_store(config, turns, pooled), "optimize_seconds": None}
        (root / MARKER).write_text(json.dumps(build))
    parts = {} if embedder is None else {"embedder": embedder}
    return await measure_store(config, questions, turns[-1].at + timedelta(days=1), build, warmup=warmup, **parts)


def _row(f: StoreFigures) -> str:
    target = TARGETS.get(f.turns)
    verdict = f"<= {target:.0f} ms: {'met' if f.layers['fused'].p95_ms <= target else 'missed'}" if target else ""
    times = [f"{x.p50_ms:.1f} / {x.p95_ms:.1f}" if (x := f.layers.get(n)) else "-" for n in (*LAYERS, "fused")]
    return "| " + " | ".join([f"{f.memories:,}", f.index, *times, verdict, f"{f.load:.1f}"]) + " |"


def _note(f: StoreFigures) -> str:
    runs = {name: f.layers[name].runs if name in f.layers else 0 for name in ("grep", "time", "fused")}
    indexed = f", HNSW `optimize()` {f.optimize_seconds:.0f} s" if f.optimize_seconds is not None else ""
    return (
        f"{f.turns:,} turns built in {f.build_seconds:.0f} s ({f.turns / f.build_seconds:.0f} turns/s){indexed}; "
        f"grep ran on {runs['grep']} of {runs['fused']} questions, the time layer on {runs['time']}"
    )


def render(results: Sequence[StoreFigures], *, pool: int, warmup: int) -> str:
    header = ["memories", "vector index", *LAYERS, "fused", "fused p95 target", "load"]
    notes = "; ".join(_note(f) for f in {f.turns: f for f in results}.values())
    return "\n".join(
        [
            BEGIN,
            f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}; no LLM; real SQLite, Kuzu, Qdrant Edge and ripgrep; synthetic conversation "
            f"turns (see `agent_memory/bench/latency.py`). **Stored vectors come from a pool of {pool:,} real "
            "all-MiniLM-L6-v2 embeddings** (a turn gets its base sentence's vector plus noise); questions are embedded "
            f"by the real model. Cells: p50 / p95 ms after {warmup} warm-up questions; layers are `recall()` stage "
            "timings (keyword, grep and vectors run concurrently); `fused`: `retrieve(k=10)` wall clock; load: 1 min.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *(_row(f) for f in results),
            "",
            f"Build: `process_turns` in batches of {BATCH}, journal fsync `never`, projections included. {notes}.",
            END,
        ]
    )


def write_docs(section: str, path: Path) -> None:
    perf.write_docs(section, path, begin=BEGIN, end=END, heading="Retrieval latency")


async def run(sizes: Sequence[int], *, queries: int, seed: int, pool: int, keep: Path | None) -> list[StoreFigures]:
    results: list[StoreFigures] = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            root = keep / f"turns-{size}-seed-{seed}-pool-{pool}" if keep else Path(scratch)
            results += await bench_size(root, size, queries=queries, seed=seed, pool=pool)
    return results


def store_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every benchmark over these synthetic stores takes (this one and bench/sleep_cycle.py)."""
    parser.add_argument("--sizes", default="10000,100000", help="turns per store, comma separated")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool", type=int, default=3000, help="base sentences embedded with the real model")
    parser.add_argument("--keep", type=Path, help="keep the built stores here, and reuse them when present")
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    return parser


def main(argv: list[str] | None = None) -> int:
    kind = argparse.ArgumentParser(add_help=False)
    kind.add_argument("--text", choices=("synthetic", "real", "both"), default="synthetic")
    text, argv = kind.parse_known_args(argv)
    if text.text != "synthetic":  # stores of real conversation turns: latency_real.py, which imports this module
        from agent_memory.bench import latency_real

        return latency_real.main([f"--text={text.text}", *argv])
    parser = store_arguments(argparse.ArgumentParser(description="retrieval latency per layer and fused"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(  # read above; here so that --help shows it
        "--text",
        choices=("synthetic", "real", "both"),
        default="synthetic",
        help="synthetic turns (this benchmark), or stores of the dev data's real turns (--help with --text real)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sizes = [int(size) for size in args.sizes.split(",")]
    results = asyncio.run(run(sizes, queries=args.queries, seed=args.seed, pool=args.pool, keep=args.keep))
    section = render(results, pool=args.pool, warmup=10)
    print(section)
    if not args.no_docs:
        write_docs(section, args.out)
    return 0
