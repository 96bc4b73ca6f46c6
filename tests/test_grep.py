from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory.cognition.grep_terms import grep_terms
from agent_memory.errors import StorageError
from agent_memory.models import LogPosition, LogRecord, Role, TurnId
from agent_memory.storage.grep import GrepHit, RipgrepJournalSearch, content_pattern, find_ripgrep, matched_line
from agent_memory.storage.journal import JsonlJournal, segment_name

FILLER = ["what a lovely morning", "remind me to water the plants", "the meeting moved to next week"]


def turn(n: int, content: str, *, namespace: str = "default", session_id: str = "s1") -> LogRecord:
    return LogRecord(
        TurnId(f"turn-{n}"),
        namespace,
        session_id,
        n,
        Role.USER if n % 2 else Role.ASSISTANT,
        content,
        datetime(2026, 3, 1, 12, n % 60, tzinfo=UTC),
        None,
    )


async def write_log(log_dir: Path, records: Sequence[LogRecord], segment_max_bytes: int = 1 << 20) -> list[LogPosition]:
    journal = await JsonlJournal.open(log_dir, fsync=False, segment_max_bytes=segment_max_bytes)
    positions = await journal.append_many(list(records))
    await journal.aclose()
    return positions


async def log_of(tmp_path: Path, *contents: str) -> tuple[RipgrepJournalSearch, list[LogPosition]]:
    """A log of FILLER turns then `contents`, one turn each; positions[i] is the turn of contents[i]."""
    records = [turn(n, text) for n, text in enumerate([*FILLER, *contents])]
    positions = await write_log(tmp_path / "logs", records)
    return RipgrepJournalSearch(tmp_path / "logs"), positions[len(FILLER) :]


def at(position: LogPosition) -> tuple[int, int]:
    return position.segment, position.offset


def addresses(hits: Sequence[GrepHit]) -> list[tuple[int, int]]:
    return [(h.segment, h.offset) for h in hits]


async def test_a_number_is_found_exactly(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, "my PIN is 4921", "my locker is 4912")
    hits = await search.search(["4921"], namespace="default", limit=10)
    assert hits == [GrepHit(positions[0].segment, positions[0].offset, ("4921",))]


async def test_a_quoted_phrase_is_found_by_the_terms_of_its_query(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, 'she said "see you at the lighthouse" and left', "see you later")
    terms = grep_terms('what did she mean by "see you at the lighthouse"?')
    assert terms == ["see you at the lighthouse"]
    assert addresses(await search.search(terms, namespace="default", limit=10)) == [at(positions[0])]


async def test_an_identifier_matches_literally_not_as_a_regex(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, "I renamed config_v2.yaml today", "config_v2Xyaml is a typo")
    hits = await search.search(["config_v2.yaml"], namespace="default", limit=10)
    assert addresses(hits) == [at(positions[0])]


async def test_matching_ignores_case_also_beyond_ascii(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, "Flying to LISBON on Friday", "the École Normale called")
    hits = await search.search(["lisbon"], namespace="default", limit=10)
    assert hits == [GrepHit(*at(positions[0]), ("lisbon",))]
    assert addresses(await search.search(["école normale"], namespace="default", limit=10)) == [at(positions[1])]


async def test_other_namespaces_are_never_returned(tmp_path: Path) -> None:
    records = [turn(1, "the code is 7731", namespace="alice"), turn(2, "the code is 7731", namespace="bob")]
    positions = await write_log(tmp_path / "logs", records)
    search = RipgrepJournalSearch(tmp_path / "logs")
    assert addresses(await search.search(["7731"], namespace="bob", limit=10)) == [at(positions[1])]
    assert await search.search(["7731"], namespace="carol", limit=10) == []


@pytest.mark.parametrize("term", ["sess-9981", "turn-4", "2026-03-01", "12:04", "assistant", "default", "checksum"])
async def test_a_term_outside_the_content_is_not_a_hit(tmp_path: Path, term: str) -> None:
    await write_log(tmp_path / "logs", [turn(4, "nothing to see here", session_id="sess-9981")])
    assert await RipgrepJournalSearch(tmp_path / "logs").search([term], namespace="default", limit=10) == []


@pytest.mark.parametrize("term", ["sess-9981", "turn-4", "2026-03-01", "12:04", "assistant", "default", "checksum"])
async def test_ripgrep_itself_passes_over_a_term_outside_the_content(tmp_path: Path, term: str) -> None:
    """The pattern, not the parsed check after it, keeps rg from sending back every line that holds a year or an
    id: the journal writes `at` right after `content`, and the pattern ends there."""
    await write_log(tmp_path / "logs", [turn(4, "nothing to see here", session_id="sess-9981")])
    segment = tmp_path / "logs" / segment_name(1)
    assert '","at":"' in segment.read_text()
    for wanted, code in ((term, 1), ("see here", 0)):
        args = [find_ripgrep(), f"--regexp={content_pattern([wanted])}", segment]
        found = await asyncio.to_thread(subprocess.run, args, capture_output=True)
        assert found.returncode == code, (wanted, found.stdout)


