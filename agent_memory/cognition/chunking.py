"""A long turn cut into chunks: exact spans of its text, cut at the strongest boundary that leaves a chunk at least
half full (a blank line, then a line end, then a sentence end, then a space, else the size itself).

Why spans and not re-joined paragraphs (markdown_sections.split_text): a chunk's words are the turn's words in
order, `text[start:end]` with its edge whitespace trimmed, so a chunk read back against the logged turn is found at
its offsets, and the chunks together hold every non-blank character of the turn exactly once (a log or a code
listing keeps its line breaks). Greedy, one pass, linear in the text: an 8 MiB turn splits in milliseconds.

Why this size: each chunk is embedded alone, and all-MiniLM-L6-v2 reads at most 256 word pieces; a chunk
longer than that would be found by its first words only. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHARS_PER_TOKEN = 4
"""The default token counter's rule (cognition/tokens.py CharCounter): a chunk of N tokens is 4N characters."""
SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s")
PARAGRAPH = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One part of a turn: `text == turn[start:end]`, never blank, edge whitespace trimmed."""

    index: int
    start: int
    end: int
    text: str


def split_turn(text: str, *, max_tokens: int) -> list[Chunk]:
    """`text` in chunks of at most `max_tokens` tokens (4 characters a token), in order; [] for a blank text."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    size = max_tokens * CHARS_PER_TOKEN
    chunks: list[Chunk] = []
    position, length = 0, len(text)
    while position < length:
        end = length if length - position <= size else _cut(text, position, size)
        chunk = _trimmed(text, position, end, len(chunks))
        if chunk is not None:
            chunks.append(chunk)
        position = end
    return chunks


def _cut(text: str, start: int, size: int) -> int:
    """Where the chunk that starts at `start` ends: after the last boundary of the strongest kind found in the second
    half of its window, so no chunk is less than half full unless the text ends."""
    low, high = start + size // 2, start + size
    window = text[low:high]
    for found in (_last(PARAGRAPH, window), window.rfind("\n"), _last(SENTENCE_END, window), _last_space(window)):
        if found >= 0:
            return low + found + 1
    return high


def _last(pattern: re.Pattern[str], window: str) -> int:
    """The index of the last character of the pattern's last match in `window`, or -1."""
    end = -1
    for match in pattern.finditer(window):
        end = match.end() - 1
    return end


def _last_space(window: str) -> int:
    return max(window.rfind(" "), window.rfind("\t"))


def _trimmed(text: str, start: int, end: int, index: int) -> Chunk | None:
    piece = text[start:end]
    stripped = piece.strip()
    if not stripped:
        return None
    lead = len(piece) - len(piece.lstrip())
    return Chunk(index, start + lead, start + lead + len(stripped), stripped)
