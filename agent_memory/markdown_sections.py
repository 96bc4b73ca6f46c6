"""Markdown notes as memories: a file cut into one piece per section (`agent-memory import-markdown`).

A heading line (ATX: `#` to `######`, up to three spaces in) starts a section; the text before the first heading
is a section of its own; a `#` line inside a fenced code block (``` or ~~~) is code, not a heading. Each piece
starts with its heading path ("CLAUDE.md > Build > Tests"), so a note read alone, out of its file, still says
where it came from and what it is about. A section longer than the size cap is split at paragraph boundaries,
then at sentence ends, then at a space (or anywhere, for a word longer than the cap); a code block is kept whole
when it fits. Pure: no I/O but reading the files named, no daemon.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path

DEFAULT_MAX_CHARS = 2000
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
SKIPPED_DIRS = frozenset({".agent_memory"})
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")  # validation.IDENTIFIER: the rule a turn's id keeps
KIND_WORDS = (
    ("decision", re.compile(r"decision|(?<![a-z])adrs?(?![a-z])")),
    ("procedure", re.compile(r"procedure|how[ _-]?to|runbook|playbook")),
)


@dataclass(frozen=True, slots=True)
class Section:
    """One section of a file: its heading path (the file's title first), the 1-based line it starts on, and the
    text under its heading (the heading line itself is in `path`)."""

    path: tuple[str, ...]
    line: int
    body: str

    @property
    def title(self) -> str:
        return " > ".join(self.path)


@dataclass(frozen=True, slots=True)
class Piece:
    """What becomes one memory: a section, or one part of a section too long for one (`part` of `parts`)."""

    section: Section
    text: str
    part: int = 1
    parts: int = 1


def parse_sections(markdown: str, *, title: str) -> list[Section]:
    """The file's sections in order; a section with no text under its heading (only subsections) is left out,
    its heading still part of its subsections' paths."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []  # (level, heading) of the headings the current line is under
    start, body = 1, list[str]()
    fence: str | None = None
    for number, line in enumerate(markdown.splitlines(), 1):
        heading = None if fence else HEADING.match(line)
        if heading is None:
            fence = _fence_after(line, fence)
            body.append(line)
            continue
        _keep(sections, stack, title, start, body)
        level, text = len(heading.group(1)), (heading.group(2) or "").strip()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text or "#" * level))
        start, body = number, []
    _keep(sections, stack, title, start, body)
    return sections


def _fence_after(line: str, fence: str | None) -> str | None:
    """The open fence after `line`: a fence opens with 3+ backticks or tildes and closes with at least as many of
    the same character and nothing else on the line."""
    found = FENCE.match(line)
    if found is None:
        return fence
    marks, rest = found.groups()
    if fence is None:
        return None if marks[0] == "`" and "`" in rest else marks  # ```x`y is inline code, not a fence
    return None if marks[0] == fence[0] and len(marks) >= len(fence) and not rest.strip() else fence


def _keep(sections: list[Section], stack: list[tuple[int, str]], title: str, start: int, body: list[str]) -> None:
    text = "\n".join(body).strip("\n")
    if text.strip():
        sections.append(Section((title, *(heading for _, heading in stack)), start, _tidy(text)))


def _tidy(text: str) -> str:
    """Trailing spaces off each line and runs of blank lines down to one: the words, not the layout."""
    lines = [line.rstrip() for line in text.splitlines()]
    kept = [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]
    return "\n".join(kept).strip("\n")


