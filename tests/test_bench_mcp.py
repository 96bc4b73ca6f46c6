"""The MCP benchmark's command line (bench/mcp_bench.py): a config file reaches the server it spawns, and through
it the daemon, as `agent-memory setup` writes it for a client; the benchmark itself is run by hand
(docs/benchmarks.md, "The MCP server through the daemon")."""

from __future__ import annotations

import random
from pathlib import Path

from agent_memory.bench.mcp_bench import _seed_notes, _server, in_process
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli_parser import build_parser


def test_the_server_it_spawns_reads_the_config_file_it_was_given(tmp_path: Path) -> None:
    settings = tmp_path / "mpnet.toml"
    spawned = _server(tmp_path / "store", settings)
    assert spawned.args[:2] == ["-c", "from agent_memory.interfaces.cli import main; raise SystemExit(main())"]
    parsed = build_parser().parse_args(spawned.args[2:])
    assert (parsed.command, parsed.config, parsed.data_dir) == ("mcp", settings, tmp_path / "store")
    assert not hasattr(build_parser().parse_args(_server(tmp_path / "store").args[2:]), "config")


async def test_the_in_process_step_times_recall_and_the_questions_pass_on_the_store(
    config: Config, embedder: Embedder
) -> None:
    """Step 5, small: the notes recalled in this process and the question's pass alone, each a p50 and a p95; the
    recall, which embeds the question too, takes longer than the pass alone at the median."""
    await _seed_notes(config, embedder)
    inside = await in_process(config, 12, random.Random(7))
    assert set(inside) == {"notes.recall", "embed_query"}
    assert all(0 < row["p50_ms"] <= row["p95_ms"] for row in inside.values())
    assert inside["notes.recall"]["p50_ms"] > inside["embed_query"]["p50_ms"]
