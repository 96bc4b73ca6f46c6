"""Notes (issue #23): written on purpose, always kept, labelled, listed, booted from, and rebuilt by recovery."""

from __future__ import annotations

import subprocess
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from agent_memory import MemoryManager
from agent_memory.bench.coding_notes import load_notes
from agent_memory.cognition.tokens import TokenCounter, make_counter
from agent_memory.config import Config, load_config
from agent_memory.embeddings.text import Embedder
from agent_memory.errors import DuplicateTurn, InvalidInput, MemoryNotFound
from agent_memory.models import LogRecord, Role, TurnId, new_id, utc_now
from agent_memory.note_models import NoteKind, NoteMeta, NoteSource
from agent_memory.notes import Notes
from agent_memory.storage.journal import JsonlJournal


async def test_a_note_is_kept_by_the_shipped_defaults_whatever_its_words(judging: MemoryManager) -> None:
    """The save decision drops "ok, thanks" as phatic; written as a finding it is kept, with its label."""
    note = await judging.notes.write("ok, thanks", kind="finding", tags=["ci"], agent="codex")
    assert note.meta == NoteMeta(NoteKind.FINDING, ("ci",), None, "codex")
    assert note.memory.content == "ok, thanks"
    assert note.memory.revision == 1
    again = await judging.notes.get(note.memory.memory_id)
    assert again.meta.kind is NoteKind.FINDING
    assert (await judging.get(note.memory.memory_id)).memory_type.value == "semantic"


async def test_notes_are_found_by_retrieval_and_listed_newest_first_a_page_at_a_time(manager: MemoryManager) -> None:
    ids = []
    for i in range(5):
        note = await manager.notes.write(
            f"Decision {i}: the parser uses recursive descent, variant {i}.", kind="decision"
        )
        ids.append(note.memory.memory_id)
    await manager.notes.write("Run the migrations with make migrate before the tests.", kind="procedure")
    first = await manager.notes.list_notes(kind="decision", limit=2)
    assert [n.memory.memory_id for n in first.notes] == ids[::-1][:2]
    assert first.next_cursor is not None
    second = await manager.notes.list_notes(kind="decision", limit=2, cursor=first.next_cursor)
    third = await manager.notes.list_notes(kind="decision", limit=2, cursor=second.next_cursor)
    listed = [n.memory.memory_id for page in (first, second, third) for n in page.notes]
    assert listed == ids[::-1] and third.next_cursor is None
    found = await manager.retrieve("how do I run the migrations", k=3)
    assert "make migrate" in found[0].memory.content
    with pytest.raises(InvalidInput, match="cursor"):
        await manager.notes.list_notes(cursor="not-a-cursor")
    with pytest.raises(InvalidInput, match="kind"):
        await manager.notes.list_notes(kind="memo")


async def test_bad_notes_are_refused_saying_what_was_wrong(manager: MemoryManager) -> None:
    cases = [
        ({"text": "   "}, "text"),
        ({"text": "x", "kind": "handoff"}, "kind"),
        ({"text": "x", "tags": "ci"}, "tags"),
        ({"text": "x", "tags": ["a"] * 17}, "tags"),
        ({"text": "x", "source": {"path": "a.py", "line": 0}}, r"source\.line"),
        ({"text": "x", "source": {"commit": "not hex"}}, r"source\.commit"),
        ({"text": "x", "source": {"file": "a.py"}}, "unknown field"),
    ]
    for arguments, message in cases:
        with pytest.raises(InvalidInput, match=message):
            await manager.notes.write(**arguments)  # type: ignore[arg-type]
    assert (await manager.notes.list_notes()).notes == []
    with pytest.raises(MemoryNotFound):
        await manager.notes.get(new_id())


async def test_an_import_key_makes_a_note_idempotent(manager: MemoryManager) -> None:
    await manager.notes.write("Section one of the guide.", session_id="import:docs/guide.md", turn_number=1)
    with pytest.raises(DuplicateTurn):
        await manager.notes.write("Section one of the guide.", session_id="import:docs/guide.md", turn_number=1)
    assert len((await manager.notes.list_notes()).notes) == 1