async def test_ripgrep_itself_passes_over_hex_that_only_a_checksum_holds(tmp_path: Path) -> None:
    """The content's end is matched through classes (content_end_pattern), not as a literal: a short hex term
    that is in the checksum, not the content, is still kept out by rg, and one in the content is still found."""
    content = "nothing to see here, only the 2D map"
    await write_log(tmp_path / "logs", [turn(4, content, session_id="s")])
    segment = tmp_path / "logs" / segment_name(1)
    checksum = json.loads(segment.read_text())["checksum"]
    pairs = (checksum[i : i + 2] for i in range(len(checksum) - 1))
    hex_term = next(pair for pair in pairs if pair not in content.casefold())
    for wanted, code in ((hex_term, 1), ("2d", 0), ("MAP", 0)):
        args = [find_ripgrep(), f"--regexp={content_pattern([wanted])}", segment]
        found = await asyncio.to_thread(subprocess.run, args, capture_output=True)
        assert found.returncode == code, (wanted, found.stdout)


async def test_a_phrase_outside_the_content_is_not_a_hit(tmp_path: Path) -> None:
    """A phrase is matched without the content's tail (nothing but a session or a namespace can hold a space), so
    a session named with it reaches the parsed check, which keeps it out."""
    records = [
        turn(4, "nothing to see here", session_id="trip to lisbon"),
        turn(5, "we planned the Trip to Lisbon", session_id="s2"),
        turn(6, "booked BA117 for the trip", session_id="trip to lisbon"),
    ]
    positions = await write_log(tmp_path / "logs", records)
    search = RipgrepJournalSearch(tmp_path / "logs")
    assert addresses(await search.search(["trip to lisbon"], namespace="default", limit=10)) == [at(positions[1])]
    hits = await search.search(["trip to lisbon", "ba117"], namespace="default", limit=10)
    assert [(at(positions[i]), terms) for i, terms in ((1, ("trip to lisbon",)), (2, ("ba117",)))] == sorted(
        ((h.segment, h.offset), h.terms) for h in hits
    )


async def test_a_term_outside_the_content_does_not_count_for_a_turn_that_matches_another(tmp_path: Path) -> None:
    await write_log(tmp_path / "logs", [turn(4, "booked flight BA117", session_id="sess-9981")])
    hits = await RipgrepJournalSearch(tmp_path / "logs").search(["sess-9981", "BA117"], namespace="default", limit=5)
    assert [h.terms for h in hits] == [("BA117",)]


async def test_quotes_and_backslashes_in_content_are_found(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, 'the file is C:\\temp\\new and it says "hello" twice', 'say "hi"')
    terms = ["C:\\temp\\new", '"hello"']
    hits = await search.search(terms, namespace="default", limit=10)
    assert hits == [GrepHit(*at(positions[0]), tuple(terms))]
    assert addresses(await search.search(['"hi"'], namespace="default", limit=10)) == [at(positions[1])]


async def test_hits_rank_by_terms_then_matched_length_then_newest(tmp_path: Path) -> None:
    search, positions = await log_of(
        tmp_path,
        "alpha and beta together",  # two terms: first
        "only alpha here",  # one term of 5 chars, older
        "only kiwifruit here",  # one term of 9 chars: before every 5-char match
        "only alpha again",  # one term of 5 chars, newer
    )
    hits = await search.search(["alpha", "beta", "kiwifruit"], namespace="default", limit=10)
    assert addresses(hits) == [at(positions[i]) for i in (0, 2, 3, 1)]
    assert hits[0].terms == ("alpha", "beta")


async def test_offsets_and_segments_are_the_journals_own(tmp_path: Path) -> None:
    records = [turn(n, f"entry {n} mentions the zeppelin " + "x" * 200) for n in range(40)]
    positions = await write_log(tmp_path / "logs", records, segment_max_bytes=2048)
    assert len({p.segment for p in positions}) >= 5
    hits = await RipgrepJournalSearch(tmp_path / "logs").search(["zeppelin"], namespace="default", limit=100)
    assert addresses(hits) == sorted(map(at, positions), reverse=True)  # one term each: newest first
    first = (tmp_path / "logs" / segment_name(hits[-1].segment)).read_bytes()
    assert first[hits[-1].offset :].startswith(b'{"v":1,"turn_id":"turn-0"')


async def test_limit_is_respected_and_a_long_stream_is_cut_short(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, *[f"note {n}: buy oat milk" for n in range(300)])
    assert len(await search.search(["oat milk"], namespace="default", limit=3)) == 3
    hits = await search.search(["oat milk"], namespace="default", limit=10)  # rg is stopped after 200 turns
    assert len(hits) == 10 and {at(p) for p in positions} >= set(addresses(hits))


