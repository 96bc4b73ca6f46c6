"""The faces: the CLI, the daemon (HTTP API), its client, the MCP server.

A face that only talks to a daemon must start fast (issue #23: a one-shot `agent-memory search` through a running
daemon answers in under 0.5 s). `import httpx` also imports httpx's own command line (`httpx._main`: click, rich
and pygments, about 0.1 s) whenever those packages are installed, and no face here uses it; so, unless httpx was
imported before this package, its CLI module is marked absent and httpx falls back to its stub `httpx.main`
(which only says the CLI's dependencies are missing). Nothing else of httpx changes.
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable" (importlib)
