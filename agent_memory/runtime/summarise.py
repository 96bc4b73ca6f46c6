"""Summarisers and relevance for the short-term window: extractive (offline, deterministic) and by an LLM.

The extractive summary keeps the sentences that carry the most: the first sentence of each message (where people
put the point) and keyword-dense ones (names, numbers, words the summarised messages share), within the token
cap, in their original order, each prefixed by its speaker. It estimates sentence sizes from characters and
counts only the finished summary, so it stays well under a millisecond for a few hundred messages.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agent_memory.cognition import tokens
from agent_memory.errors import LLMError
from agent_memory.runtime.messages import Message

if TYPE_CHECKING:
    from agent_memory.llm.client import LiteLLMClient

TokenCounter = Callable[[str], int] | tokens.TokenCounter
"""A plain `str -> int` callable, or a counter object from cognition/tokens.py (its `count` is used)."""
CountTokens = Callable[[str], int]

CHARS_PER_TOKEN = 3.5
"""A conservative size estimate for choosing sentences (English averages about 4 characters a token)."""
FIRST_SENTENCE_BOOST = 1.5
RECAP_WEIGHT = 0.8
"""A sentence an earlier summary kept weighs less than a new one of the same density, so summaries move on."""
_WORD = re.compile(r"[0-9A-Za-z][0-9A-Za-z'_-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_SPEAKER = re.compile(r"^(system|user|assistant|memory): ")
_STOP = (
    "a about above after again all also am an and any are as at be because been before being below between both "
    "but by can could did do does doing done down during each few for from further get got had has have having he "
    "her here hers him his how i if in into is it its itself just let me more most my no nor not now of off on "
    "once only or other our ours out over own please same she should so some such than that the their theirs them "
    "then there these they this those through to too under until up us very was we were what when where which "
    "while who whom why will with would yes you your yours ok okay thanks thank sure hi hello hey much many really lot "
    "great nice cool awesome glad may might must shall maybe perhaps"
)
STOPWORDS = frozenset(_STOP.split())


def counting(counter: TokenCounter | None) -> CountTokens:
    """The `str -> int` function behind `counter`; cl100k_base (cognition/tokens.py) when None."""
    if counter is None:
        return _cl100k()
    count = getattr(counter, "count", None)
    if callable(count):
        return count  # type: ignore[no-any-return]
    return counter  # type: ignore[return-value]


@functools.cache
def _cl100k() -> CountTokens:
    return tokens.TiktokenCounter().count


def content_words(text: str) -> frozenset[str]:
    """Lower-cased words minus stopwords, a plural "s" dropped: what relevance and keyword density compare."""
    return _content(_WORD.findall(text))


def _content(raw: Sequence[str]) -> frozenset[str]:
    found = set()
    for word in raw:
        word = word.lower()
        if (len(word) < 2 and not word.isdigit()) or word in STOPWORDS:
            continue
        found.add(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return frozenset(found)


def relevance(query: frozenset[str], documents: Sequence[frozenset[str]]) -> list[float]:
    """Each document's relevance to `query`, 0..1: the share of the query's idf weight (BM25's idf over
    `documents`) that the document's words cover. A word every document has weighs little; a rare one, much."""
    total = len(documents)
    df: Counter[str] = Counter()
    for words in documents:
        df.update(query & words)
    idf = {t: math.log(1 + (total - df[t] + 0.5) / (df[t] + 0.5)) for t in query}
    whole = sum(idf.values()) or 1.0
    return [sum(idf[t] for t in query & words) / whole for words in documents]


def clip(text: str, room: int, count: CountTokens, marker: str = " [...]") -> str:
    """The longest prefix of `text` that, with `marker`, counts at most `room` tokens ("" if not even the
    marker fits). Binary search over characters: about log2(len) counts."""
    if count(text) <= room:
        return text
    if count(marker) > room:
        marker = ""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid].rstrip() + marker) <= room:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + marker if lo else marker if count(marker) <= room else ""


class Summariser(Protocol):
    async def summarise(self, messages: Sequence[Message], *, max_tokens: int) -> str: ...


async def checked_summary(
    summariser: Summariser, messages: Sequence[Message], cap: int, count: CountTokens, fallback: Callable[[], str]
) -> tuple[str, str]:
    """`summariser`'s summary, validated (not empty, at most `cap` tokens), and how it was made; the `fallback`'s,
    and why, when it raised an LLMError or answered badly. Any other exception is a bug and propagates."""
    name = getattr(summariser, "name", type(summariser).__name__)
    try:
        text = await summariser.summarise(messages, max_tokens=cap)
    except LLMError as exc:
        why = f"{type(exc).__name__}: {exc}"
    else:
        size = count(text) if isinstance(text, str) else 0
        if isinstance(text, str) and text.strip() and size <= cap:
            return text.strip(), name
        why = f"its summary was {size:,} tokens, over the {cap:,} allowed" if size else "its summary was empty"
    return fallback(), f"extractively (the summariser {name} failed: {why[:300]})"