def split_text(text: str, max_chars: int) -> list[str]:
    """`text` in parts of at most `max_chars` characters: whole paragraphs (a code block counts as one) packed
    greedily, a paragraph too long for one part cut at sentence ends, a sentence too long at a space, a word too
    long anywhere. Joined back with blank lines they hold every word of `text`, in order."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    if len(text) <= max_chars:
        return [text] if text.strip() else []
    pieces = [p for block in _blocks(text) for p in _fit(block, max_chars)]
    return _pack(pieces, max_chars, "\n\n")


def _blocks(text: str) -> Iterator[str]:
    """Paragraphs: runs of lines between blank lines, a fenced code block one run however many blank lines it has."""
    current: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        if not line.strip() and fence is None:
            if current:
                yield "\n".join(current)
            current = []
            continue
        fence = _fence_after(line, fence)
        current.append(line)
    if current:
        yield "\n".join(current)


def _fit(block: str, max_chars: int) -> list[str]:
    if len(block) <= max_chars:
        return [block]
    sentences = [s for s in SENTENCE_END.split(block) if s.strip()]
    if len(sentences) > 1:
        return _pack([p for s in sentences for p in _fit(s, max_chars)], max_chars, " ")
    return _hard_cut(block, max_chars)


def _hard_cut(text: str, max_chars: int) -> list[str]:
    """At the last space within the limit when there is one in its second half, else at the limit itself."""
    parts: list[str] = []
    while len(text) > max_chars:
        cut = text.rfind(" ", max_chars // 2, max_chars + 1)
        cut = cut if cut > 0 else max_chars
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    return [part for part in (*parts, text) if part.strip()]


def _pack(pieces: Sequence[str], max_chars: int, joiner: str) -> list[str]:
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + len(joiner) + len(piece) <= max_chars:
            parts[-1] += joiner + piece
        else:
            parts.append(piece)
    return parts


def pieces_of(sections: Sequence[Section], *, max_chars: int = DEFAULT_MAX_CHARS) -> list[Piece]:
    """Each section as the text of one memory, or of several when it is longer than `max_chars`. The cap counts
    the heading path line too, except that a body always gets at least half the cap (a very long path)."""
    pieces: list[Piece] = []
    for section in sections:
        whole = f"{section.title}\n\n{section.body}"
        if len(whole) <= max_chars:
            pieces.append(Piece(section, whole))
            continue
        room = max(max_chars - len(section.title) - len(" (part 999/999)\n\n"), max_chars // 2)
        parts = split_text(section.body, room)
        pieces.extend(
            Piece(section, f"{section.title} (part {i}/{len(parts)})\n\n{part}", i, len(parts))
            for i, part in enumerate(parts, 1)
        )
    return pieces


def infer_kind(where: str, section: Section, default: str) -> str:
    """'decision' when the file's path or a heading of the section names a decision or an ADR, 'procedure' when
    they name a procedure, a how-to or a runbook; else `default`."""
    haystack = " ".join((where, *section.path[1:])).lower()
    return next((kind for kind, words in KIND_WORDS if words.search(haystack)), default)


def markdown_files(root: Path, *, skip: Sequence[Path] = ()) -> list[Path]:
    """`root` itself when it is a file; else every *.md below it, sorted, outside hidden folders, .agent_memory
    and the folders in `skip` (the data directory, when it is inside). Symbolic links to folders are not
    followed (a link back up would never end)."""
    if root.is_file():
        return [root]
    skipped = [s.resolve() for s in skip]
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS]
        dirs[:] = [d for d in dirs if not any((here / d).resolve() == s for s in skipped)]
        found.extend(here / name for name in files if name.endswith(".md") and (here / name).is_file())
    return sorted(found)


def read_pieces(path: Path, *, title: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[Piece]:
    """The pieces of one file, read as UTF-8 (a byte that is not UTF-8 becomes U+FFFD, a BOM is dropped)."""
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    return pieces_of(parse_sections(text, title=title), max_chars=max_chars)


def import_session_id(relpath: str) -> str:
    """The session a file's notes are written under, `import:<relpath>`, so that importing it again is refused
    turn by turn as a repeat. A path a session id cannot hold (a space, a long path) keeps what it can and ends in
    a hash of the whole path, so it stays the same on every run and differs from every other path's."""
    plain = f"import:{relpath}"
    if SESSION_ID.fullmatch(plain):
        return plain
    safe = re.sub(r"[^A-Za-z0-9._:@/-]+", "-", relpath).strip("-")
    digest = blake2b(relpath.encode("utf-8"), digest_size=6).hexdigest()
    return f"import:{safe[:100]}-{digest}"
