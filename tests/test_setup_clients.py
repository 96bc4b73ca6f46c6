"""`agent-memory setup` and `agent-memory hooks install`: our entry merged into each client's config file, every
other byte of it kept, the same file on a second run, a malformed file refused and left as it was."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import tomllib
from pathlib import Path

import pytest

from agent_memory.errors import ConfigError
from agent_memory.interfaces.cli import main
from agent_memory.interfaces.cli_parser import build_parser
from agent_memory.interfaces.cli_setup import (
    agent_memory_command,
    hook_commands,
    merge_hooks,
    merge_toml,
    toml_table,
)

EXE = os.path.abspath(Path(sys.executable).parent / "agent-memory")  # what this test process finds (its venv)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return home


@pytest.fixture
def repo(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository, the current directory (a folder inside it, to show the root is found)."""
    repo = tmp_path / "proj"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    monkeypatch.chdir(repo / "src")
    return repo


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "mem"


def _run(*argv: str) -> int:
    return main(list(argv))


def _setup(client: str, data_dir: Path, *extra: str) -> int:
    return _run("setup", client, "--data-dir", str(data_dir), *extra)


def test_the_command_is_the_script_this_process_runs_else_its_venv_else_path(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "agent-memory"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    assert agent_memory_command(str(script), str(python), which="") == [str(script)]
    assert agent_memory_command("/x/cli.py", str(script.parent / "python"), which="") == [str(script)]
    assert agent_memory_command("/x/cli.py", str(python), which="/usr/bin/agent-memory") == ["/usr/bin/agent-memory"]
    assert agent_memory_command("/x/cli.py", str(python), which="") == [
        str(python),
        "-m",
        "agent_memory.interfaces.cli",
    ]


def test_setup_prints_the_entry_and_its_file_and_writes_nothing(
    repo: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _setup("claude-code", data_dir) == 0
    out = capsys.readouterr().out
    header, snippet = out.split("\n", 1)
    assert str(repo / ".mcp.json") in header and "project scope" in header
    entry = json.loads(snippet)["mcpServers"]["agent-memory"]
    assert entry == {
        "type": "stdio",
        "command": EXE,
        "args": ["mcp", "--data-dir", str(data_dir), "--agent", "claude-code"],
        "env": {},
    }
    assert not (repo / ".mcp.json").exists()


def test_claude_code_project_merge_keeps_other_servers_and_keys_and_the_mode(repo: Path, data_dir: Path) -> None:
    path = repo / ".mcp.json"
    other = {"command": "npx", "args": ["-y", "other"], "env": {"TOKEN": "t"}}
    stale = {"type": "stdio", "command": "/old/agent-memory", "args": ["mcp"]}
    path.write_text(json.dumps({"mcpServers": {"other": other, "agent-memory": stale}, "note": "keep me"}))
    path.chmod(0o640)
    assert _setup("claude-code", data_dir, "--write") == 0
    data = json.loads(path.read_text())
    assert data["note"] == "keep me"
    assert data["mcpServers"]["other"] == other
    assert list(data["mcpServers"]) == ["other", "agent-memory"]
    assert data["mcpServers"]["agent-memory"]["command"] == EXE
    assert data["mcpServers"]["agent-memory"]["args"] == ["mcp", "--data-dir", str(data_dir), "--agent", "claude-code"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    first = path.read_bytes()
    assert _setup("claude-code", data_dir, "--write") == 0
    assert path.read_bytes() == first
    assert sorted(p.name for p in repo.iterdir()) == [".git", ".mcp.json", "src"]  # no temporary file left


def test_user_scope_outside_a_repository_by_default(
    tmp_path: Path, home: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (home / ".claude.json").write_text('{"numStartups": 3, "projects": {"/x": {}}}')
    assert _setup("claude-code", data_dir, "--write") == 0
    data = json.loads((home / ".claude.json").read_text())
    assert data["numStartups"] == 3 and data["projects"] == {"/x": {}}
    assert data["mcpServers"]["agent-memory"]["command"] == EXE
    assert _setup("cursor", data_dir, "--write") == 0
    cursor = json.loads((home / ".cursor" / "mcp.json").read_text())
    assert cursor == {
        "mcpServers": {
            "agent-memory": {
                "command": EXE,
                "args": ["mcp", "--data-dir", str(data_dir), "--agent", "cursor"],
                "env": {},
            }
        }
    }
    assert stat.S_IMODE((home / ".cursor" / "mcp.json").stat().st_mode) == 0o600


def test_cursor_project_file(repo: Path, data_dir: Path) -> None:
    assert _setup("cursor", data_dir, "--write", "--scope", "project") == 0
    data = json.loads((repo / ".cursor" / "mcp.json").read_text())
    assert data["mcpServers"]["agent-memory"]["args"][2] == str(data_dir)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"mcpServers": []}'])
def test_a_malformed_json_file_is_refused_and_left_untouched(
    repo: Path, data_dir: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = repo / ".mcp.json"
    path.write_text(text)
    before = path.stat()
    assert _setup("claude-code", data_dir, "--write") == 2
    assert str(path) in capsys.readouterr().err
    assert path.read_text() == text and path.stat().st_mtime_ns == before.st_mtime_ns


def test_a_symlinked_config_stays_a_link(repo: Path, tmp_path: Path, data_dir: Path) -> None:
    target = tmp_path / "dotfiles" / "mcp.json"
    target.parent.mkdir()
    target.write_text("{}")
    (repo / ".mcp.json").symlink_to(target)
    assert _setup("claude-code", data_dir, "--write") == 0
    assert (repo / ".mcp.json").is_symlink()
    assert "agent-memory" in json.loads(target.read_text())["mcpServers"]


CODEX = """\
# my codex config
model = "o3"  # a comment that must stay

[mcp_servers.other]
command = "npx"
args = ["-y", "other"]   # odd spacing

[mcp_servers.other.env]
TOKEN = "t"

[profiles.fast]
model = "o4-mini"
"""


def test_codex_table_is_appended_and_every_other_byte_kept(home: Path, data_dir: Path) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(CODEX)
    assert _setup("codex", data_dir, "--write", "--scope", "user") == 0
    text = path.read_text()
    assert text.startswith(CODEX)
    table = text[len(CODEX) :]
    assert (
        table
        == f'\n[mcp_servers.agent-memory]\ncommand = "{EXE}"\nargs = ["mcp", "--data-dir", "{data_dir}", "--agent", "codex"]\n'
    )
    data = tomllib.loads(text)
    assert data["mcp_servers"]["agent-memory"] == {
        "command": EXE,
        "args": ["mcp", "--data-dir", str(data_dir), "--agent", "codex"],
    }
    assert data["mcp_servers"]["other"]["env"] == {"TOKEN": "t"} and data["profiles"]["fast"]["model"] == "o4-mini"
    assert _setup("codex", data_dir, "--write", "--scope", "user") == 0
    assert path.read_text() == text


def test_codex_table_replaced_in_place_with_its_subtables(home: Path, data_dir: Path) -> None:
    old = '[mcp_servers."agent-memory"]\ncommand = "/old"\nargs = []\n\n[mcp_servers.agent-memory.env]\nX = "1"\n'
    before, after = CODEX[: CODEX.index("[profiles")], CODEX[CODEX.index("[profiles") :]
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(before + old + "\n# about profiles\n" + after)
    assert _setup("codex", data_dir, "--write", "--scope", "user") == 0
    ours = toml_table({"command": EXE, "args": ["mcp", "--data-dir", str(data_dir), "--agent", "codex"]})
    assert path.read_text() == before + ours + "\n# about profiles\n" + after


def test_codex_home_is_honoured(home: Path, tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.chdir(tmp_path)
    assert _setup("codex", data_dir, "--write") == 0
    assert "agent-memory" in tomllib.loads((tmp_path / "codex" / "config.toml").read_text())["mcp_servers"]


@pytest.mark.parametrize(
    "text",
    [
        "model = \n",  # not TOML
        '[mcp_servers]\nagent-memory = { command = "x" }\n',  # ours, inline: not ours to rewrite
        'mcp_servers = { agent-memory = { command = "x" } }\n',
    ],
)
def test_codex_refuses_what_it_cannot_merge_and_leaves_it(home: Path, data_dir: Path, text: str) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(text)
    assert _setup("codex", data_dir, "--write", "--scope", "user") == 2
    assert path.read_text() == text
    with pytest.raises(ConfigError):
        merge_toml(text, toml_table({"command": "y", "args": []}), path=path)


def test_toml_strings_are_escaped() -> None:
    table = toml_table({"command": 'C:\\Program Files\\a "b"\x7f', "args": ["é", "\n"]})
    assert tomllib.loads(table)["mcp_servers"]["agent-memory"] == {
        "command": 'C:\\Program Files\\a "b"\x7f',
        "args": ["é", "\n"],
    }


def test_hooks_install_merges_into_settings_once(repo: Path, data_dir: Path) -> None:
    path = repo / ".claude" / "settings.json"
    path.parent.mkdir()
    theirs = {"type": "command", "command": "echo hi"}
    old_ours = {"type": "command", "command": "/old/venv/bin/agent-memory hook stop --data-dir /old", "timeout": 9}
    settings = {
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {
            "SessionStart": [{"matcher": "startup", "hooks": [theirs]}],
            "Stop": [{"hooks": [old_ours, theirs]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [theirs]}],
        },
    }
    path.write_text(json.dumps(settings))
    assert _run("hooks", "install", "--data-dir", str(data_dir)) == 0
    data = json.loads(path.read_text())
    commands = hook_commands([EXE], ["--data-dir", str(data_dir)])
    assert data["permissions"] == settings["permissions"]
    assert data["hooks"]["PreToolUse"] == settings["hooks"]["PreToolUse"]
    start = {"type": "command", "command": commands["SessionStart"], "timeout": 5}
    stop = {"type": "command", "command": commands["Stop"], "timeout": 5}
    assert data["hooks"]["SessionStart"] == [{"matcher": "startup", "hooks": [theirs]}, {"hooks": [start]}]
    assert data["hooks"]["Stop"] == [{"hooks": [stop, theirs]}]  # the old install's hook replaced in place
    assert commands["SessionStart"] == f"{EXE} hook session-start --data-dir {data_dir}"
    first = path.read_bytes()
    assert _run("hooks", "install", "--data-dir", str(data_dir)) == 0
    assert path.read_bytes() == first


def test_hooks_install_print_and_other_scopes(
    repo: Path, home: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("hooks", "install", "--print", "--data-dir", str(data_dir)) == 0
    header, snippet = capsys.readouterr().out.split("\n", 1)
    assert str(repo / ".claude" / "settings.json") in header
    assert json.loads(snippet) == merge_hooks({}, hook_commands([EXE], ["--data-dir", str(data_dir)]), path=Path("x"))
    assert not (repo / ".claude").exists()
    assert _run("hooks", "install", "--scope", "local", "--data-dir", str(data_dir)) == 0
    assert set(json.loads((repo / ".claude" / "settings.local.json").read_text())["hooks"]) == {"SessionStart", "Stop"}
    assert _run("hooks", "install", "--scope", "user", "--data-dir", str(data_dir)) == 0
    assert (home / ".claude" / "settings.json").is_file()


def test_hooks_install_refuses_a_malformed_settings_file(repo: Path, data_dir: Path) -> None:
    path = repo / ".claude" / "settings.json"
    path.parent.mkdir()
    for text in ('{"hooks": []}', '{"hooks": {"Stop": {}}}', "{,}"):
        path.write_text(text)
        assert _run("hooks", "install", "--data-dir", str(data_dir)) == 2
        assert path.read_text() == text


def test_merge_hooks_drops_a_duplicate_of_ours_and_ignores_lookalikes() -> None:
    ours = "agent-memory hook stop --data-dir /d"
    lookalike = {"type": "command", "command": "my-tool hook stop"}
    settings = {
        "hooks": {
            "Stop": [
                {"hooks": [{"type": "command", "command": ours}]},
                {"hooks": [{"type": "command", "command": ours}, lookalike]},
            ]
        }
    }
    merged = merge_hooks(settings, {"Stop": "new hook stop"}, path=Path("x"))
    assert merged["hooks"]["Stop"] == [
        {"hooks": [{"type": "command", "command": "new hook stop", "timeout": 5}]},
        {"hooks": [lookalike]},
    ]


def test_a_user_scope_entry_names_no_data_dir_unless_one_is_given(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each project then finds its own store: pinning this repository's would send every project's notes here."""
    monkeypatch.delenv("AGENT_MEMORY__DATA_DIR", raising=False)
    assert _run("setup", "claude-code", "--scope", "user") == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["mcpServers"]["agent-memory"]["args"] == [
        "mcp",
        "--agent",
        "claude-code",
    ]
    assert _run("hooks", "install", "--scope", "user") == 0
    capsys.readouterr()
    stop = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]["Stop"][0]["hooks"][0]
    assert stop["command"] == f"{EXE} hook stop"
    assert _run("setup", "claude-code") == 0  # project scope: this project's store, by its absolute path
    args = json.loads(capsys.readouterr().out.split("\n", 1)[1])["mcpServers"]["agent-memory"]["args"]
    assert args == ["mcp", "--data-dir", str(repo / ".agent_memory"), "--agent", "claude-code"]


def test_a_config_file_given_to_setup_reaches_the_server_and_the_hooks(
    repo: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon an MCP server or a hook starts must read the settings the store was made with (another text
    model: its store refuses to open without them), so the entry names the config file by its absolute path."""
    settings = tmp_path / "agent-memory.toml"
    settings.write_text("[retrieval]\ndefault_k = 7\n", encoding="utf-8")
    assert _run("--config", str(settings), "setup", "claude-code", "--data-dir", str(data_dir)) == 0
    args = json.loads(capsys.readouterr().out.split("\n", 1)[1])["mcpServers"]["agent-memory"]["args"]
    assert args == ["mcp", "--data-dir", str(data_dir), "--config", str(settings), "--agent", "claude-code"]
    assert build_parser().parse_args(args).config == settings  # the server's own parser takes it back
    assert _run("hooks", "install", "--data-dir", str(data_dir), "--config", str(settings)) == 0
    written = json.loads((repo / ".claude" / "settings.json").read_text())["hooks"]
    start = written["SessionStart"][0]["hooks"][0]["command"]
    assert start == f"{EXE} hook session-start --data-dir {data_dir} --config {settings}"
    assert build_parser().parse_args(shlex.split(start)[1:]).config == settings
