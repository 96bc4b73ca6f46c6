"""SIGTERM has a deadline: a request stalled halfway through its body does not keep the daemon (and its owner
lock) alive; past `serve.shutdown_timeout` the connection is dropped and the engines are closed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from agent_memory import MemoryManager
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder


async def test_a_stalled_upload_does_not_hold_sigterm(config: Config, embedder: Embedder, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AGENT_MEMORY__SERVE__SHUTDOWN_TIMEOUT": "PT1S",
        "AGENT_MEMORY__SERVE__BODY_TIMEOUT": "PT120S",  # the body deadline must not be what ends the request
    }
    command = [sys.executable, "-m", "agent_memory.interfaces.cli", "--data-dir", str(config.data_dir), "serve"]
    with (tmp_path / "daemon.err").open("w+") as err:
        proc = await asyncio.create_subprocess_exec(
            *command, "--port", "0", env=env, stdout=asyncio.subprocess.PIPE, stderr=err
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line.startswith("agent-memory: serving"), line
            host, port = line.split(" on http://")[1].split()[0].rsplit(":", 1)
            token = (config.data_dir / "api_token").read_text().strip()
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                f"POST /v1/turns HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
                + b'{"session_'  # 10 of the 1,000 bytes promised, then nothing
            )
            await writer.drain()
            await asyncio.sleep(0.5)
            stopped = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 30)
            took = time.monotonic() - stopped
            writer.close()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            err.seek(0)
            sys.stderr.write(err.read())
    assert code == 0
    assert took < 15, f"the daemon took {took:.1f} s to stop with a 1 s shutdown deadline"
    assert not (config.data_dir / "daemon.json").exists()
    async with MemoryManager.open(config, embedder=embedder) as manager:  # the owner lock was released
        assert (await manager.doctor()).consistent
