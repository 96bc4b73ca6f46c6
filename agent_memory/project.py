"""Project stores: inside a git work tree the default data directory is `<repo root>/.agent_memory` (issue #23).

A coding agent's memory belongs to the project it works on, so with no data directory given (`--data-dir`,
`AGENT_MEMORY__DATA_DIR`, `data_dir` in a TOML file) the store is found from the current directory: the nearest
parent holding a `.git` directory, or a `.git` file (a worktree or a submodule: `gitdir: PATH`), is the project
root; outside any repository it is `~/.agent_memory`. git itself is never run: a few `stat` calls and at most two
small reads, so resolving the default costs nothing a CLI command would notice.

Resolving only reads. The repository learns to ignore the store when the store is created (`exclude_data_dir`,
called by `MemoryManager.initialize` before it makes the folder): `.agent_memory/` is appended once to the
repository's `info/exclude`, the per-clone ignore file, never to the user's tracked `.gitignore`. So loading a
config (every test, every `Config()`) writes nothing, and a store that is never opened leaves no trace.

`project_namespace` names the project in a store shared by several projects: the MCP server writes a project's
notes there, so that one project's notes cannot land in another's namespace.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import unicodedata
from pathlib import Path

log = logging.getLogger(__name__)
DATA_DIR_NAME = ".agent_memory"
EXCLUDE_LINE = f"{DATA_DIR_NAME}/"
_EXCLUDED = {DATA_DIR_NAME, EXCLUDE_LINE, f"/{DATA_DIR_NAME}", f"/{EXCLUDE_LINE}"}
"""Lines of info/exclude that already ignore the store at the repository root."""
_UNSAFE = re.compile(r"[^a-z0-9._-]+")
_NAME_MAX = 128 - 9  # validation.IDENTIFIER allows 128 characters; "-" and 8 hex digits follow the name


def project_root(start: Path) -> Path | None:
    """The root of the git work tree that holds `start` (the nearest parent with a `.git` directory, or a `.git`
    file that says `gitdir: PATH`), or None when `start` is in no repository."""
    for folder in (start.absolute(), *start.absolute().parents):
        if _git_dir(folder) is not None:
            return folder
    return None


def default_data_dir(cwd: Path) -> Path:
    """`<repo root>/.agent_memory` when `cwd` is in a git work tree, else `~/.agent_memory`."""
    try:
        root = project_root(cwd)
    except OSError:  # an unreadable parent: no project to find
        root = None
    return root / DATA_DIR_NAME if root is not None else Path.home() / DATA_DIR_NAME


def current_default_data_dir() -> Path:
    """`default_data_dir` of the current directory (the home store when it has been deleted under us)."""
    try:
        cwd = Path.cwd()
    except OSError:
        return Path.home() / DATA_DIR_NAME
    return default_data_dir(cwd)


def project_namespace(root: Path) -> str:
    """A stable namespace for the project at `root`: its folder name made a valid identifier (accents dropped,
    lower case letters, digits and . _ -, at most 119 characters; `project` when nothing is left), `-`, and the
    first 8 hex digits of the SHA-256 of its resolved path, so two checkouts called `app` get two namespaces."""
    resolved = root.resolve()
    ascii_name = unicodedata.normalize("NFKD", resolved.name).encode("ascii", "ignore").decode().lower()
    name = _UNSAFE.sub("-", ascii_name).strip("-._")[:_NAME_MAX].rstrip("-._") or "project"
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:8]
    return f"{name}-{digest}"


def exclude_data_dir(data_dir: Path) -> Path | None:
    """When `data_dir` is the project store of a git work tree (`<repo root>/.agent_memory`), make sure the
    repository's `info/exclude` ignores it: `.agent_memory/` is appended unless a line already says so (info/ is
    created when missing). Returns the exclude file it checked, or None for any other data directory. Idempotent;
    never touches `.gitignore`. A repository that cannot be written is logged, not raised: the store still opens
    (git then lists `.agent_memory/` as untracked)."""
    data_dir = data_dir.absolute()
    if data_dir.name != DATA_DIR_NAME:
        return None
    git_dir = _git_dir(data_dir.parent)
    if git_dir is None:
        return None
    exclude = _common_dir(git_dir) / "info" / "exclude"
    try:
        _add_line(exclude)
    except OSError as exc:
        log.warning("could not add %s to %s: %s", EXCLUDE_LINE, exclude, exc)
        return None
    return exclude


def _add_line(exclude: Path) -> None:
    try:
        text = exclude.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        text = ""
    if any(line.strip() in _EXCLUDED for line in text.splitlines()):
        return
    exclude.parent.mkdir(exist_ok=True)
    with exclude.open("a", encoding="utf-8", errors="surrogateescape") as out:
        out.write(("" if not text or text.endswith("\n") else "\n") + EXCLUDE_LINE + "\n")


def _git_dir(folder: Path) -> Path | None:
    """The git directory of the work tree rooted at `folder`, or None when `folder` is no work tree's root."""
    dot_git = folder / ".git"
    if dot_git.is_dir():
        return dot_git
    if not dot_git.is_file():
        return None
    try:
        first = dot_git.read_text(encoding="utf-8", errors="surrogateescape").splitlines()[:1]
    except OSError:
        return None
    if not first or not first[0].startswith("gitdir:"):
        return None  # not a gitfile: no work tree here
    return (folder / first[0].removeprefix("gitdir:").strip()).resolve()


def _common_dir(git_dir: Path) -> Path:
    """Where a linked worktree's shared files live (its `commondir` file; git reads info/exclude from there), else
    the git directory itself (a clone's `.git`, a submodule's `modules/NAME`)."""
    try:
        common = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return git_dir
    return (git_dir / common).resolve() if common else git_dir
