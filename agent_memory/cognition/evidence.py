"""How much of a question a keyword hit answers: the share of the query's content words the memory holds.

Reciprocal rank fusion gives the keyword layer's first hit the same credit whether it matched every word of the
question or one weak one ("two", "tokens", "server"): BM25 ranks the store's memories against each other, and a
memory that shares only a generic word with a paraphrased question still comes first when no memory shares more.
With `retrieval.keyword_evidence` = f > 0, a keyword hit keeps min(1, coverage / f) of its contribution to the
fused score, where coverage is the share of the query's content words (cognition/retrieval.py's `query_words`,
stemmed crudely as below) found among the memory's words: a hit holding at least f of them keeps all of it. The
vector layer's contribution is left as it is.

Pure: no I/O. The stemmer only has to agree with itself ("invoices" and "invoice", "retried" and "retries"), not
with FTS5's porter stemmer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from agent_memory.models import LayerHit, Memory

_WORD = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ingly", "edly", "ies", "ied", "ing", "es", "ed", "ly", "s")


def stem(word: str) -> str:
    """A crude suffix strip, kept to words of four letters or more after the cut."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
    return word


def stems(words: Iterable[str]) -> set[str]:
    return {stem(w) for text in words for w in _WORD.findall(text.lower())}


def coverage(query: Sequence[str], content: str) -> float:
    """The share of the query's content words (stemmed) that the content holds; 1 when the query has none."""
    wanted = stems(query)
    if not wanted:
        return 1.0
    return len(wanted & stems([content])) / len(wanted)


def keyword_part(hit: LayerHit, *, weight: float, top: float, rrf_k: int, method: str) -> float:
    """The keyword layer's share of a memory's fused score (ranking.fuse_layers' formula for that layer)."""
    scaled = weight * max(hit.score, 0.0) / top if top > 0 else 0.0
    if method == "blend":
        return scaled
    rrf = weight / (rrf_k + hit.rank)
    return rrf + 0.5 * scaled / (rrf_k + 1) if method == "hybrid" else rrf


def weigh_keyword_evidence(
    base: Mapping[str, float],
    layers: Mapping[str, Mapping[str, LayerHit]],
    memories: Mapping[str, Memory],
    query: Sequence[str],
    *,
    full: float,
    weight: float,
    top: float,
    rrf_k: int,
    method: str,
) -> dict[str, float]:
    """`base` with each keyword hit's contribution scaled by min(1, coverage / `full`) (`top`: the keyword layer's
    best score, which the blend scales by). A memory whose row was not read keeps its score."""
    adjusted = dict(base)
    for memory_id, found in layers.items():
        hit, memory = found.get("keyword"), memories.get(memory_id)
        if hit is None or memory is None or memory_id not in adjusted:
            continue
        share = min(1.0, coverage(query, memory.content) / full)
        adjusted[memory_id] -= (1.0 - share) * keyword_part(hit, weight=weight, top=top, rrf_k=rrf_k, method=method)
    return adjusted