async def test_stopping_an_rg_that_has_just_ended_loses_no_exit_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each search stops rg at its 4th hit, the log's last line, so rg often ends just as it is stopped. When asyncio
    owned rg, a kill that polled the child first reaped it, and asyncio logged that it lost the exit status (about 1
    search in 40-120); rg now runs under Popen on a worker thread, which alone reaps it."""
    search, _ = await log_of(tmp_path, *[f"order 5501 line {i}" for i in range(4)])
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        for _ in range(120):
            assert len(await search.search(["5501"], namespace="default", limit=1)) == 1
    assert not [r.getMessage() for r in caplog.records if "Unknown child process" in r.getMessage()]


async def test_terms_count_once_whatever_their_case(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, "Kubernetes again")
    hits = await search.search(["kubernetes", "KUBERNETES", " "], namespace="default", limit=10)
    assert hits == [GrepHit(*at(positions[0]), ("kubernetes",))]


async def test_nothing_to_search_finds_nothing(tmp_path: Path) -> None:
    search, _ = await log_of(tmp_path, "the PIN is 4921")
    assert await search.search([], namespace="default", limit=10) == []
    assert await search.search(["", "  "], namespace="default", limit=10) == []
    assert await search.search(["4921"], namespace="default", limit=0) == []
    assert await RipgrepJournalSearch(tmp_path / "missing").search(["4921"], namespace="default", limit=5) == []
    (tmp_path / "empty").mkdir()
    assert await RipgrepJournalSearch(tmp_path / "empty").search(["4921"], namespace="default", limit=5) == []


async def test_a_torn_line_is_skipped_and_an_undecodable_one_still_found(tmp_path: Path) -> None:
    search, positions = await log_of(tmp_path, "the PIN is 4921")
    segment = tmp_path / "logs" / segment_name(1)
    size = segment.stat().st_size
    with segment.open("ab") as fh:
        fh.write(b'{"v":1,"namespace":"default","content":"PIN 4921 and a bad byte \xff","at":"2026-03-20"}\n')
        fh.write(b'{"v":1,"namespace":"default","content":"PIN 4921 torn mid-wr')
    hits = await search.search(["4921"], namespace="default", limit=10)
    assert addresses(hits) == [(1, size), at(positions[0])]


async def test_a_failing_rg_raises_storage_error_with_its_message(tmp_path: Path) -> None:
    search, _ = await log_of(tmp_path, "the PIN is 4921")
    (tmp_path / "logs" / segment_name(7)).symlink_to(tmp_path / "nowhere")
    with pytest.raises(StorageError, match="No such file"):
        await search.search(["4921"], namespace="default", limit=10)


async def test_a_search_over_its_time_is_stopped(tmp_path: Path) -> None:
    await log_of(tmp_path, "the PIN is 4921")
    search = RipgrepJournalSearch(tmp_path / "logs", timeout=timedelta(0))
    with pytest.raises(StorageError, match="timed out"):
        await search.search(["4921"], namespace="default", limit=10)


def _children() -> set[int]:
    """This process's child processes, reaped or not (a zombie is still a child until it is waited for). A thread
    that ends while they are listed (a worker of another test in this process) is passed over: it had none."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            found.update(int(pid) for pid in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):  # the thread ended between the listing and the read
            continue
    return found


async def test_a_cancelled_search_stops_and_reaps_rg(tmp_path: Path) -> None:
    """rg blocked on a segment that never ends (a FIFO nobody writes) is killed and reaped when its search is
    cancelled, and the worker thread that read it ends."""
    search, _ = await log_of(tmp_path, "the PIN is 4921")
    fifo = tmp_path / "logs" / segment_name(9)
    os.mkfifo(fifo)
    before = _children()
    running = asyncio.create_task(search.search(["4921"], namespace="default", limit=10))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if _children() - before:
            break
    assert _children() - before  # rg is running, blocked on the FIFO
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    for _ in range(200):
        if not _children() - before:
            break
        await asyncio.sleep(0.01)
    assert not _children() - before


