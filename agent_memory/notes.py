"""`Notes`: what coding agents write on purpose, listed, read back with their label, and the boot context.

A component the manager builds in `open()` and delegates to (DESIGN.md, "How the code grows"): everything it
touches is in its constructor. Writing goes through the manager's `process_turns` (the log first, then one SQLite
transaction with the memory, its label and its outbox rows), so a note is as durable as any turn and reaches the
graph and the vectors the same way. Each note is its own session: notes are independent of one another, so nothing
of one is mixed into another's vector and no session lift carries one along with another.

The boot context (`boot`) is chosen from one consistent snapshot: the task's retrieval only orders the notes, and
every word, revision and status shown comes from a single SQLite statement. Superseded, forgotten and erased notes
are not in it, nor a handoff older than `notes.handoff_max_age_days`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agent_memory.cognition.tokens import TokenCounter
from agent_memory.config import NotesConfig
from agent_memory.errors import InvalidInput, MemoryNotFound
from agent_memory.models import Memory, MemoryStatus, RetrievalResult, TurnInput, TurnResult, new_id
from agent_memory.note_models import (
    MAX_NOTE_STEPS,
    WRITABLE_KINDS,
    Boot,
    BootItem,
    Note,
    NoteKind,
    NoteMeta,
    NotePage,
    NoteSource,
    meta_from_json,
    note_meta,
)
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.rows import dt, ts
from agent_memory.validation import check_identifier

log = logging.getLogger(__name__)
MAX_LIST = 200
GIT_TIMEOUT = 2.0
Write = Callable[[Sequence[TurnInput]], Awaitable[list[TurnResult]]]
Rank = Callable[[str, str, int], Awaitable[list[RetrievalResult]]]
"""(query, namespace, k) -> the manager's retrieval, best first."""


@dataclass(frozen=True, slots=True)
class _Row:
    memory_id: str
    kind: NoteKind
    meta: NoteMeta
    written_at: datetime
    content: str
    revision: int


