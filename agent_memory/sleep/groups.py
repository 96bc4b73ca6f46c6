"""Consolidation's candidate groups: memories that say overlapping things, found through an inverted index of their
keyword words (never by comparing all pairs), joined under the guards the design names.

Pure: no I/O. `consolidation.py` reads the candidates and commits the merges.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from agent_memory.cognition.retrieval import STOPWORDS

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
COMMON_SHARE = 0.05
"""A word carried by more than this share of the candidates (and more than 8 of them) is too common to say two
memories are about the same thing (a speaker's name, "today"): it is left out of every memory's words."""
PARTNERS_PER_SEED = 8
"""The best partners a seed keeps (by overlap, then similarity): enough to fill a group of merge_max_group."""


@dataclass(frozen=True, slots=True)
class MergeCandidate:
    """What grouping needs of one memory."""

    memory_id: str
    words: frozenset[str]
    valence: float
    generation: int
    vector: np.ndarray | None  # unit length, or None when the memory has no text vector
    priority: float  # the policy's compaction priority: more faded, less important first
    speaker: str  # who said it: the turn's role and transcript label (salience.speaker_label), "user|Caroline"


@dataclass(frozen=True, slots=True)
class GroupRules:
    overlap: float  # keyword_overlap_merge_threshold
    min_similarity: float  # merge_min_similarity
    valence_delta: float  # max_valence_delta_for_merge
    generation_gap: int  # max_generation_gap_for_merge
    max_size: int  # merge_max_group
    seeds: int = 0  # how many of the most faded candidates look for partners; 0: all of them


def keyword_words(keywords: Iterable[str]) -> frozenset[str]:
    """The content words of a memory's key phrases, lowercased, a plural's final s dropped."""
    words = (w.lower().replace("’", "'") for phrase in keywords for w in _WORD.findall(phrase))
    return frozenset(_singular(w) for w in words if w not in STOPWORDS and len(w) > 1)


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Shared words over the smaller set (the overlap coefficient); 0 when either is empty."""
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def candidate_groups(candidates: Sequence[MergeCandidate], rules: GroupRules) -> list[list[MergeCandidate]]:
    """Groups of 2..max_size candidates, most wanting consolidation first. Pairs come from the index, strongest
    overlap first; a pair joins two groups (or a memory to a group) only when every member would still keep the
    valence, generation and speaker guards with every other and the group stays within max_size."""
    groups: dict[int, list[int]] = {}
    group_of: dict[int, int] = {}
    for i, j in _pairs(candidates, rules):
        gi, gj = group_of.get(i), group_of.get(j)
        if gi is not None and gi == gj:
            continue
        members = (groups[gi] if gi is not None else [i]) + (groups[gj] if gj is not None else [j])
        if len(members) > rules.max_size or not _compatible([candidates[m] for m in members], rules):
            continue
        for old in (gi, gj):
            if old is not None:
                del groups[old]
        groups[min(members)] = members
        group_of.update(dict.fromkeys(members, min(members)))
    found = [[candidates[m] for m in sorted(members)] for members in groups.values()]
    return sorted(found, key=lambda g: -sum(c.priority for c in g) / len(g))


def _pairs(candidates: Sequence[MergeCandidate], rules: GroupRules) -> list[tuple[int, int]]:
    """Pairs over the overlap threshold and the similarity floor, strongest first. Each seed's shared-word counts
    come from the postings of its own words and its similarities from one matrix product; it keeps its
    PARTNERS_PER_SEED best partners (a group holds a few). The seeds are the `rules.seeds` candidates that most
    want consolidating (all when 0); their partners may be any candidate."""
    index: dict[str, list[int]] = defaultdict(list)
    for position, candidate in enumerate(candidates):
        for word in candidate.words:
            index[word].append(position)
    cap = max(8, int(COMMON_SHARE * len(candidates)))
    postings = {w: np.asarray(ids) for w, ids in index.items() if 1 < len(ids) <= cap}
    sizes = np.fromiter((sum(len(index[w]) <= cap for w in c.words) for c in candidates), dtype=np.int64)
    vectors = _matrix(candidates)
    order = sorted(range(len(candidates)), key=lambda k: -candidates[k].priority)
    scored: dict[tuple[int, int], tuple[float, float]] = {}
    for i in order[: rules.seeds] if rules.seeds else order:
        lists = [postings[w] for w in candidates[i].words if w in postings]
        if len(lists) < 2:
            continue
        partners, counts = np.unique(np.concatenate(lists), return_counts=True)
        shares = counts / np.minimum(sizes[i], sizes[partners])
        keep = (counts >= 2) & (partners != i) & (shares >= rules.overlap)
        partners, shares = partners[keep], shares[keep]
        similarities = vectors[partners] @ vectors[i]
        close = similarities >= rules.min_similarity
        partners, shares, similarities = partners[close], shares[close], similarities[close]
        for k in np.lexsort((-similarities, -shares))[:PARTNERS_PER_SEED].tolist():
            j = int(partners[k])
            scored.setdefault((min(i, j), max(i, j)), (float(shares[k]), float(similarities[k])))
    ranked = sorted(scored.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))
    return [pair for pair, _ in ranked]


def _matrix(candidates: Sequence[MergeCandidate]) -> np.ndarray:
    """The candidates' vectors as rows (zeros for one without a vector: similar to nothing)."""
    width = next((len(c.vector) for c in candidates if c.vector is not None), 1)
    matrix = np.zeros((len(candidates), width), dtype=np.float32)
    for row, candidate in enumerate(candidates):
        if candidate.vector is not None:
            matrix[row] = candidate.vector
    return matrix


def _compatible(members: Sequence[MergeCandidate], rules: GroupRules) -> bool:
    """A merge says one speaker's repeated thing once: one speaker's words echoed by the other ("Setting small goals
    helps me" / "Setting small goals is a great way ...") are a dialogue, and merged they lost who said what and
    their place among the turns beside them (LoCoMo, docs/benchmarks.md: "One speaker a merge")."""
    valences = [m.valence for m in members]
    generations = [m.generation for m in members]
    return (
        max(valences) - min(valences) <= rules.valence_delta
        and max(generations) - min(generations) <= rules.generation_gap
        and len({m.speaker for m in members}) == 1
    )
