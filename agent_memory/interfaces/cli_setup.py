"""`agent-memory setup CLIENT` and `agent-memory hooks install`: the entries that make a coding agent start
`agent-memory mcp` (Claude Code, Codex, Cursor) and run the Claude Code hooks (interfaces/cli_hooks.py), printed,
or merged into the client's own config file (docs/mcp.md).

A merge changes our entry and nothing else: every other key and server is kept (a JSON file is written back with
two-space indents; in a TOML file every byte outside our table stays as it was), the file is replaced atomically
(a temporary file beside it, renamed over it) with its mode kept, and a file that is not valid JSON or TOML is
refused and left untouched. Running it twice leaves the file as the first run wrote it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_memory.config import Config
from agent_memory.errors import ConfigError

SERVER_NAME = "agent-memory"
CLIENTS = ("claude-code", "codex", "cursor")
HOOK_EVENTS = {"SessionStart": "session-start", "Stop": "stop"}
"""Claude Code's hook event -> our `agent-memory hook` subcommand."""
HOOK_TIMEOUT_S = 5
"""What Claude Code is told to wait at most; the hook itself gives up after 2 s (cli_hooks.HOOK_CAP)."""
TOML_HEADER = re.compile(r"^[ \t]*\[[^\[\]\n]*\][ \t]*(?:#.*)?$|^[ \t]*\[\[[^\n]*\]\][ \t]*(?:#.*)?$", re.M)
OUR_TOML_TABLE = re.compile(
    r"^[ \t]*\[[ \t]*mcp_servers[ \t]*\.[ \t]*(?:agent-memory|\"agent-memory\"|'agent-memory')[ \t]*(?:\.[^\]\n]*)?\]",
    re.M,
)


