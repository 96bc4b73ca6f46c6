"""The MCP benchmark's command line (bench/mcp_bench.py): a config file reaches the server it spawns, and through
it the daemon, as `agent-memory setup` writes it for a client; the benchmark itself is run by hand
(docs/benchmarks.md, "The MCP server through the daemon")."""

from __future__ import annotations

from pathlib import Path

from agent_memory.bench.mcp_bench import _server
from agent_memory.interfaces.cli_parser import build_parser


def test_the_server_it_spawns_reads_the_config_file_it_was_given(tmp_path: Path) -> None:
    settings = tmp_path / "mpnet.toml"
    spawned = _server(tmp_path / "store", settings)
    assert spawned.args[:2] == ["-c", "from agent_memory.interfaces.cli import main; raise SystemExit(main())"]
    parsed = build_parser().parse_args(spawned.args[2:])
    assert (parsed.command, parsed.config, parsed.data_dir) == ("mcp", settings, tmp_path / "store")
    assert not hasattr(build_parser().parse_args(_server(tmp_path / "store").args[2:]), "config")