def test_a_missing_ripgrep_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"ripgrep==14\.1\.0"):
        find_ripgrep(tmp_path, path=str(tmp_path))
    assert find_ripgrep().name == "rg"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what did I say about cooking?", []),
        ("I like Paris and Cooking.", []),
        ("the API and NASA and IDs", []),
        ("What is my PIN? I think it was 4921", ["4921"]),
        ("I have 3 cats and 12 dogs", ["12"]),
        ('Find the "quarterly report" I mentioned', ["quarterly report"]),
        ("He said “hello there” to me", ["hello there"]),
        ("I don't know what 'foo bar' means, the dogs' bowls", ["foo bar"]),
        ("the \"x\" quote and '' empty", []),
        ("did I change config_v2.yaml yesterday?", ["config_v2.yaml"]),
        ("Tell me about the Golden Gate Bridge trip", ["Golden Gate Bridge"]),
        ("Golden Gate Bridge is red", ["Golden Gate Bridge"]),
        ("Did Alice Smith call about the B-52 model?", ["Alice Smith", "B-52"]),
        ("When did we visit New York City? And Los Angeles.", ["New York City", "Los Angeles"]),
        ("He works at the Bank of the West near 192.168.1.1", ["Bank of the West", "192.168.1.1"]),
        ("Conan O'Brien met Jean-Luc Picard in São Paulo", ["Conan O'Brien", "Jean-Luc Picard", "São Paulo"]),
        ("we paid $20 for 1,000 stickers, 10% off, pi is 3.14", ["$20", "1,000", "10%", "3.14"]),
        ("meeting at 10:30 in 2024 or 7am or 10:30pm", ["10:30", "2024", "7am", "10:30pm"]),
        ("prices in €15 or £3.50 in the 1990s", ["€15", "£3.50", "1990s"]),
        ("on 2024-03-01 or 3/14/2024", ["2024-03-01", "3/14/2024"]),
        ("upgrade to v2.1 on my iPhone15", ["v2.1", "iPhone15"]),
        ("use PostgreSQL, camelCase and snake_case_name", ["PostgreSQL", "camelCase", "snake_case_name"]),
        ("use os.path.join and e.g. the U.S. rules, Node.js", ["os.path.join", "Node.js"]),
        ("What did I tell GitHub Actions about COVID-19?", ["GitHub Actions", "COVID-19"]),
        (
            "email bob.smith@example.com or visit https://example.com/docs?a=1. thanks",
            ["bob.smith@example.com", "https://example.com/docs?a=1"],
        ),
        (
            "see /etc/hosts and ~/notes/todo.md and src/agent_memory/grep.py, and/or km/h",
            ["/etc/hosts", "~/notes/todo.md", "src/agent_memory/grep.py"],
        ),
        ("follow @alice_dev and #launch2024 about issue #42", ["@alice_dev", "#launch2024", "#42"]),
        ('my "PIN" is 4921, yes 4921, and "pin"', ["PIN", "4921"]),
        ("11 22 33 44 55 66 77 88 99 1010", ["11", "22", "33", "44", "55", "66", "77", "88"]),
    ],
)
def test_grep_terms(query: str, expected: list[str]) -> None:
    assert grep_terms(query) == expected


def test_without_names_a_full_name_is_no_term_and_the_rest_stay() -> None:
    """retrieval.grep_names = false (the default): the name and its words go, the number and the file stay."""
    query = "Did Liam Silva send the 4921 invoice as report_v2.pdf?"
    assert grep_terms(query) == ["Liam Silva", "4921", "report_v2.pdf"]
    assert grep_terms(query, names=False) == ["4921", "report_v2.pdf"]
    assert grep_terms("Tell me about the Golden Gate Bridge trip", names=False) == []


def test_rg_output_lines_give_the_path_the_offset_and_the_line() -> None:
    line = '{"content":"call 4921 at 10:30","at":"2024-01-01"}'
    raw = b"/data/logs/segment-00000002.jsonl\x00" + b"1234:" + line.encode() + b"\n"
    assert matched_line(raw) == ("/data/logs/segment-00000002.jsonl", 1234, line)
    assert matched_line(b"/data/a:b.jsonl\x0017:x\xffy\n") == ("/data/a:b.jsonl", 17, "x\ufffdy")  # not UTF-8
    assert matched_line(b"no separator here\n") is None and matched_line(b"/p\x00abc:line\n") is None


async def test_segments_are_searched_side_by_side_and_read_newest_first(tmp_path: Path) -> None:
    """Each segment has its own rg, several at once; the hits are those one rg reading the newest segment first
    would give, and an early stop takes the newest turns and reaps every rg it started."""
    records = [turn(n, f"entry {n} mentions the zeppelin " + "x" * 200) for n in range(60)]
    positions = await write_log(tmp_path / "logs", records, segment_max_bytes=2048)
    assert len({p.segment for p in positions}) >= 8
    newest = sorted(map(at, positions), reverse=True)
    before = _children()
    for processes in (1, 2, 5):
        search = RipgrepJournalSearch(tmp_path / "logs", processes=processes)
        assert addresses(await search.search(["zeppelin"], namespace="default", limit=100)) == newest
        assert addresses(await search.search(["zeppelin"], namespace="default", limit=2)) == newest[:2]
        assert addresses(await search.search(["entry 7 "], namespace="default", limit=5)) == [at(positions[7])]
        assert not _children() - before