def agent_memory_command(
    argv0: str | None = None, executable: str | None = None, which: str | None = None
) -> list[str]:
    """The absolute command that runs this installation of agent-memory: the script this process was started as
    (symbolic links kept: a versioned target moves on upgrade), else the `agent-memory` beside this interpreter
    (its venv), else the one on PATH, else `python -m agent_memory.interfaces.cli`. Arguments are seams for tests."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0
    executable = sys.executable if executable is None else executable
    if argv0 and Path(argv0).name == SERVER_NAME and Path(argv0).is_file():
        return [os.path.abspath(argv0)]
    beside = Path(executable).parent / SERVER_NAME
    if executable and beside.is_file():
        return [os.path.abspath(beside)]
    if which is None:
        from shutil import which as find

        which = find(SERVER_NAME) or ""
    if which:
        return [os.path.abspath(which)]
    return [os.path.abspath(executable), "-m", "agent_memory.interfaces.cli"]


def data_dir_args(config: Config, args: argparse.Namespace, scope: str) -> list[str]:
    """`--data-dir D` (absolute) for the server or hook command, then `--config F` (absolute) when this command was
    given a config file, so the daemon they start reads the same settings (a store made with another text model
    refuses to open without them). A user-scope entry serves every project, so it names no data directory unless
    one was given (`--data-dir`, AGENT_MEMORY__DATA_DIR, a config file): each project's agent then finds its own
    store, the default (`.agent_memory` at the git root, else the home store), rather than all of them sharing the
    store of the folder this command ran in."""
    from agent_memory.project import current_default_data_dir

    explicit = args.data_dir is not None or config.data_dir != current_default_data_dir()
    where = ["--data-dir", str(config.data_dir.expanduser().resolve())] if scope != "user" or explicit else []
    config_file = getattr(args, "config", None)  # argparse.SUPPRESS: absent unless given
    return where + (["--config", str(Path(config_file).expanduser().resolve())] if config_file else [])


def _scope_root(scope: str | None) -> tuple[str, Path]:
    """The scope asked for (default: project inside a git repository, else user) and the project folder."""
    from agent_memory.project import project_root

    cwd = Path.cwd()
    root = project_root(cwd)
    return scope or ("project" if root is not None else "user"), root or cwd


# ----- setup ------------------------------------------------------------------------------------------


def config_path(client: str, scope: str, *, root: Path, home: Path, environ: Mapping[str, str]) -> Path:
    """Where `client` reads its MCP servers in `scope` (docs/mcp.md#setup)."""
    if client == "claude-code":
        return root / ".mcp.json" if scope == "project" else home / ".claude.json"
    if client == "codex":
        codex_home = Path(environ["CODEX_HOME"]) if environ.get("CODEX_HOME") else home / ".codex"
        return root / ".codex" / "config.toml" if scope == "project" else codex_home / "config.toml"
    if client == "cursor":
        return root / ".cursor" / "mcp.json" if scope == "project" else home / ".cursor" / "mcp.json"
    raise ConfigError(f"Unknown client {client!r}: one of {', '.join(CLIENTS)}")


def server_entry(client: str, command: Sequence[str]) -> dict[str, Any]:
    """Our server as `client` writes one: a stdio command with its arguments."""
    if client == "claude-code":
        return {"type": "stdio", "command": command[0], "args": list(command[1:]), "env": {}}
    return {"command": command[0], "args": list(command[1:])} | ({"env": {}} if client == "cursor" else {})


def toml_table(entry: Mapping[str, Any]) -> str:
    """Our Codex table, `[mcp_servers.agent-memory]` with `command` and `args`, as TOML text."""
    lines = [f"[mcp_servers.{SERVER_NAME}]"]
    lines += [f"{key} = {_toml_value(entry[key])}" for key in ("command", "args")]
    return "\n".join(lines) + "\n"


def _toml_value(value: str | Sequence[str]) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    return "[" + ", ".join(_toml_string(item) for item in value) + "]"


def _toml_string(text: str) -> str:
    """A TOML basic string: backslash, quote and control characters escaped, everything else as it is."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", escaped) + '"'


def merge_json(original: str | None, where: Sequence[str], name: str, entry: Any, *, path: Path) -> str:
    """`original` (a JSON object, or nothing) with `entry` at where[0]...where[-1] -> name; every other key kept."""
    data = _json_object(original, path)
    node = data
    for key in where:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{path}: {key!r} is a {type(child).__name__}, not an object; nothing was written")
        node = child
    node[name] = entry
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _json_object(original: str | None, path: Path) -> dict[str, Any]:
    if original is None or not original.strip():
        return {}
    try:
        data = json.loads(original)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); it was left as it is: fix it, or merge by hand") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not an object; it was left as it is")
    return data


def merge_toml(original: str | None, table: str, *, path: Path) -> str:
    """`original` with our `[mcp_servers.agent-memory]` table (and any subtable of it) replaced by `table`, or
    `table` appended; every other byte kept. The result is parsed again and compared with the original's data,
    so an edit that would touch anything else (our server defined inline, say) is refused, not written."""
    text = original or ""
    before = _toml_data(text, path)
    spans = _our_tables(text)
    if spans:
        pieces, last = [], 0
        for i, (start, end) in enumerate(spans):  # ours in place of the first, the others (subtables) dropped
            gap = text[last:start]
            pieces += [gap if i == 0 or gap.strip() else "", table if i == 0 else ""]
            last = end
        merged = "".join([*pieces, text[last:]])
    else:
        gap = "" if not text.strip() else ("\n" if text.endswith("\n") else "\n\n")
        merged = text + gap + table
    after = _toml_data(merged, path, ours=True)
    _drop_ours(before)
    if _drop_ours(after) != tomllib.loads(table)["mcp_servers"][SERVER_NAME] or after != before:
        raise ConfigError(
            f"{path}: cannot replace the [mcp_servers.{SERVER_NAME}] table without touching the rest (is it defined "
            "inline?); nothing was written: edit it by hand (`agent-memory setup codex` prints the table)"
        )
    return merged


def _drop_ours(data: dict[str, Any]) -> Any:
    """Our server's table taken out of parsed TOML (and `mcp_servers` with it, when it was the only one)."""
    servers = data.get("mcp_servers")
    if not isinstance(servers, dict):
        return None
    ours = servers.pop(SERVER_NAME, None)
    if not servers:
        data.pop("mcp_servers")
    return ours


def _toml_data(text: str, path: Path, *, ours: bool = False) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if ours:  # the original parsed: our edit made it invalid (the server defined a second time, inline)
            raise ConfigError(
                f"{path}: merging the [mcp_servers.{SERVER_NAME}] table would leave it invalid ({exc}); nothing was "
                "written: edit it by hand (`agent-memory setup codex` prints the table)"
            ) from None
        raise ConfigError(f"{path} is not valid TOML ({exc}); it was left as it is: fix it, or merge by hand") from None


def _our_tables(text: str) -> list[tuple[int, int]]:
    """(start, end) of each table of ours: from its header to the next header, less the blank and comment lines
    just before that header (they belong to the table after)."""
    headers = [m.start() for m in TOML_HEADER.finditer(text)]
    spans = []
    for i, start in enumerate(headers):
        if OUR_TOML_TABLE.match(text, start):
            end = headers[i + 1] if i + 1 < len(headers) else len(text)
            spans.append((start, _without_trailing_comments(text, start, end)))
    return spans


def _without_trailing_comments(text: str, start: int, end: int) -> int:
    lines = text[start:end].splitlines(keepends=True)
    while len(lines) > 1 and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return start + len("".join(lines))


def write_atomic(path: Path, text: str, *, new_mode: int) -> bool:
    """Write `text` to `path` through a temporary file beside it, renamed over it; the mode of the file it
    replaces is kept (`new_mode` for a new file). A symbolic link is followed, so a dotfiles link stays a link.
    False, and nothing touched, when the file already holds `text`."""
    if path.is_symlink():
        path = path.resolve()
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    mode = path.stat().st_mode & 0o7777 if path.exists() else new_mode
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read {path} ({exc}); it was left as it is") from None


def _mode_for(scope: str) -> int:
    return 0o644 if scope == "project" else 0o600  # a project file is shared; a user file names your paths


async def cmd_setup(config: Config, args: argparse.Namespace) -> int:
    scope, root = _scope_root(args.scope)
    path = config_path(args.client, scope, root=root, home=Path.home(), environ=os.environ)
    command = [*agent_memory_command(), "mcp", *data_dir_args(config, args, scope), "--agent", args.client]
    entry = server_entry(args.client, command)
    if args.client == "codex":
        snippet = toml_table(entry)
        merged = merge_toml(_read(path), snippet, path=path) if args.write else ""
    else:
        snippet = json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2) + "\n"
        merged = merge_json(_read(path), ["mcpServers"], SERVER_NAME, entry, path=path) if args.write else ""
    if not args.write:
        print(f"# {args.client}, {scope} scope: merge this into {path} (or run again with --write)")
        print(snippet, end="")
        return 0
    changed = write_atomic(path, merged, new_mode=_mode_for(scope))
    print(f"{'wrote' if changed else 'already there:'} {path}: the {SERVER_NAME} MCP server for {args.client}")
    return 0


