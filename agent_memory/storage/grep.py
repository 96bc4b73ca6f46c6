"""Exact search of the raw log with ripgrep: numbers, identifiers and quoted text that embeddings blur.

ripgrep runs as child processes (never through a shell), one a log segment and up to one a core at once,
started and read on a worker thread that streams their output newest segment first, so the event loop never
blocks and a huge result is never held whole. Only a turn's `content` may match: the pattern requires the rest of
the term's JSON string to end where the content does (content_pattern), so rg itself passes over a term that
occurs only in a turn id, a session id, a checksum or the timestamp (a year or "10:30" is in every `at`, and would
otherwise send back the whole log). Every line rg reports is then parsed here and kept only for the asked
namespace and a term really in its content.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from agent_memory.errors import StorageError
from agent_memory.storage.journal import SEGMENT_RE

CANDIDATES_PER_RESULT = 4  # stop rg once this many matching turns per wanted hit are in hand (parsing is the cost)
STREAM_LIMIT = 64 << 20  # longest rg output line accepted: one log record with its path and offset
RUST_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")  # regex_syntax::is_meta_character: escaping these is always valid
JSON_STRING_UNIT = r'(?:(?-u:[^"\\])|\\.)'  # one unit of a JSON string's text: a byte, or a backslash escape
CONTENT_END = '","at":"'  # how a record's content string ends: `at` always follows it (journal.record_to_dict)
NO_CONTROL_BYTES = r"\x00-\x1f"  # never raw in a log line: JSON escapes them (content_end_pattern)
RG_OPTIONS = (  # one segment a process; each match as `path NUL byte-offset : line` (matched_line)
    "--no-config",
    "--text",
    "--encoding=none",
    "--with-filename",
    "--null",
    "--byte-offset",
    "--no-line-number",
    "--no-heading",
    "--color=never",
)


@dataclass(frozen=True, slots=True)
class GrepHit:
    """A turn whose content holds some of the searched terms, addressed as the journal addresses it."""

    segment: int
    offset: int  # byte offset of the line start in the segment: the record's address
    terms: tuple[str, ...]  # which of the searched terms this turn's content contains

    @property
    def matched_chars(self) -> int:
        return sum(len(term) for term in self.terms)


def find_ripgrep(scripts: Path | None = None, path: str | None = None) -> Path:
    """The `rg` the `ripgrep` wheel installs beside this interpreter's scripts, else the first on `path` ($PATH)."""
    bundled = (scripts or Path(sysconfig.get_path("scripts"))) / "rg"
    if bundled.is_file():
        return bundled
    found = shutil.which("rg", path=path)
    if found is None:
        raise StorageError(
            f"ripgrep is missing: there is no rg at {bundled} nor on PATH. It comes from the ripgrep==14.1.0 "
            "package: pip install ripgrep==14.1.0"
        )
    return Path(found)


def rust_escape(text: str) -> str:
    return "".join("\\" + char if char in RUST_REGEX_META else char for char in text)