async def test_boot_opens_with_the_latest_handoff_and_keeps_to_its_budget(manager: MemoryManager) -> None:
    await manager.notes.handoff("first pass at the cache", ["measure it"], namespace="p")
    decision = await manager.notes.write(
        "We keep SQLite as the source of truth for the cache index.", kind="decision", namespace="p"
    )
    await manager.notes.write("The cache test is flaky under load: it sleeps 10 ms.", kind="finding", namespace="p")
    await manager.notes.write("Should the cache be shared across workers?", namespace="p")
    latest = await manager.notes.handoff(
        "moved the cache behind an interface",
        ["wire the eviction policy", "bench it"],
        ["do not touch the lock"],
        namespace="p",
        agent="claude-code",
    )
    boot = await manager.notes.boot("cache eviction", budget_tokens=600, namespace="p")
    assert boot.handoff_id == latest.memory.memory_id
    assert boot.text.index("moved the cache") < boot.text.index("source of truth")
    assert "first pass" not in boot.text  # only the latest handoff
    assert {item.section for item in boot.items} == {"handoff", "decision", "warning", "question"}
    assert boot.tokens <= 600
    small = await manager.notes.boot("cache eviction", budget_tokens=60, namespace="p")
    assert small.tokens <= 60 and small.omitted > 0
    await manager.supersede(
        decision.memory.memory_id, "Postgres is the source of truth for the cache index.", expected_revision=1
    )
    after = await manager.notes.boot("cache eviction", namespace="p")
    assert "SQLite as the source" not in after.text
    assert (await manager.notes.boot("cache", namespace="other")).items == []


async def test_an_old_handoff_leaves_the_boot(config: Config, embedder: Embedder) -> None:
    now = [utc_now()]
    async with MemoryManager.open(config, embedder=embedder, clock=lambda: now[0]) as manager:
        await manager.notes.handoff("shipped the exporter", ["announce it"])
        assert (await manager.notes.boot("")).handoff_id is not None
        now[0] += timedelta(days=config.notes.handoff_max_age_days + 1)
        assert (await manager.notes.boot("")).handoff_id is None


async def test_recovery_rebuilds_a_logged_note_with_its_label(config: Config, embedder: Embedder) -> None:
    """A note in the log whose SQLite commit never happened (a crash between the two) comes back as a note."""
    async with MemoryManager.open(config, embedder=embedder):
        pass
    journal = await JsonlJournal.open(config.data_dir / "logs")
    meta = NoteMeta(NoteKind.DECISION, ("arch",), NoteSource(path="src/app.py", line=12), "codex")
    record = LogRecord(
        TurnId(new_id()),
        "default",
        f"note:{new_id()}",
        0,
        Role.USER,
        "Use one event loop per process.",
        utc_now(),
        None,
        note=meta,
    )
    await journal.append_many([record])
    await journal.aclose()
    async with MemoryManager.open(config, embedder=embedder) as manager:
        assert manager.recovered_turns == 1
        notes = (await manager.notes.list_notes()).notes
        assert [n.meta for n in notes] == [meta]
        assert notes[0].memory.content == "Use one event loop per process."


