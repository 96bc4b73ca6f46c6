"""The agent loop's proof (issue #21): a long synthetic conversation through AgentRuntime and a small window, with
facts stated early and asked about at the end.

`prove(turns=2000, facts=10)` opens a fresh store (the real embedder, no LLM: the heuristic save decision and fact
extraction) and sends `turns` user messages to one session through a 4,000-token window. The first 100 turns
state the facts among neutral small talk (window_bench's synthetic lines: no first-person statements the fact
extractor would take); the last `facts` turns ask about each one. The upstream is bench/chat_server.py, whose
responder answers briefly, and at a question answers with the fact's value only when the prompt it was sent
holds it. At every turn the window's two fits are read (no overflow, within the limit) and so is the window
itself (the system instruction and this turn's memory block pinned, first, in order, unchanged). At each
question: the memory block sent upstream holds the value, the fact is among the ChatTurn's fact ids, and the
upstream's answer names it. tests/test_runtime_proof.py runs a short form; `scripts/bench_runtime.py --proof`
the full one.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_memory.bench.chat_server import ChatServer, last_user_text, message_text
from agent_memory.bench.window_bench import user_text
from agent_memory.config import load_config
from agent_memory.manager import MemoryManager
from agent_memory.runtime import messages as rendering
from agent_memory.runtime.agent import AgentRuntime, ChatTurn
from agent_memory.runtime.messages import Message, WindowConfig
from agent_memory.runtime.prompt import SYSTEM_INSTRUCTION

WINDOW_TOKENS = 4000
FACT_TURNS = 100
SESSION = "proof"
UNKNOWN = "I do not know that."


@dataclass(frozen=True, slots=True)
class Fact:
    statement: str
    question: str
    values: tuple[str, ...]
    """What the memory block and the answer must hold (all of them)."""


FACTS = (
    Fact("By the way, my sister's name is Ilse.", "What is my sister's name?", ("Ilse",)),
    Fact("I work as a welder at Brightline.", "Where do I work, and as what?", ("welder", "Brightline")),
    Fact("I live in Tromso, up north.", "Which town do I live in?", ("Tromso",)),
    Fact("I am allergic to hazelnuts.", "What am I allergic to?", ("hazelnuts",)),
    Fact("My dog's name is Pepper.", "What is my dog called?", ("Pepper",)),
    Fact("I'm originally from Ghent.", "Where am I originally from?", ("Ghent",)),
    Fact("My name is Joran Vell.", "What is my name?", ("Joran Vell",)),
    Fact("My brother is called Tobias.", "What is my brother's name?", ("Tobias",)),
    Fact("I really love bouldering.", "Which sport do I love?", ("bouldering",)),
    Fact("I hate cilantro.", "Which herb do I hate?", ("cilantro",)),
)
BRIEF = ("Noted.", "Okay.", "Thanks, got it.", "Understood.", "Sounds good.")


@dataclass
class Recall:
    fact: Fact
    in_block: bool
    in_fact_ids: bool
    answered: bool
    memory_ids: int


@dataclass
class ProofReport:
    turns: int
    facts: int
    window_tokens: int
    seconds: float
    overflows: int = 0
    over_limit: int = 0
    pinned_broken: int = 0
    max_tokens: int = 0
    summaries: int = 0
    evicted: int = 0
    warnings: int = 0
    recalls: list[Recall] = field(default_factory=list)

    @property
    def recalled(self) -> int:
        return sum(r.in_block and r.in_fact_ids and r.answered for r in self.recalls)

    @property
    def ok(self) -> bool:
        clean = self.overflows == self.over_limit == self.pinned_broken == 0
        return clean and self.recalled == len(self.recalls) == self.facts


def memory_block(request: dict[str, Any]) -> str:
    """The memory block a request carried (the fenced system message), empty when it carried none."""
    blocks = [message_text(m) for m in request.get("messages", []) if m.get("role") == "system"]
    return "\n".join(b for b in blocks if "<memories" in b or "<known_facts" in b)


def responder(facts: Sequence[Fact]) -> Any:
    """Brief small talk; for a question about a fact, its values when the prompt holds them, else UNKNOWN."""
    asked = {f.question: f for f in facts}

    def answer(request: dict[str, Any]) -> str:
        fact = asked.get(last_user_text(request))
        if fact is None:
            return BRIEF[len(request.get("messages", [])) % len(BRIEF)]
        block = memory_block(request)
        return " and ".join(fact.values) if all(v in block for v in fact.values) else UNKNOWN

    return answer


def script(turns: int, facts: Sequence[Fact], *, seed: int = 7) -> list[str]:
    """The user's messages: the facts spread over the first FACT_TURNS turns, small talk, then the questions."""
    rng = random.Random(seed)
    messages = [user_text(rng, n) for n in range(turns - len(facts))]
    spots = [round(i * min(FACT_TURNS, len(messages)) / len(facts)) for i in range(len(facts))]
    for spot, fact in zip(spots, facts, strict=True):
        messages[spot] = f"{fact.statement} {messages[spot]}"
    return messages + [f.question for f in facts]