class ExtractiveSummariser:
    """The default: offline, deterministic and fast. The same messages always give the same summary."""

    name = "extractive"

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self._count = counting(counter)

    async def summarise(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        return self.summarise_now(messages, max_tokens=max_tokens)

    def summarise_now(
        self, messages: Sequence[Message], *, max_tokens: int, analyses: Sequence[Analysis] | None = None
    ) -> str:
        """The synchronous form. `analyses` (one per message, from `analyse`) lets the window hand over the
        sentence analysis it made when each message arrived, so summarising many messages stays cheap."""
        sentences, scores = _scored(analyses if analyses is not None else [analyse(m) for m in messages])
        picked = _pick(sentences, scores, max_tokens)
        text = _render(sentences, picked)
        while picked and self._count(text) > max_tokens:  # the estimate was short: drop the weakest pick
            picked.remove(min(picked, key=lambda i: (scores[i], -i)))
            text = _render(sentences, picked)
        if picked:
            return text  # counted just above: within max_tokens
        text = f"{len(messages)} earlier messages with nothing to keep (greetings, acknowledgements)."
        return clip(text, max_tokens, self._count)


class LLMSummariser:
    """A summary written by the configured LLM. Any failure (no model, a failed call, a timeout, bad JSON, an empty
    summary) raises an LLMError; the window then summarises extractively and says why in its trace."""

    def __init__(self, client: LiteLLMClient) -> None:
        self._client = client
        self.name = f"by LLM {client.model!r}"

    async def summarise(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        from agent_memory.llm.summary_prompt import ask_summary

        pairs = [(_speaker(m), m.content) for m in messages]
        return await ask_summary(self._client, pairs, max_tokens=max_tokens)


def _speaker(message: Message) -> str:
    return "summary of earlier messages" if message.role == "summary" else message.role


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of a message, analysed once: `bonus` counts its names and numbers, `size` estimates the
    tokens of its summary line."""

    line: int
    """Which line of a summarised summary it came from (-1 for other messages): each stays a line of its own."""
    role: str
    text: str
    first: bool
    words: frozenset[str]
    length: int
    bonus: float
    size: int


@dataclass(frozen=True, slots=True)
class Analysis:
    """A message's sentences, and its content words (for relevance and for how many messages share a word)."""

    sentences: tuple[Sentence, ...]
    words: frozenset[str]


def analyse(message: Message) -> Analysis:
    """The sentences of a message; a summary's lines keep their own speakers ("user: ...")."""
    if message.role != "summary":
        return _whole(_analysed(-1, message.role, message.content))
    out: list[Sentence] = []
    for number, line in enumerate(message.content.splitlines()):
        found = _SPEAKER.match(line)
        role, rest = (found.group(1), line[found.end() :]) if found else ("summary", line)
        out += _analysed(number, role, rest)
    return _whole(out)


def _whole(sentences: Sequence[Sentence]) -> Analysis:
    return Analysis(tuple(sentences), frozenset().union(*(s.words for s in sentences)))


def _analysed(line: int, role: str, text: str) -> list[Sentence]:
    out = []
    for index, piece in enumerate(p.strip() for p in _SENTENCE_END.split(text)):
        if not piece:
            continue
        raw = _WORD.findall(piece)
        words = _content(raw)
        bonus = 0.5 * sum(1 for w in raw[1:] if w[0].isupper()) + 0.5 * sum(1 for w in words if not w.isalpha())
        size = math.ceil((len(role) + 2 + len(piece)) / CHARS_PER_TOKEN)
        out.append(Sentence(line, role, piece, index == 0, words, len(raw), bonus, size))
    return out


def _scored(analyses: Sequence[Analysis]) -> tuple[list[tuple[int, Sentence]], list[float]]:
    """Keyword density: a word weighs more the more of the summarised messages share it; names and numbers add."""
    shared: Counter[str] = Counter()
    for analysis in analyses:
        shared.update(analysis.words)
    weight = [0.0, *(1.0 + 0.5 * math.log(n) for n in range(1, len(analyses) + 1))]  # by how many share a word
    sentences = [(i, s) for i, analysis in enumerate(analyses) for s in analysis.sentences]
    scores = [
        (sum(weight[shared[w]] for w in s.words) + s.bonus)
        / math.sqrt(s.length + 1)
        * (FIRST_SENTENCE_BOOST if s.first else 1)
        * (RECAP_WEIGHT if s.line >= 0 else 1)
        if s.words
        else 0.0
        for _, s in sentences
    ]
    return sentences, scores


def _pick(sentences: list[tuple[int, Sentence]], scores: list[float], max_tokens: int) -> list[int]:
    """Best first while the estimate fits; a sentence with no content word is never picked."""
    order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    used, picked = 0, []
    for i in order:
        cost = sentences[i][1].size + 1
        if scores[i] <= 0 or used + cost > max_tokens:
            continue
        used += cost
        picked.append(i)
    return sorted(picked)


def _render(sentences: list[tuple[int, Sentence]], picked: list[int]) -> str:
    """One line per message (per speaker of a summarised summary), sentences in their original order."""
    lines: list[str] = []
    last: tuple[int, int] | None = None
    for i in sorted(picked):
        message, s = sentences[i]
        if (message, s.line) == last:
            lines[-1] += " " + s.text
        else:
            lines.append(f"{s.role}: {s.text}")
            last = (message, s.line)
    return "\n".join(lines)
