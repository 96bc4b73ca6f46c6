"""The short-term window's cost and its guarantee, on a long synthetic chat (issue #21).

Each turn does what the runtime does: swap the pinned memory block, `force_fit` for the incoming user message,
append it, append the answer, `force_fit` again. `measure_cost` times those window calls per turn (counting tokens
with cl100k_base, the default, and summarising extractively) once the window holds its steady few hundred
messages. `long_chat` runs 2,000 turns through a 4,000-token window, with now and then an answer that alone takes
a 70% window past 100% and one larger than the whole window, and checks the limit and the pinned messages at every
turn. `python scripts/bench_window.py` prints both.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass

from agent_memory.bench.perf import percentile
from agent_memory.runtime.window import Message, Window, WindowConfig, WindowTrace

SYSTEM = "You are a helpful assistant with a long-term memory. Use remembered context when it is relevant."
_NAMES = ["Ana", "Bruno", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana"]
_TOPICS = ["the Kafka pipeline", "the garden", "the Lisbon trip", "the budget", "the thesis", "the new bike"]
_FILLER = [
    "I think that makes sense for now.",
    "Could you explain that a bit more?",
    "That is a good point, thanks.",
    "Let me check and come back to it.",
    "We talked about this last week as well.",
]


@dataclass(frozen=True)
class CostFigures:
    turns: int
    limit: int
    messages_median: int
    messages_min: int
    messages_max: int
    turn_p50_ms: float
    turn_p95_ms: float
    turn_p99_ms: float
    turn_max_ms: float
    cpu_p50_ms: float
    cpu_p95_ms: float
    cpu_p99_ms: float
    fit_p50_ms: float
    fit_p95_ms: float
    summarising_share: float
    summary_turn_cpu_p50_ms: float
    summary_turn_cpu_max_ms: float


@dataclass(frozen=True)
class LongChatReport:
    turns: int
    limit: int
    overflows: int
    pinned_broken: int
    max_tokens: int
    summaries: int
    filtered: int
    dropped: int
    cut: int


def user_text(rng: random.Random, turn: int) -> str:
    name, topic = rng.choice(_NAMES), rng.choice(_TOPICS)
    fact = f"{name} said {topic} needs {rng.randint(2, 90)} more days, starting on day {turn}."
    return " ".join([fact, *rng.sample(_FILLER, rng.randint(0, 2))])


def answer_text(rng: random.Random, turn: int, *, size: int = 0) -> str:
    topic = rng.choice(_TOPICS)
    lines = [f"About {topic}: {rng.choice(_NAMES)} can take it from day {turn + rng.randint(1, 9)}."]
    lines += rng.sample(_FILLER, 2)
    text = " ".join(lines)
    while size and len(text) < size * 4:
        text += f" Step {len(text) % 97}: review {rng.choice(_TOPICS)} with {rng.choice(_NAMES)}."
    return text


def memory_block(rng: random.Random, turn: int) -> str:
    facts = [
        f"{rng.choice(_NAMES)} prefers {rng.choice(_TOPICS)} on day {turn - rng.randint(1, 50)}." for _ in range(3)
    ]
    return "\n".join(facts)


@dataclass(frozen=True)
class Turn:
    seconds: float
    """Wall time of the turn's window calls (the synthetic text is made before the clock starts)."""
    cpu_seconds: float
    """The same calls' CPU time on this thread: what they cost, without the waits of a busy machine."""
    fit_seconds: tuple[float, float]
    traces: tuple[WindowTrace, WindowTrace]
    peak_tokens: int
    """The most the window held after a fit and its append."""


