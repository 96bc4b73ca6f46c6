"""A one-shot `agent-memory search` through a running daemon against the same command opening the store (issue #23).

`python scripts/bench_light_cli.py [--size 1000] [--runs 20] [--direct-runs 3]` builds the retrieval latency
benchmark's synthetic store (bench/revisions_bench.py `synthetic_store`: conversation-like turns, real pooled
all-MiniLM-L6-v2 vectors) in a temporary directory, starts `agent-memory serve` on it, and times `--runs` runs of
`agent-memory --data-dir D search QUERY` as subprocesses (the console script a user runs), after two warm-up runs
that are not counted. Then it stops the daemon and times `--direct-runs` runs of the same command, which now opens
the store and loads the model itself. Each figure is one process: wall time from spawn to exit, and its peak
resident set as GNU time (`/usr/bin/time -f %M`) reports it. Not `wait4`'s rusage of our own child: Linux starts
a child's peak at its parent's (exec keeps the larger of the two), and this process holds the model it built the
store with. The table goes into docs/benchmarks.md between the `bench-light-cli` markers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent_memory.bench import perf
from agent_memory.bench.perf import percentile

BEGIN, END = "<!-- bench-light-cli:begin -->", "<!-- bench-light-cli:end -->"
TARGET_SECONDS = 0.5  # p95 of a one-shot search through a live daemon
QUERIES = (
    "when did Maria go hiking?",
    "what did I buy for the kitchen?",
    "the trip to Lisbon",
    "how much was the espresso machine?",
    "who came to the board game night?",
)


GNU_TIME = Path("/usr/bin/time")


@dataclass(frozen=True)
class Run:
    seconds: float
    max_rss_mb: float | None  # None without GNU time


@dataclass(frozen=True)
class Figures:
    size: int
    daemon: list[Run]
    direct: list[Run]
    load_before: float
    others_cores: float  # cores' worth of CPU that other processes used while the runs through the daemon went on


def cli_command() -> list[str]:
    """The `agent-memory` console script next to this interpreter, else `python -m` (the same code)."""
    script = Path(sys.executable).with_name("agent-memory")
    if script.exists():
        return [str(script)]
    found = shutil.which("agent-memory")
    return [found] if found else [sys.executable, "-m", "agent_memory.interfaces.cli"]


def timed_run(command: list[str], cwd: Path) -> Run:
    """One subprocess to its exit: wall seconds, and its peak RSS through GNU time when it is installed."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        wrapped = [str(GNU_TIME), "-f", "%M", "-o", report.name, *command] if GNU_TIME.exists() else command
        started = time.perf_counter()
        done = subprocess.run(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, check=False)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
        kib = report.read().strip().splitlines()[-1:] if GNU_TIME.exists() else []
    return Run(seconds, int(kib[0]) / 1024 if kib else None)


def start_daemon(data_dir: Path, cwd: Path, err: Path) -> subprocess.Popen[str]:
    command = [*cli_command(), "--data-dir", str(data_dir), "serve", "--port", "0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err.open("w"), text=True, cwd=cwd)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("agent-memory: serving"):
        proc.kill()
        raise RuntimeError(f"the daemon did not start: {line!r}; see {err}")
    return proc


def stop_daemon(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    if proc.stdout is not None:
        proc.stdout.close()


def measure(size: int, runs: int, direct_runs: int) -> Figures:
    from agent_memory.bench.revisions_bench import synthetic_store

    with tempfile.TemporaryDirectory(prefix="bench-light-cli-") as scratch:
        root = Path(scratch)
        data_dir = root / "store"

        async def build() -> None:
            config, real = await synthetic_store(data_dir, size, fresh=True)
            await real.aclose()
            logging.info("store of %d turns in %s", size, config.data_dir)

        asyncio.run(build())
        search = [*cli_command(), "--data-dir", str(data_dir), "search"]
        daemon = start_daemon(data_dir, root, root / "daemon.err")
        try:
            for query in QUERIES[:2]:  # warm-up: the daemon's first searches build its caches
                timed_run([*search, query], root)
            load_before = os.getloadavg()[0]
            busy, ours, started = _machine_busy(), _own_cpu(daemon.pid), time.perf_counter()
            through = [timed_run([*search, QUERIES[n % len(QUERIES)]], root) for n in range(runs)]
            others = (_machine_busy() - busy) - (_own_cpu(daemon.pid) - ours)
            others_cores = max(0.0, others / (time.perf_counter() - started))
        finally:
            stop_daemon(daemon)
        logging.info("through the daemon: %s s", " ".join(f"{r.seconds:.2f}" for r in through))
        direct = [timed_run([*search, QUERIES[n % len(QUERIES)]], root) for n in range(direct_runs)]
        logging.info("direct: %s s", " ".join(f"{r.seconds:.2f}" for r in direct))
        return Figures(size, through, direct, load_before, others_cores)


def _machine_busy() -> float:
    """CPU seconds every core has spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu(daemon: int) -> float:
    """CPU seconds of this process, its reaped children (the CLI runs) and the daemon."""
    mine = resource.getrusage(resource.RUSAGE_SELF)
    runs = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()
    daemon_ticks = int(served[11]) + int(served[12])  # utime, stime
    return mine.ru_utime + mine.ru_stime + runs.ru_utime + runs.ru_stime + daemon_ticks / os.sysconf("SC_CLK_TCK")


def _row(label: str, runs: list[Run], target: str) -> str:
    seconds, rss = [r.seconds for r in runs], [r.max_rss_mb for r in runs if r.max_rss_mb is not None]
    peak = f"{max(rss):.0f}" if rss else "n/a (no /usr/bin/time)"
    return (
        f"| {label} | {len(runs)} | {statistics.median(seconds):.2f} | {percentile(seconds, 0.95):.2f} "
        f"| {peak} | {target} |"
    )


def render(figures: Figures) -> str:
    p95 = percentile([r.seconds for r in figures.daemon], 0.95)
    verdict = "met" if p95 < TARGET_SECONDS else "NOT met"
    return "\n".join(
        [
            BEGIN,
            f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}; 1-min load average {figures.load_before:.2f} when the timed runs began; "
            f"other processes used {figures.others_cores:.2f} of the {os.cpu_count()} cores while the runs through "
            f"the daemon went on (/proc/stat, less this benchmark's own CPU); a synthetic store of {figures.size:,} "
            "turns; "
            "`agent-memory --data-dir D search QUERY` as a subprocess (the console script), wall time from spawn to "
            "exit, peak RSS of that process (GNU time `%M`).",
            "",
            "| one-shot `agent-memory search` | runs | p50 s | p95 s | max RSS MB | target |",
            "|---|---|---|---|---|---|",
            _row("through the running daemon (2 warm-up runs before)", figures.daemon, f"p95 < 0.5 s: {verdict}"),
            _row("no daemon: opens the store and loads the model", figures.direct, ""),
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one-shot CLI search through the daemon vs. opening the store")
    parser.add_argument("--size", type=int, default=1000, help="turns in the synthetic store")
    parser.add_argument("--runs", type=int, default=20, help="timed runs through the daemon")
    parser.add_argument("--direct-runs", type=int, default=3, help="timed runs with no daemon")
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    section = render(measure(args.size, args.runs, args.direct_runs))
    out = None if args.no_docs else args.out
    return perf.publish(section, out, begin=BEGIN, end=END, heading="A one-shot CLI command through the daemon")