class Notes:
    def __init__(
        self,
        records: SqliteRecords,
        write: Write,
        rank: Rank,
        counter: Callable[[], TokenCounter],
        clock: Callable[[], datetime],
        config: NotesConfig,
        data_dir: Path,
    ) -> None:
        self.records, self._write, self._rank, self._make_counter = records, write, rank, counter
        self._counter: TokenCounter | None = None
        self.clock, self.config, self.data_dir = clock, config, data_dir

    async def counter(self) -> TokenCounter:
        """cl100k_base, read on a worker thread on the first boot (tiktoken reads its tables for about 0.3 s, which
        the event loop of a daemon shared by several agents must not spend)."""
        if self._counter is None:
            self._counter = await asyncio.to_thread(self._make_counter)
        return self._counter

    # ----- writing -----------------------------------------------------------------------------------

    async def write(
        self,
        text: str,
        *,
        kind: str = "note",
        source: NoteSource | dict[str, Any] | None = None,
        tags: Sequence[str] = (),
        namespace: str = "default",
        agent: str | None = None,
        session_id: str | None = None,
        turn_number: int | None = None,
        kinds: Sequence[str] = WRITABLE_KINDS,
    ) -> Note:
        """Log and keep one note. `session_id` and `turn_number` name it for an idempotent import: the same pair
        again is refused (`DuplicateTurn`); by default each note is a session of its own."""
        meta = note_meta(kind, tags=tags, source=source, agent=agent, allowed=kinds)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("text: a note needs some words")
        if (session_id is None) != (turn_number is None):
            raise InvalidInput("session_id and turn_number: give both (an idempotent import) or neither")
        turn = TurnInput(
            session_id or f"note:{new_id()}",
            0 if turn_number is None else turn_number,
            text.strip(),
            role="user",
            namespace=namespace,
            note=meta,
        )
        result = (await self._write([turn]))[0]
        assert result.memory_id is not None  # a note is always kept (save_decider.note_decision)
        return await self.get(result.memory_id)

    async def handoff(
        self,
        done: str,
        next_steps: Sequence[str] | str,
        warnings: Sequence[str] | str = (),
        *,
        namespace: str = "default",
        agent: str | None = None,
    ) -> Note:
        """A handoff: what was done, what comes next, what to watch out for. The next agent's boot opens with the
        latest one."""
        steps, cautions = _items("next_steps", next_steps), _items("warnings", warnings)
        for name, given in (("next_steps", steps), ("warnings", cautions)):
            if len(given) > MAX_NOTE_STEPS:
                raise InvalidInput(f"{name}: {len(given)} given, at most {MAX_NOTE_STEPS}")
        if not isinstance(done, str) or not done.strip():
            raise InvalidInput("done: say what was done")
        if not steps:
            raise InvalidInput("next_steps: name at least one next step")
        lines = [f"Handoff: {done.strip()}", "Next steps:", *(f"- {s}" for s in steps)]
        if cautions:
            lines += ["Warnings:", *(f"- {w}" for w in cautions)]
        return await self.write("\n".join(lines), kind="handoff", namespace=namespace, agent=agent, kinds=("handoff",))

    # ----- reading -----------------------------------------------------------------------------------

    async def get(self, memory_id: str, memory: Memory | None = None, *, check_source: bool = False) -> Note:
        """The note `memory_id` is (MemoryNotFound when it is no note), with its source checked against git when
        `check_source`."""
        rows = await self.records._fetch(
            "SELECT kind, tags, source, agent, written_at FROM notes WHERE memory_id = ?", (memory_id,)
        )
        if not rows:
            raise MemoryNotFound(memory_id)
        memory = memory or await self.records.get_memory(memory_id)
        meta = _meta(rows[0][:4])
        note = Note(memory, meta, _at(rows[0][4]))
        if check_source and meta.source is not None:
            stale, why = await self._stale(meta.source)
            note = Note(memory, meta, note.written_at, stale, why)
        return note

    async def label(self, memory_id: str) -> NoteMeta | None:
        """The label of `memory_id` if it is a note, else None."""
        rows = await self.records._fetch(
            "SELECT kind, tags, source, agent, written_at FROM notes WHERE memory_id = ?", (memory_id,)
        )
        return _meta(rows[0][:4]) if rows else None

    async def list_notes(
        self,
        *,
        namespace: str = "default",
        kind: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> NotePage:
        """The active notes, newest first, `limit` at a time; `next_cursor` continues where a page ended."""
        check_identifier("namespace", namespace)
        if kind is not None:
            note_meta(kind)  # a clear error for an unknown kind
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
            raise InvalidInput(f"limit: {limit!r} is not a number of notes (1-{MAX_LIST})")
        where, params = ["n.namespace = ?", "m.status = 'active'"], [namespace]
        if kind is not None:
            where.append("n.kind = ?")
            params.append(kind)
        if since is not None:
            where.append("n.written_at >= ?")
            params.append(ts(since) or "")
        if cursor is not None:
            at, memory_id = _cursor(cursor)
            where.append("(n.written_at < ? OR (n.written_at = ? AND n.memory_id < ?))")
            params += [at, at, memory_id]
        rows = await self.records._fetch(
            "SELECT n.memory_id, n.written_at, n.kind, n.tags, n.source, n.agent FROM notes n "
            f"JOIN memories m USING (memory_id) WHERE {' AND '.join(where)} "
            "ORDER BY n.written_at DESC, n.memory_id DESC LIMIT ?",
            (*params, limit + 1),
        )
        page = rows[:limit]
        memories = await self.records.get_memories([row[0] for row in page])
        notes = [Note(memories[row[0]], _meta(row[2:6]), _at(row[1])) for row in page if row[0] in memories]
        more = len(rows) > limit and page
        return NotePage(notes, _encode_cursor(page[-1][1], page[-1][0]) if more else None)

    async def recall(
        self, query: str, *, k: int = 8, namespace: str = "default"
    ) -> list[tuple[RetrievalResult, NoteMeta | None]]:
        """The manager's retrieval for `query`, each result with its note's label (None for a memory of a turn)."""
        results = await self._rank(query, namespace, k)
        labels = await self.labels([result.memory.memory_id for result in results])
        return [(result, labels.get(result.memory.memory_id)) for result in results]

    async def labels(self, memory_ids: Sequence[str]) -> dict[str, NoteMeta]:
        """The labels of those of `memory_ids` that are notes."""
        found: dict[str, NoteMeta] = {}
        for start in range(0, len(memory_ids), 500):
            chunk = list(memory_ids[start : start + 500])
            rows = await self.records._fetch(
                f"SELECT memory_id, kind, tags, source, agent FROM notes WHERE memory_id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            found |= {row[0]: _meta(row[1:5]) for row in rows}
        return found

    async def counts(self, namespace: str = "default") -> dict[str, int]:
        """How many active notes of each kind `namespace` holds."""
        check_identifier("namespace", namespace)
        rows = await self.records._fetch(
            "SELECT n.kind, count(*) FROM notes n JOIN memories m USING (memory_id) "
            "WHERE n.namespace = ? AND m.status = 'active' GROUP BY n.kind",
            (namespace,),
        )
        return {str(kind): int(count) for kind, count in rows}

    # ----- the boot context --------------------------------------------------------------------------

    async def boot(self, task: str = "", *, budget_tokens: int = 600, namespace: str = "default") -> Boot:
        """The latest handoff, then the decisions and warnings most relevant to `task` (the newest when there is
        no task), then open questions: as many as `budget_tokens` holds, counted over the whole text."""
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or not 50 <= budget_tokens <= 100_000:
            raise InvalidInput(f"budget_tokens: {budget_tokens!r} is not a budget (50-100000 tokens)")
        check_identifier("namespace", namespace)
        if not isinstance(task, str):
            raise InvalidInput("task: expected text")
        found = await self._rank(task, namespace, self.config.boot_candidates) if task.strip() else []
        ranked: list[str] = [result.memory.memory_id for result in found]
        rows = await self._snapshot(namespace, ranked)
        order = {memory_id: i for i, memory_id in enumerate(ranked)}
        oldest = self.clock() - timedelta(days=self.config.handoff_max_age_days)
        handoffs = [r for r in rows if r.kind is NoteKind.HANDOFF and r.written_at >= oldest]
        handoff = max(handoffs, key=lambda r: (r.written_at, r.memory_id), default=None)

        def by_relevance(row: _Row) -> tuple[int, float]:
            return (order.get(row.memory_id, len(order)), -row.written_at.timestamp())

        decisions = sorted((r for r in rows if r.kind is NoteKind.DECISION), key=by_relevance)
        warnings = sorted((r for r in rows if _is_warning(r)), key=by_relevance)
        questions = sorted((r for r in rows if _is_question(r)), key=by_relevance)
        counter = await self.counter()
        return self._render(handoff, decisions, warnings, questions, budget_tokens, counter)

    async def _snapshot(self, namespace: str, ranked: Sequence[str]) -> list[_Row]:
        """Every note the boot may show, in one statement (one snapshot): the task's hits, the latest handoff and
        the newest of each section."""
        recent = self.config.recent_per_section
        marks = ", ".join("?" for _ in ranked) or "NULL"
        section = (
            "SELECT n.memory_id FROM notes n JOIN memories m USING (memory_id) "
            "WHERE n.namespace = ? AND m.status = 'active' AND {cond} ORDER BY n.written_at DESC LIMIT ?"
        )
        parts = [
            section.format(cond="n.kind = 'handoff'"),
            section.format(cond="n.kind = 'decision'"),
            section.format(cond="(n.kind = 'finding' OR n.tags LIKE '%\"warning\"%')"),
            section.format(cond="(n.tags LIKE '%\"question\"%' OR (n.kind = 'note' AND rtrim(m.content) LIKE '%?'))"),
        ]
        chosen = " UNION ".join(f"SELECT memory_id FROM ({part})" for part in parts)
        params: list[Any] = []
        for limit in (1, recent, recent, recent):
            params += [namespace, limit]
        rows = await self.records._fetch(
            "SELECT n.memory_id, n.kind, n.tags, n.source, n.agent, n.written_at, m.content, m.revision "
            "FROM notes n JOIN memories m USING (memory_id) "
            f"WHERE n.namespace = ? AND m.status = ? AND (n.memory_id IN ({chosen}) OR n.memory_id IN ({marks}))",
            (namespace, MemoryStatus.ACTIVE.value, *params, *ranked),
        )
        found = []
        for row in rows:
            meta = _meta(row[1:5])
            found.append(_Row(row[0], meta.kind, meta, _at(row[5]), row[6], row[7]))
        return found

    def _render(
        self,
        handoff: _Row | None,
        decisions: Sequence[_Row],
        warnings: Sequence[_Row],
        questions: Sequence[_Row],
        budget: int,
        counter: TokenCounter,
    ) -> Boot:
        head = "# Project memory\nRemembered notes; they may be out of date. The current code and the user win."
        parts, items, omitted = [head], [], 0
        used = counter.count(head)

        def add(section: str, text: str, row: _Row, *, header: str | None = None) -> bool:
            nonlocal used
            piece = f"{header}\n{text}" if header else text
            cost = counter.count("\n" + piece)
            if used + cost > budget:
                return False
            parts.append(piece)
            used += cost
            items.append(BootItem(section, row.memory_id, row.revision, row.kind, row.content))
            return True

        if handoff is not None:
            who = f" by {handoff.meta.agent}" if handoff.meta.agent else ""
            title = f"## Latest handoff ({handoff.written_at:%Y-%m-%d %H:%M} UTC{who}) [{_ref(handoff)}]"
            text = handoff.content
            if not add("handoff", text, handoff, header=title):
                shortened = _fit(text, budget - used - counter.count("\n" + title + "\n"), counter)
                if not shortened or not add("handoff", shortened, handoff, header=title):
                    omitted += 1
        shown: set[str] = {handoff.memory_id} if handoff else set()
        for heading, section, rows in (
            ("## Decisions", "decision", decisions),
            ("## Warnings", "warning", warnings),
            ("## Open questions", "question", questions),
        ):
            header: str | None = heading
            for row in rows:
                if row.memory_id in shown:
                    continue
                if add(section, _line(row), row, header=header):
                    shown.add(row.memory_id)
                    header = None
                else:
                    omitted += 1
        text = "\n".join(parts)
        return Boot(text, counter.count(text), budget, items, omitted, handoff.memory_id if handoff else None)

    # ----- provenance --------------------------------------------------------------------------------

    async def _stale(self, source: NoteSource) -> tuple[bool | None, str | None]:
        """Whether the source file changed since the commit the note names: `git diff --quiet COMMIT -- PATH` in
        the repository that holds it. None (with why) when that cannot be told."""
        if source.path is None or source.commit is None:
            return None, "the source names no file and commit"
        path = Path(source.path)
        where = path.parent if path.is_absolute() else self.data_dir.parent
        try:
            process = await asyncio.create_subprocess_exec(
                "git",
                "-C",
                str(where),
                "diff",
                "--quiet",
                source.commit,
                "--",
                str(path),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return None, f"git could not be run: {exc}"
        try:
            _, err = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            return None, f"git took over {GIT_TIMEOUT:.0f} s"
        if process.returncode == 0:
            return False, f"{source.path} is as it was at {source.commit}"
        if process.returncode == 1:
            return True, f"{source.path} changed since {source.commit}"
        return None, f"git could not compare: {err.decode('utf-8', 'replace').strip()[:200]}"


def _at(value: str) -> datetime:
    at = dt(value)
    assert at is not None
    return at


def _items(name: str, value: Sequence[str] | str) -> list[str]:
    values = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(v, str) for v in values):
        raise InvalidInput(f"{name}: expected text or a list of texts")
    return [v.strip() for v in values if v.strip()]


def _meta(columns: Sequence[Any]) -> NoteMeta:
    """A label from its columns: kind, tags, source, agent."""
    kind, tags, source, agent = columns
    data: dict[str, Any] = {"kind": kind, "tags": json.loads(tags), "agent": agent}
    if source:
        data["source"] = json.loads(source)
    return meta_from_json(data)


def _is_warning(row: _Row) -> bool:
    return row.kind is NoteKind.FINDING or "warning" in row.meta.tags


def _is_question(row: _Row) -> bool:
    if row.kind in (NoteKind.HANDOFF, NoteKind.DECISION) or _is_warning(row):
        return False
    return "question" in row.meta.tags or (row.kind is NoteKind.NOTE and row.content.rstrip().endswith("?"))


def _ref(row: _Row) -> str:
    return f"{row.kind.value} {row.memory_id} r{row.revision}"


def _line(row: _Row) -> str:
    source = row.meta.source
    where = ""
    if source is not None and (source.path or source.url):
        where = f" (source: {source.path or source.url}{f':{source.line}' if source.line else ''})"
    return f"- [{_ref(row)}] {_one_line(row.content)}{where}"


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " / ", text.strip())


def _encode_cursor(written_at: str, memory_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([written_at, memory_id]).encode()).decode().rstrip("=")


def _cursor(cursor: str) -> tuple[str, str]:
    try:
        at, memory_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(at, str) or not isinstance(memory_id, str):
            raise ValueError
        return at, memory_id
    except (ValueError, TypeError, UnicodeDecodeError):
        raise InvalidInput(f"cursor: {cursor[:40]!r} is not a cursor this store gave out") from None


def _fit(text: str, budget: int, counter: TokenCounter) -> str:
    """The longest prefix of `text`, cut at a word and marked with an ellipsis, within `budget` tokens."""
    if budget <= 2:
        return ""
    words = text.split(" ")
    low, high = 0, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count(" ".join(words[:middle]) + " …") <= budget:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low]) + " …" if low else ""
