"""`agent-memory mcp`: the MCP server (interfaces/mcp.py) for the data directory, over stdio or loopback HTTP.

Light by design: it imports the MCP SDK and the daemon's client, never a model or an engine; the daemon that owns
the data directory (started when none runs) does the work. The namespace defaults to the project the server runs
in (the git repository around the working directory), so that a note cannot land in another project's memory
even when several projects share one store.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent_memory.config import Config


def default_namespace(data_dir: Path, cwd: Path) -> str:
    """The project's namespace: that of the repository holding a project store (`<root>/.agent_memory`), else
    of the repository around `cwd`; "default" outside any repository."""
    from agent_memory.project import project_namespace, project_root

    root = data_dir.parent if data_dir.name == ".agent_memory" else project_root(cwd)
    return project_namespace(root) if root is not None else "default"


async def cmd_mcp(config: Config, args: argparse.Namespace) -> int:
    from agent_memory.interfaces.mcp import MemoryTools, serve_http, serve_stdio
    from agent_memory.validation import check_identifier

    namespace = args.namespace or default_namespace(config.data_dir, Path.cwd())
    check_identifier("namespace", namespace)  # refused before serving, not on every call
    tools = MemoryTools(
        config.data_dir, namespace=namespace, agent=args.agent, config_path=args.config, start=not args.no_start
    )
    if args.transport == "http":
        await serve_http(tools, port=args.port)
    else:
        await serve_stdio(tools)
    return 0