def json_escaped(text: str) -> str:
    """`text` as it is written inside a JSON string of the log (encode_record uses ensure_ascii=False)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def content_pattern(terms: Sequence[str]) -> str:
    """A regex matching a log line whose `content` holds any of `terms`, ignoring case.

    The terms come first, so ripgrep finds them with its literal search, and then the rest of a JSON string up to
    the key that follows `content` in every record (`","at":"`, journal.record_to_dict): inside a JSON string a
    quote is always escaped, so a term in any other field (an id, the session, a checksum) runs into that field's
    closing quote first and does not match. Terms are matched in their JSON-escaped form, as written, so quotes and
    backslashes in a term still match. A match that starts inside an escape (`n` of `\\n`) is weeded out by the
    parsed check of each line (terms_in_content); no term inside the content is ever missed.

    Measured against scanning each content from its key (the previous pattern, which gives rg no literal to find
    first), on the synthetic logs of scripts/bench_retrieve.py: 12.2 -> 7.1 ms p50 at 10k turns, 66.5 -> 26.9 ms
    at 100k, the same lines matched.

    A phrase (a term with a space in it) is matched alone, without the rest of the content after it. Ids,
    checksums and times hold no space, so the end of the content is not needed to keep them out; a session or a
    namespace named with the phrase is weeded out by the parsed check. The tail was costly: a long phrase ignoring
    case gives rg only a short prefix to look for ("i used "), and from each place it occurs the tail is scanned to
    the content's end. Three quoted sentences took one 64 MB segment of real text 204-300 ms with it, 40-59 ms
    without it.
    """
    words = [rust_escape(json_escaped(term)) for term in terms if not _phrase(term)]
    phrases = [rust_escape(json_escaped(term)) for term in terms if _phrase(term)]
    parts = [f"(?i:{'|'.join(words)}){JSON_STRING_UNIT}*?{content_end_pattern()}"] if words else []
    return "|".join([*parts, *([f"(?i:{'|'.join(phrases)})"] if phrases else [])])


def content_end_pattern() -> str:
    """CONTENT_END, matched with no literal longer than its quotes: each other character is a class of itself and
    the control bytes, which a JSON line never holds raw, so the lines it matches are the same.

    Written as a literal, `","at":"` is on every line, and the regex engine chose it to look for first when the
    term's own literals looked weak (a short term ignoring case: "2d" or "2D"), then scanned each line's content
    backwards from it. A term of hex characters paid the most, since a third of the lines hold it in an id or a
    checksum. On the 100k real-text log (122 MB), the 24 dev grep searches: `2D` 146 -> 17 ms, `a1` 133 -> 15 ms,
    `e5` 119 -> 15 ms, the others unchanged, the hits the same (the lab notes in docs/benchmarks.md).
    """
    return "".join(char if char == '"' else f"(?-u:[{rust_escape(char)}{NO_CONTROL_BYTES}])" for char in CONTENT_END)


def _phrase(term: str) -> bool:
    return any(char.isspace() for char in term)


def distinct_terms(terms: Sequence[str]) -> tuple[str, ...]:
    """Non-blank terms, each once whatever its case (the search ignores case, so "Foo" and "foo" are one term)."""
    seen: dict[str, str] = {}
    for term in terms:
        if term.strip():
            seen.setdefault(term.casefold(), term)
    return tuple(seen.values())


def ranked(hits: Sequence[GrepHit], limit: int) -> list[GrepHit]:
    """Most distinct terms first, then the longest matched text, then the newest turn."""
    return sorted(hits, key=lambda h: (len(h.terms), h.matched_chars, h.segment, h.offset), reverse=True)[:limit]


def matched_line(raw: bytes) -> tuple[str, int, str] | None:
    """(path, offset of the line, line text) of one line of rg's output, or None when it is not a match line.

    rg prints `path NUL offset : line`: the path is the one it was given, the NUL cannot occur in a log line (JSON
    escapes it), and the offset is digits. Plain output replaced --json (measured on the 100k synthetic log, the
    grep questions' searches: 27.2 -> 22 ms p50): rg no longer escapes each line into JSON, and the line is parsed
    once here instead of twice. Bytes that are not UTF-8 are replaced, as they were when rg sent them base64."""
    path, separator, rest = raw.partition(b"\0")
    offset, colon, line = rest.partition(b":")
    if not separator or not colon or not offset.isdigit():
        return None
    return os.fsdecode(path), int(offset), line.rstrip(b"\n").decode("utf-8", errors="replace")


def terms_in_content(line: str, namespace: str, terms: Sequence[str]) -> tuple[str, ...]:
    """The terms the record on `line` holds in its content; () for another namespace or a torn or foreign line."""
    try:
        record: Any = json.loads(line)
    except ValueError:
        return ()
    if not isinstance(record, dict) or record.get("namespace") != namespace:
        return ()
    content = record.get("content")
    if not isinstance(content, str):
        return ()
    folded = content.casefold()
    return tuple(term for term in terms if term.casefold() in folded)


@dataclass(frozen=True, slots=True)
class _Search:
    """One search of one segment: what is wanted, and the segment's path (rg echoes the path as given)."""

    terms: tuple[str, ...]
    namespace: str
    path: str
    segment: int

    def args(self, rg: Path) -> list[str]:
        return [str(rg), *RG_OPTIONS, f"--regexp={content_pattern(self.terms)}", "--", self.path]

    def hit(self, raw: bytes) -> GrepHit | None:
        match = matched_line(raw)
        if match is None:
            return None
        path, offset, line = match
        found = terms_in_content(line, self.namespace, self.terms)
        return GrepHit(self.segment, offset, found) if path == self.path and found else None


class RipgrepJournalSearch:
    """Searches the journal's segments `log_dir/segment-NNNNNNNN.jsonl` with ripgrep, newest segment first."""

    def __init__(
        self, log_dir: Path, *, timeout: timedelta = timedelta(seconds=5), processes: int | None = None
    ) -> None:
        self._dir = log_dir
        self._timeout = timeout
        self._processes = max(1, processes or os.cpu_count() or 1)  # segments searched at once
        self._rg: Path | None = None  # looked up at the first search, so a missing rg fails a search, not startup

    async def search(self, terms: Sequence[str], *, namespace: str, limit: int) -> list[GrepHit]:
        """The turns of `namespace` whose content holds any of `terms` (ignoring case), best `limit` first.

        rg is stopped once `limit * CANDIDATES_PER_RESULT` turns are found, newest segments first, so on a
        common term the ranking is over those candidates, not over the whole log.

        The whole search (listing the segments, starting rg, reading and ranking its matches) runs on a worker
        thread; a search that is cancelled or times out kills rg, and the thread ends with it. Popen alone reaps
        rg: no asyncio child watcher is involved, so none can lose its exit status. asyncio's subprocess held the
        loop 2.5-3 ms per search inside a retrieval on the 10k synthetic store: Popen (0.7 ms), then the child
        watcher starting a thread to wait for rg and waiting for that thread to run, while the embedder, the
        keyword projection and the readers all wanted the GIL; the query's embedding, asked for just after, started
        3.1 ms into a grep question instead of 0.3 ms. (Popen on the loop with only the reading on a thread
        measured the same as this: p95 18.3 vs 18.5 ms, interleaved.) Listing the segments on the loop cost 0.6 ms
        a search there: each system call gives up the GIL, and getting it back waits for the busy threads.
        """
        wanted = distinct_terms(terms)
        if not wanted or limit <= 0:
            return []
        if self._rg is None:
            self._rg = find_ripgrep()
        stop = threading.Event()
        started: list[subprocess.Popen[bytes]] = []
        seconds = self._timeout.total_seconds()
        try:
            async with asyncio.timeout(seconds):
                scan = _Scan(self._rg, self._dir, wanted, namespace, limit, stop, started, self._processes)
                return await asyncio.to_thread(scan.run)
        except TimeoutError as exc:
            _abandon(stop, started)
            raise StorageError(f"ripgrep search of {self._dir} timed out after {seconds:g}s and was stopped") from exc
        except BaseException:  # cancelled: stop rg, so the thread ends now
            _abandon(stop, started)
            raise


@dataclass(frozen=True, slots=True)
class _Running:
    """One segment's rg, its errors in a temporary file: a pipe nobody reads while matches are read could stall it."""

    search: _Search
    process: subprocess.Popen[bytes]
    errors: IO[bytes]

    def read(self, enough: int, stop: threading.Event) -> list[GrepHit]:
        """Its matches until rg ends or `enough` turns are in hand; rg is always reaped, and an rg that failed
        before it was stopped is a StorageError with its message."""
        try:
            stdout = self.process.stdout
            if stdout is None:  # unreachable with PIPE; this narrows the type
                raise StorageError("ripgrep was started without its output pipe")
            try:
                hits = [] if stop.is_set() else _collect(stdout, self.search, enough)
            finally:
                self._reap()
            if len(hits) < enough and self.process.returncode not in (0, 1):  # 1: nothing matched
                self.errors.seek(0)
                message = self.errors.read().decode("utf-8", errors="replace").strip()
                raise StorageError(
                    f"ripgrep failed (exit code {self.process.returncode}) searching {self.search.path}: {message}"
                )
            return hits
        finally:
            self.errors.close()

    def close(self) -> None:
        """Stop an rg whose matches are not needed."""
        self._reap()
        self.errors.close()

    def _reap(self) -> None:
        _stop(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process.wait()


@dataclass(frozen=True, slots=True)
class _Scan:
    """One search, as its worker thread runs it. `stop` and `started` let the loop kill rg if it gives up.

    Each segment has its own rg, up to `processes` at once, and their matches are read newest segment first: the
    older segments are searched while the newest is read, and a search that has enough turns from the newest
    stops the rest. One rg over every segment with `--sortr=path` (before 2026-12-05) read them one after
    another on one core: a term that few turns hold read the whole 117 MB log of the 100k real-text store in
    65-67 ms, where two segments side by side take about the time of the larger one."""

    rg: Path
    log_dir: Path
    terms: tuple[str, ...]
    namespace: str
    limit: int
    stop: threading.Event
    started: list[subprocess.Popen[bytes]]
    processes: int

    def run(self) -> list[GrepHit]:
        enough = self.limit * CANDIDATES_PER_RESULT
        waiting = deque(_Search(self.terms, self.namespace, path, n) for path, n in self._segments())
        running: deque[_Running] = deque()
        hits: list[GrepHit] = []
        try:
            while len(hits) < enough and (waiting or running) and not self.stop.is_set():
                while waiting and len(running) < self.processes:
                    running.append(self._start(waiting.popleft()))
                hits += running.popleft().read(enough - len(hits), self.stop)
        finally:
            for left in running:  # enough was in hand, or a search failed: the older segments are not needed
                left.close()
        return ranked(hits, self.limit)

    def _segments(self) -> list[tuple[str, int]]:
        """(path, number) of each segment, newest first."""
        if not self.log_dir.is_dir():
            return []
        found = ((str(path), SEGMENT_RE.match(path.name)) for path in self.log_dir.iterdir())
        return sorted(((path, int(match.group(1))) for path, match in found if match), key=lambda pn: -pn[1])

    def _start(self, search: _Search) -> _Running:
        errors = tempfile.TemporaryFile()  # noqa: SIM115 (the _Running it goes to closes it)
        args = search.args(self.rg)
        try:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors)
        except OSError as exc:
            errors.close()
            raise StorageError(f"Cannot start ripgrep ({args[0]}): {exc}") from exc
        self.started.append(process)
        return _Running(search, process, errors)


def _abandon(stop: threading.Event, started: Sequence[subprocess.Popen[bytes]]) -> None:
    stop.set()
    for process in started:
        _stop(process)


def _collect(stdout: IO[bytes], search: _Search, enough: int) -> list[GrepHit]:
    hits: list[GrepHit] = []
    while raw := stdout.readline(STREAM_LIMIT + 1):
        if len(raw) > STREAM_LIMIT:
            raise StorageError(f"ripgrep sent an output line over {STREAM_LIMIT} bytes from {search.path}")
        hit = search.hit(raw)
        if hit is not None:
            hits.append(hit)
            if len(hits) >= enough:  # enough in hand: the rest of the log is not needed
                break
    return hits


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Kill rg unless it has ended (a search stopped early, cancelled or timed out); Popen, which owns the reaping,
    checks first."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
