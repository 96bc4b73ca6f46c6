"""`agent-memory import-markdown PATH`: an existing notes folder (CLAUDE.md, docs/decisions, runbooks) as notes,
one per section (markdown_sections.py), written through the daemon (started if none runs).

Importing again is safe: each note is written as turn N of the session `import:<path>` (N its place in the file),
and the daemon refuses a turn it has already as a duplicate, which is counted as "already there". A file edited
since is therefore not imported again section by section: erase its session first (`agent-memory erase --session
import:<path>`) to import it afresh.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agent_memory.config import Config
from agent_memory.errors import AgentMemoryError, DuplicateTurn, InvalidInput
from agent_memory.markdown_sections import (
    Piece,
    import_session_id,
    infer_kind,
    markdown_files,
    read_pieces,
)


@dataclass(frozen=True, slots=True)
class FilePlan:
    """One file's notes: where they say they came from (relative to the project, else absolute) and the pieces."""

    where: str
    pieces: list[Piece]


async def cmd_import_markdown(config: Config, args: argparse.Namespace) -> int:
    from agent_memory.interfaces.cli_mcp import default_namespace
    from agent_memory.project import project_root

    path = args.path.expanduser()
    if not path.exists():
        raise InvalidInput(f"No file or folder at {path}: nothing was imported")
    root = project_root(Path.cwd())
    namespace = args.namespace or default_namespace(config.data_dir, Path.cwd())  # where `mcp` reads them
    plans = [_plan(file, root, args.max_chars) for file in markdown_files(path, skip=[config.data_dir])]
    pieces = sum(len(p.pieces) for p in plans)
    split = sum(1 for p in plans for piece in p.pieces if piece.part == 1 and piece.parts > 1)
    if args.dry_run:
        kinds = Counter(infer_kind(p.where, piece.section, args.kind) for p in plans for piece in p.pieces)
        for plan in plans:
            print(f"{plan.where}: {len(plan.pieces)} notes")
        shown = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())) or "none"
        print(
            f"would write {pieces} notes from {len(plans)} files into namespace {namespace!r} ({split} sections split); {shown}"
        )
        return 0
    written, there = await _write(config, args, plans, namespace)
    print(
        f"imported {len(plans)} files into namespace {namespace!r}: {written} notes written, {there} already there, "
        f"{split} sections split"
    )
    return 0


def _plan(file: Path, root: Path | None, max_chars: int) -> FilePlan:
    absolute = file.resolve()
    inside = root is not None and absolute.is_relative_to(root.resolve())
    where = absolute.relative_to(root.resolve()).as_posix() if root is not None and inside else str(absolute)
    title = where if inside else file.name  # the heading path starts with the file, as the project names it
    return FilePlan(where, read_pieces(file, title=title, max_chars=max_chars))


async def _write(config: Config, args: argparse.Namespace, plans: list[FilePlan], namespace: str) -> tuple[int, int]:
    """Each piece as a note: (written, already there). An error names the file, the line, and what was written."""
    from agent_memory.interfaces.autostart import daemon_client

    written = there = 0
    async with await daemon_client(config.data_dir, config_path=args.config) as client:
        for plan in plans:
            session = import_session_id(plan.where)
            for number, piece in enumerate(plan.pieces):
                try:
                    await client.notes.write(
                        piece.text,
                        kind=infer_kind(plan.where, piece.section, args.kind),
                        source={"path": plan.where, "line": piece.section.line},
                        namespace=namespace,
                        session_id=session,
                        turn_number=number,
                    )
                except InvalidInput as exc:
                    if isinstance(exc, DuplicateTurn) or exc.code == "duplicate_turn":
                        there += 1
                        continue
                    raise _named(exc, plan, piece, written) from None
                except AgentMemoryError as exc:
                    raise _named(exc, plan, piece, written) from None
                written += 1
    return written, there


def _named(exc: AgentMemoryError, plan: FilePlan, piece: Piece, written: int) -> AgentMemoryError:
    exc.args = (
        f"{plan.where}:{piece.section.line} ({piece.section.title}): {exc}; {written} notes were written before it "
        "(run the import again to go on: those are skipped)",
    )
    return exc