async def chat_turn(window: Window, rng: random.Random, turn: int, *, answer_size: int = 0) -> Turn:
    """One turn of window calls, as the runtime makes them."""
    question, memory = user_text(rng, turn), memory_block(rng, turn)
    answer = answer_text(rng, turn, size=answer_size)
    cpu, started = time.thread_time(), time.perf_counter()
    window.replace_pinned("memory", memory)
    first = await window.force_fit(incoming_tokens=window.count_tokens(question), query=question)
    fitted = time.perf_counter()
    window.append(Message("user", question))
    peak = window.tokens
    window.append(Message("assistant", answer))
    appended = time.perf_counter()
    second = await window.force_fit()
    ended, cpu = time.perf_counter(), time.thread_time() - cpu
    fits = (fitted - started, ended - appended)
    return Turn(ended - started, cpu, fits, (first, second), max(peak, window.tokens))


async def measure_cost(*, turns: int = 3000, limit: int = 12000, seed: int = 7) -> CostFigures:
    """Per-turn cost once the window first passes its warning threshold (steady state), over `turns` turns."""
    rng = random.Random(seed)
    window = Window(WindowConfig(limit_tokens=limit))
    window.append(Message("system", SYSTEM, pinned=True))
    warm = 0
    while window.tokens < window.config.warning * limit:
        await chat_turn(window, rng, warm)
        warm += 1
    per_turn: list[float] = []
    cpu: list[float] = []
    fits: list[float] = []
    sizes: list[int] = []
    summary_cpu: list[float] = []
    for turn in range(warm, warm + turns):
        done = await chat_turn(window, rng, turn)
        per_turn.append(done.seconds)
        cpu.append(done.cpu_seconds)
        fits += done.fit_seconds
        sizes.append(len(window))
        if any(t.summarised for t in done.traces):
            summary_cpu.append(done.cpu_seconds * 1000)
    ms = [s * 1000 for s in per_turn]
    cpu_ms = [s * 1000 for s in cpu]
    fit_ms = [s * 1000 for s in fits]
    return CostFigures(
        turns=turns,
        limit=limit,
        messages_median=int(statistics.median(sizes)),
        messages_min=min(sizes),
        messages_max=max(sizes),
        turn_p50_ms=percentile(ms, 0.5),
        turn_p95_ms=percentile(ms, 0.95),
        turn_p99_ms=percentile(ms, 0.99),
        turn_max_ms=max(ms),
        cpu_p50_ms=percentile(cpu_ms, 0.5),
        cpu_p95_ms=percentile(cpu_ms, 0.95),
        cpu_p99_ms=percentile(cpu_ms, 0.99),
        fit_p50_ms=percentile(fit_ms, 0.5),
        fit_p95_ms=percentile(fit_ms, 0.95),
        summarising_share=len(summary_cpu) / turns,
        summary_turn_cpu_p50_ms=percentile(summary_cpu, 0.5) if summary_cpu else 0.0,
        summary_turn_cpu_max_ms=max(summary_cpu, default=0.0),
    )


async def long_chat(*, turns: int = 2000, limit: int = 4000, seed: int = 11) -> LongChatReport:
    """`turns` turns through a `limit`-token window; checked after every force_fit."""
    rng = random.Random(seed)
    window = Window(WindowConfig(limit_tokens=limit))
    system = window.append(Message("system", SYSTEM, pinned=True))
    overflows = pinned_broken = max_tokens = summaries = filtered = dropped = cut = 0
    for turn in range(turns):
        big = limit * 2 if turn % 500 == 499 else limit // 3 if turn % 97 == 96 else 0
        done = await chat_turn(window, rng, turn, answer_size=big)
        pinned = [m for m in window.messages() if m.pinned]
        pinned_broken += len(pinned) != 2 or pinned[0] != system or pinned[1].role != "memory"
        overflows += done.peak_tokens > limit
        max_tokens = max(max_tokens, done.peak_tokens)
        for trace in done.traces:
            summaries += trace.summary_id is not None
            filtered += len(trace.filtered)
            dropped += len(trace.dropped)
            cut += len(trace.truncated)
    return LongChatReport(turns, limit, overflows, pinned_broken, max_tokens, summaries, filtered, dropped, cut)
