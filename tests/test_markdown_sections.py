"""markdown_sections: a notes file cut into self-contained pieces, one per section, oversized ones split."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.markdown_sections import (
    Section,
    import_session_id,
    infer_kind,
    markdown_files,
    parse_sections,
    pieces_of,
    read_pieces,
    split_text,
)
from agent_memory.validation import IDENTIFIER

CLAUDE_MD = """\
Read this first.

# Project

## Build

Run `make`.

### Tests

Run `make test`:

```sh
# not a heading: a shell comment
make test
```

## Empty

## Style ##

Short functions.
"""


def test_one_section_per_heading_with_its_path_and_line() -> None:
    sections = parse_sections(CLAUDE_MD, title="CLAUDE.md")
    assert [(s.title, s.line) for s in sections] == [
        ("CLAUDE.md", 1),
        ("CLAUDE.md > Project > Build", 5),
        ("CLAUDE.md > Project > Build > Tests", 9),
        ("CLAUDE.md > Project > Style", 20),
    ]
    assert sections[0].body == "Read this first."
    assert sections[2].body.startswith("Run `make test`:")
    assert "# not a heading: a shell comment" in sections[2].body  # inside the fence: code
    assert sections[3].body == "Short functions."  # the closing #'s are not part of the heading


def test_a_heading_at_a_shallower_level_leaves_the_deeper_ones() -> None:
    text = "# A\n## B\nb\n# C\nc\n### D\nd\n## E\ne\n"
    assert [s.title for s in parse_sections(text, title="f")] == ["f > A > B", "f > C", "f > C > D", "f > C > E"]


@pytest.mark.parametrize(
    ("text", "headings"),
    [
        ("~~~\n# code\n~~~\n# Real\nx\n", ["Real"]),
        ("````\n```\n# code\n```\n````\n# Real\nx\n", ["Real"]),  # a shorter fence does not close a longer one
        ("```\n# code\n~~~\n# still code\n", []),  # a tilde line does not close a backtick fence
        ("``` `x` ```\n# Real\nx\n", ["Real"]),  # inline code, not a fence
        ("#hashtag\n# Real\nx\n", ["Real"]),  # no space after #: a paragraph
        ("    # indented: code\n# Real\nx\n", ["Real"]),
    ],
)
def test_what_is_and_is_not_a_heading(text: str, headings: list[str]) -> None:
    titles = [s.path[-1] for s in parse_sections(text, title="f") if len(s.path) > 1]
    assert titles == headings


def test_empty_sections_and_files_give_nothing() -> None:
    assert parse_sections("", title="f") == []
    assert parse_sections("# A\n\n   \n## B\n", title="f") == []


def test_a_short_section_is_one_piece_that_names_where_it_came_from() -> None:
    pieces = pieces_of(parse_sections(CLAUDE_MD, title="CLAUDE.md"))
    assert pieces[1].text == "CLAUDE.md > Project > Build\n\nRun `make`."
    assert (pieces[1].part, pieces[1].parts) == (1, 1)


def test_an_oversized_section_is_split_at_paragraphs_each_part_headed() -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 30 for i in range(10)]
    section = Section(("notes.md", "Big"), 3, "\n\n".join(p.strip() for p in paragraphs))
    pieces = pieces_of([section], max_chars=500)
    assert len(pieces) > 1
    assert all(len(p.text) <= 500 for p in pieces)
    assert [p.part for p in pieces] == list(range(1, len(pieces) + 1))
    assert all(p.text.startswith(f"notes.md > Big (part {p.part}/{len(pieces)})\n\n") for p in pieces)
    bodies = [p.text.split("\n\n", 1)[1] for p in pieces]
    assert all(b.startswith("Paragraph ") for b in bodies)  # cut between paragraphs, not inside one


def test_split_goes_to_sentences_then_spaces_then_anywhere() -> None:
    sentences = "One two three. Four five six! Seven eight nine? Ten."
    assert split_text(sentences, 30) == ["One two three. Four five six!", "Seven eight nine? Ten."]
    assert split_text("aaaa bbbb cccc dddd", 10) == ["aaaa bbbb", "cccc dddd"]
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_a_code_block_with_blank_lines_stays_whole_when_it_fits() -> None:
    code = "```py\ndef f():\n\n    return 1\n```"
    text = "Intro paragraph that is long enough.\n\n" + code + "\n\nOutro."
    parts = split_text(text, len(code) + 2)
    assert code in parts


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .!?\n#`")), max_size=600), st.integers(1, 120))
def test_split_keeps_every_character_in_order_and_the_cap(text: str, cap: int) -> None:
    parts = split_text(text, cap)
    assert all(0 < len(p) <= cap for p in parts)
    assert re.sub(r"\s", "", "".join(parts)) == re.sub(r"\s", "", text)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab #\n`~")), max_size=400))
def test_parsing_loses_no_text_outside_headings(text: str) -> None:
    sections = parse_sections(text, title="f")
    assert all(s.body.strip() for s in sections)
    assert [s.line for s in sections] == sorted({s.line for s in sections})
    kept = "".join(s.body for s in sections)
    assert set(re.sub(r"[\s#]", "", kept)) <= set(re.sub(r"[\s#]", "", text))


@pytest.mark.parametrize(
    ("where", "heading", "kind"),
    [
        ("docs/decisions/0001-use-sqlite.md", "Context", "decision"),
        ("docs/adr/0002.md", "Status", "decision"),
        ("ADR-0003-kuzu.md", "x", "decision"),
        ("CLAUDE.md", "Decision: one daemon", "decision"),
        ("docs/runbooks/release.md", "Steps", "procedure"),
        ("HOWTO.md", "x", "procedure"),
        ("CLAUDE.md", "How to release", "procedure"),
        ("docs/address-book.md", "Roadmap", "note"),  # "adr" inside a word is not an ADR
        ("CLAUDE.md", "Style", "note"),
    ],
)
def test_kind_is_inferred_when_the_path_or_a_heading_says_it(where: str, heading: str, kind: str) -> None:
    assert infer_kind(where, Section(("f", heading), 1, "x"), "note") == kind


def test_markdown_files_sorted_skipping_hidden_folders_and_the_store(tmp_path: Path) -> None:
    for name in ("b.md", "a/z.md", "a/y.txt", ".git/x.md", "a/.hidden/x.md", ".agent_memory/x.md", "data/x.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("# x\ny\n")
    (tmp_path / "a" / "loop").symlink_to(tmp_path, target_is_directory=True)
    found = markdown_files(tmp_path, skip=[tmp_path / "data"])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a/z.md", "b.md"]
    assert markdown_files(tmp_path / "b.md") == [tmp_path / "b.md"]


def test_read_pieces_takes_a_bom_and_bad_bytes(tmp_path: Path) -> None:
    path = tmp_path / "n.md"
    path.write_bytes(b"\xef\xbb\xbf# T\nbad \xff byte\n")
    [piece] = read_pieces(path, title="n.md")
    assert piece.text == "n.md > T\n\nbad \ufffd byte"
    assert piece.section.line == 1


@pytest.mark.parametrize(
    "relpath", ["CLAUDE.md", "docs/decisions/0001.md", "My Notes/ünïcode file.md", "d/" * 80 + "long.md", "-x.md"]
)
def test_import_session_ids_are_valid_stable_and_distinct(relpath: str) -> None:
    session = import_session_id(relpath)
    assert IDENTIFIER.fullmatch(session)
    assert session == import_session_id(relpath)
    assert session != import_session_id(relpath + "x")
    if IDENTIFIER.fullmatch(f"import:{relpath}"):
        assert session == f"import:{relpath}"