# ----- hooks install ----------------------------------------------------------------------------------


def settings_path(scope: str, *, root: Path, home: Path) -> Path:
    """Claude Code's settings file: the project's (shared), the project's local one (yours), or yours."""
    return {
        "project": root / ".claude" / "settings.json",
        "local": root / ".claude" / "settings.local.json",
        "user": home / ".claude" / "settings.json",
    }[scope]


def hook_commands(command: Sequence[str], data_dir_args: Sequence[str]) -> dict[str, str]:
    """Claude Code event -> the shell command it runs."""
    return {event: shlex.join([*command, "hook", sub, *data_dir_args]) for event, sub in HOOK_EVENTS.items()}


def merge_hooks(settings: dict[str, Any], commands: Mapping[str, str], *, path: Path) -> dict[str, Any]:
    """`settings` with our hook for each event: an earlier hook of ours (any install of agent-memory) is replaced
    in place and a second one dropped; every other hook, group and key is kept."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError(f"{path}: 'hooks' is a {type(hooks).__name__}, not an object; nothing was written")
    for event, command in commands.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f"{path}: hooks.{event} is not a list; nothing was written")
        ours = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
        placed = False
        for group in [g for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)]:
            kept = []
            for hook in group["hooks"]:
                if not _is_ours(hook, HOOK_EVENTS[event]):
                    kept.append(hook)
                elif not placed:
                    kept.append(ours)
                    placed = True
            if group["hooks"] and not kept:
                groups.remove(group)
            group["hooks"] = kept
        if not placed:
            groups.append({"hooks": [ours]})
    return settings


def _is_ours(hook: Any, sub: str) -> bool:
    """A command hook running `... agent-memory ... hook SUB`, from this installation or another."""
    if not isinstance(hook, dict) or hook.get("type") != "command" or not isinstance(hook.get("command"), str):
        return False
    try:
        words = shlex.split(hook["command"])
    except ValueError:
        return False
    for i in range(len(words) - 1):
        if words[i : i + 2] == ["hook", sub]:
            return any("agent-memory" in w or "agent_memory" in w for w in words[:i])
    return False


async def cmd_hooks(config: Config, args: argparse.Namespace) -> int:
    scope, root = _scope_root(args.scope)
    path = settings_path(scope, root=root, home=Path.home())
    commands = hook_commands(agent_memory_command(), data_dir_args(config, args, scope))
    if args.print:
        snippet = merge_hooks({}, commands, path=path)
        print(f"# Claude Code hooks, {scope} scope: merge this into {path} (or run again without --print)")
        print(json.dumps(snippet, indent=2))
        return 0
    settings = merge_hooks(_json_object(_read(path), path), commands, path=path)
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    changed = write_atomic(path, text, new_mode=_mode_for(scope))
    events = " and ".join(HOOK_EVENTS)
    print(f"{'wrote' if changed else 'already there:'} {path}: the {events} hooks of {SERVER_NAME}")
    return 0