def committed_repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository holding app.py at one commit, and that commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    (repo / "app.py").write_text("RETRIES = 3\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return repo, commit


async def test_a_note_whose_source_file_changed_since_its_commit_is_stale(tmp_path: Path, embedder: Embedder) -> None:
    repo, commit = committed_repo(tmp_path)
    config = load_config(environ={}, data_dir=str(repo / ".agent_memory"))
    async with MemoryManager.open(config, embedder=embedder) as manager:
        note = await manager.notes.write(
            "We retry three times.", kind="decision", source={"path": "app.py", "commit": commit, "line": 1}
        )
        fresh = await manager.notes.get(note.memory.memory_id, check_source=True)
        assert fresh.stale is False
        (repo / "app.py").write_text("RETRIES = 5\n")
        changed = await manager.notes.get(note.memory.memory_id, check_source=True)
        assert changed.stale is True and "app.py changed since" in (changed.stale_reason or "")
        unknown = await manager.notes.write("Odd.", source={"path": "app.py", "commit": "deadbeef"})
        unsure = await manager.notes.get(unknown.memory.memory_id, check_source=True)
        assert unsure.stale is None and "git could not compare" in (unsure.stale_reason or "")


async def test_notes_recall_weighs_a_keyword_hit_by_the_share_of_the_question_it_holds(manager: MemoryManager) -> None:
    """memory_recall's path ranks with notes.keyword_evidence (1.0): on the shipped coding notes a paraphrased
    question's note comes first there, while retrieve(), with conversation's settings, buries it under keyword
    hits on one weak word ("errors"). Turned off, the two paths rank alike."""
    notes = load_notes()
    written = {}
    for note in notes.notes:
        kind = "note" if note.kind == "handoff" else note.kind
        written[note.note_id] = (await manager.notes.write(note.text, kind=kind)).memory.memory_id
    question = next(q for q in notes.queries if q.query_id == "q04")  # currency amounts kept without precision errors
    (wanted,) = [written[n] for n in question.relevant]
    assert manager.config.notes.keyword_evidence == 1.0 and manager.config.retrieval.keyword_evidence == 0.0
    recalled = [result.memory.memory_id for result, _ in await manager.notes.recall(question.text, k=5)]
    retrieved = [result.memory.memory_id for result in await manager.retrieve(question.text, k=5)]
    assert recalled[0] == wanted and wanted not in retrieved
    manager.config = manager.config.model_copy(
        update={"notes": manager.config.notes.model_copy(update={"keyword_evidence": 0.0, "graph_weight": 0.5})}
    )
    again = [result.memory.memory_id for result, _ in await manager.notes.recall(question.text, k=5)]
    assert again == [result.memory.memory_id for result in await manager.retrieve(question.text, k=5)]


async def test_notes_recall_ranks_without_the_graph_walk(manager: MemoryManager) -> None:
    """memory_recall's path ranks with notes.graph_weight (0): no note is there as a neighbour of another, while
    retrieve(), with conversation's walk and its entity step (off by default, on here), lifts notes that share an
    entity with a hit."""
    notes = load_notes()
    for note in notes.notes:
        await manager.notes.write(note.text, kind="note" if note.kind == "handoff" else note.kind)
    assert manager.config.retrieval.entity_fanout == 0  # shipped: no entity step, so separate notes have no neighbour
    for question in notes.queries[:8]:
        assert all("graph" not in result.layers for result in await manager.retrieve(question.text, k=5))
    manager.configure_retrieval(manager.config.retrieval.model_copy(update={"entity_fanout": 25}))
    assert manager.config.notes.graph_weight == 0.0 and manager.config.retrieval.graph_weight > 0
    walked = recalled = 0
    for question in notes.queries:
        recalled += sum("graph" in result.layers for result, _ in await manager.notes.recall(question.text, k=5))
        walked += sum("graph" in result.layers for result in await manager.retrieve(question.text, k=5))
    assert recalled == 0 and walked > 0


async def test_the_first_boot_reads_the_token_tables_off_the_event_loop(manager: MemoryManager) -> None:
    """tiktoken reads cl100k_base's tables for about 0.3 s: the first boot does it on a worker thread, once, so the
    daemon's event loop keeps serving the other agents meanwhile."""
    loaded_in: list[threading.Thread] = []

    def counter() -> TokenCounter:
        loaded_in.append(threading.current_thread())
        return make_counter("cl100k_base")

    notes = Notes(
        manager.records,
        manager.process_turns,
        manager._ranked,
        counter,
        manager.clock,
        manager.config.notes,
        manager.config.data_dir,
    )
    await notes.write("Decision: invoices are numbered per tenant, never globally.", kind="decision")
    first = await notes.boot("how are invoices numbered?")
    second = await notes.boot("how are invoices numbered?")
    assert len(loaded_in) == 1 and loaded_in[0] is not threading.current_thread()
    assert "per tenant" in first.text and first.tokens == second.tokens == make_counter("cl100k_base").count(first.text)
