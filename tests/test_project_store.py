"""Project stores (issue #23): inside a git work tree the default data directory is `<repo root>/.agent_memory`,
git-ignored through the repository's info/exclude once the store is created; elsewhere `~/.agent_memory`; a flag,
the environment or a TOML file override it. Repositories here are made by `git init` (and `git worktree add`) in
tmp_path, or by hand where only the shape of `.git` matters."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_memory.config import load_config
from agent_memory.interfaces.cli import main
from agent_memory.project import (
    EXCLUDE_LINE,
    default_data_dir,
    exclude_data_dir,
    project_namespace,
    project_root,
)
from agent_memory.validation import check_identifier

GIT = shutil.which("git")


def git(cwd: Path, *args: str) -> str:
    assert GIT is not None
    command = [GIT, "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "commit", "-q", "--allow-empty", "-m", "start")
    return path


def untracked(root: Path) -> list[str]:
    return git(root, "status", "--porcelain", "--untracked-files=all").splitlines()


def exclude_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() == EXCLUDE_LINE]


def test_the_root_is_found_from_a_nested_directory(tmp_path: Path) -> None:
    root = repo(tmp_path / "app")
    nested = root / "src" / "pkg"
    nested.mkdir(parents=True)
    assert project_root(nested) == root and project_root(root) == root
    assert default_data_dir(nested) == root / ".agent_memory"


def test_outside_a_repository_the_store_is_in_home(tmp_path: Path) -> None:
    assert project_root(tmp_path) is None  # pytest's tmp_path is in no repository
    assert default_data_dir(tmp_path) == Path.home() / ".agent_memory"
    assert exclude_data_dir(tmp_path / ".agent_memory") is None


def test_a_dot_git_file_that_is_not_a_gitfile_is_no_root(tmp_path: Path) -> None:
    (tmp_path / "outer" / ".git").mkdir(parents=True)
    inner = tmp_path / "outer" / "inner"
    inner.mkdir()
    (inner / ".git").write_text("just a file\n")
    assert project_root(inner) == tmp_path / "outer"


def test_loading_a_config_resolves_the_default_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = repo(tmp_path / "app")
    (root / "docs").mkdir()
    monkeypatch.chdir(root / "docs")
    exclude = root / ".git" / "info" / "exclude"
    before = exclude.read_bytes()
    assert load_config(environ={}).data_dir == root / ".agent_memory"
    assert exclude.read_bytes() == before and not (root / ".agent_memory").exists()


def test_the_flag_the_environment_and_the_file_override_the_project_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = repo(tmp_path / "app")
    monkeypatch.chdir(root)
    pinned = tmp_path / "pinned.toml"
    pinned.write_text(f'data_dir = "{tmp_path / "from-file"}"\n')
    assert load_config(pinned, environ={}).data_dir == tmp_path / "from-file"
    assert load_config(environ={"AGENT_MEMORY__DATA_DIR": str(tmp_path / "env")}).data_dir == tmp_path / "env"
    assert load_config(environ={}, data_dir=str(tmp_path / "flag")).data_dir == tmp_path / "flag"


def test_the_exclude_line_is_added_once_and_gitignore_is_never_touched(tmp_path: Path) -> None:
    root = repo(tmp_path / "app")
    exclude = root / ".git" / "info" / "exclude"
    exclude.write_text("# mine\n*.swp")  # no final newline: the line goes on a line of its own
    assert exclude_data_dir(root / ".agent_memory") == exclude
    assert exclude_data_dir(root / ".agent_memory") == exclude
    assert exclude.read_text() == f"# mine\n*.swp\n{EXCLUDE_LINE}\n"
    assert not (root / ".gitignore").exists()
    assert exclude_data_dir(root / "mem") is None  # a data directory of another name is the user's business


def test_an_existing_anchored_line_counts_and_a_missing_info_folder_is_made(tmp_path: Path) -> None:
    root = repo(tmp_path / "app")
    exclude = root / ".git" / "info" / "exclude"
    exclude.write_text("/.agent_memory/\n")
    exclude_data_dir(root / ".agent_memory")
    assert exclude.read_text() == "/.agent_memory/\n"
    shutil.rmtree(root / ".git" / "info")
    exclude_data_dir(root / ".agent_memory")
    assert exclude.read_text() == f"{EXCLUDE_LINE}\n"


def test_a_linked_worktree_uses_the_shared_exclude_file(tmp_path: Path) -> None:
    main_repo = repo(tmp_path / "app")
    git(main_repo, "worktree", "add", "-q", str(tmp_path / "feature"))
    worktree = tmp_path / "feature"
    assert (worktree / ".git").is_file() and project_root(worktree / ".") == worktree
    store = default_data_dir(worktree)
    assert store == worktree / ".agent_memory"
    assert exclude_data_dir(store) == main_repo / ".git" / "info" / "exclude"
    store.mkdir()
    (store / "memory.db").write_text("x")
    assert untracked(worktree) == []  # git itself reads the line from there


def test_a_submodule_style_gitfile_points_at_its_own_git_dir(tmp_path: Path) -> None:
    """By hand: `.git` says `gitdir: ../.git/modules/lib` (relative to the work tree), with no commondir."""
    modules = tmp_path / "super" / ".git" / "modules" / "lib"
    modules.mkdir(parents=True)
    lib = tmp_path / "super" / "lib"
    lib.mkdir()
    (lib / ".git").write_text("gitdir: ../.git/modules/lib\n")
    assert project_root(lib / "x" / "y") == lib
    assert exclude_data_dir(lib / ".agent_memory") == modules / "info" / "exclude"
    assert exclude_lines(modules / "info" / "exclude") == [EXCLUDE_LINE]


def test_a_command_in_a_repository_makes_an_ignored_project_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = repo(tmp_path / "app")
    (root / "src").mkdir()
    monkeypatch.chdir(root / "src")
    monkeypatch.delenv("AGENT_MEMORY__DATA_DIR", raising=False)
    assert main(["stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["data_dir"] == str(root / ".agent_memory")
    assert (root / ".agent_memory" / "memory.db").is_file()
    assert exclude_lines(root / ".git" / "info" / "exclude") == [EXCLUDE_LINE]
    assert untracked(root) == []


def test_project_namespaces_are_valid_stable_and_distinct(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "My App!", tmp_path / "b" / "My App!"
    odd = [tmp_path / "...", tmp_path / ("x" * 200), tmp_path / "é ü", tmp_path / "-lead"]
    for folder in (one, two, *odd):
        folder.mkdir(parents=True)
        assert check_identifier("namespace", project_namespace(folder)) == project_namespace(folder)
    assert project_namespace(one).startswith("my-app-") and len(project_namespace(one)) == len("my-app-") + 8
    assert project_namespace(one) != project_namespace(two)
    assert project_namespace(one) == project_namespace(tmp_path / "a" / "b" / ".." / "My App!")
    assert project_namespace(tmp_path / "...").startswith("project-")
    assert project_namespace(tmp_path / "é ü").startswith("e-u-")
    assert len(project_namespace(tmp_path / ("x" * 200))) <= 128