def check_window(report: ProofReport, runtime: AgentRuntime, turn: ChatTurn, request: dict[str, Any]) -> None:
    """This turn's fits and the window after it: no overflow, within the limit, the pinned messages first, in
    order, the system instruction unchanged and the memory block exactly the one sent upstream this turn."""
    window = runtime.window(SESSION)
    for trace in (turn.window_before, turn.window_after):
        report.overflows += trace.overflow
        report.over_limit += trace.after_tokens > trace.limit
        report.summaries += trace.summary_id is not None
        report.evicted += len(trace.evicted)
    report.max_tokens = max(report.max_tokens, window.tokens, turn.window_after.after_tokens)
    pinned = [m for m in window.messages() if m.pinned]
    first = window.messages()[: len(pinned)]
    system_ok = bool(pinned) and pinned[0].role == "system" and pinned[0].content == SYSTEM_INSTRUCTION
    memory = [m for m in pinned if m.role == "memory"]
    sent = [message_text(m) for m in request.get("messages", []) if m.get("role") == "system"]
    memory_ok = len(memory) <= 1 and (not memory or not sent_at_all(memory[0]) or render_memory(memory[0]) in sent)
    within = window.tokens <= window.config.limit_tokens
    report.pinned_broken += not (system_ok and memory_ok and first == pinned and within)


def sent_at_all(message: Message) -> bool:
    return bool(rendering.render(message.role, message.content))


def render_memory(message: Message) -> str:
    return rendering.render(message.role, message.content)


async def prove(turns: int = 2000, facts: int = 10, *, root: Path | None = None, seed: int = 7) -> ProofReport:
    """Run the conversation (in `root`, else a temporary folder) and report what was checked."""
    chosen = FACTS[:facts]
    messages = script(turns, chosen, seed=seed)
    with tempfile.TemporaryDirectory() as scratch:
        config = load_config(environ={}, data_dir=str(root or Path(scratch)), journal__fsync="never")
        with ChatServer(responder(chosen), name="proof-upstream") as upstream:
            async with MemoryManager.open(config) as manager:
                window = WindowConfig(limit_tokens=WINDOW_TOKENS)
                async with AgentRuntime(manager, "openai/proof", window, **upstream.model_options()) as runtime:
                    report = await _converse(runtime, manager, upstream, messages, chosen)
    return report


async def _converse(
    runtime: AgentRuntime, manager: MemoryManager, upstream: ChatServer, messages: Sequence[str], facts: Sequence[Fact]
) -> ProofReport:
    report = ProofReport(len(messages), len(facts), WINDOW_TOKENS, 0.0)
    questions = {f.question: f for f in facts}
    started = time.perf_counter()
    for text in messages:
        turn = await runtime.chat(SESSION, text)
        (request,) = upstream.requests
        upstream.requests.clear()
        block = memory_block(request)
        check_window(report, runtime, turn, request)
        report.warnings += len(turn.warnings)
        if (fact := questions.get(text)) is not None:
            report.recalls.append(await _recall(manager, fact, turn, block))
    report.seconds = time.perf_counter() - started
    return report


async def _recall(manager: MemoryManager, fact: Fact, turn: ChatTurn, block: str) -> Recall:
    held = await manager.facts()
    ids = {f.fact_id for f in held if any(v.lower() in f.value.lower() for v in fact.values)}
    return Recall(
        fact,
        in_block=all(v in block for v in fact.values),
        in_fact_ids=bool(ids) and ids <= set(turn.fact_ids),
        answered=all(v in turn.answer for v in fact.values),
        memory_ids=len(turn.memory_ids),
    )


def render(report: ProofReport) -> str:
    """The proof's figures, as lines for a terminal or docs/benchmarks.md."""
    r = report
    lines = [
        f"{r.turns:,} turns through a {r.window_tokens:,}-token window in {r.seconds:.0f} s "
        f"({r.seconds / r.turns * 1000:.0f} ms a turn): {r.overflows} overflows, {r.over_limit} fits over the limit, "
        f"pinned broken on {r.pinned_broken} turns, at most {r.max_tokens:,} tokens; {r.summaries} summaries, "
        f"{r.evicted} messages evicted; {r.warnings} warnings",
        f"facts stated in the first {FACT_TURNS} turns, recalled at the end: {r.recalled} of {r.facts}",
    ]
    for recall in r.recalls:
        marks = f"block {'yes' if recall.in_block else 'NO'}, fact id {'yes' if recall.in_fact_ids else 'NO'}, "
        marks += f"answer {'yes' if recall.answered else 'NO'}, {recall.memory_ids} memories sent"
        lines.append(f"  {recall.fact.question} -> {' / '.join(recall.fact.values)}: {marks}")
    return "\n".join(lines)
