"""KuzuGraph against a real embedded Kuzu in tmp_path."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from subprocess import PIPE

import pytest

from agent_memory.errors import ClosedError, StorageError, StoreLocked
from agent_memory.models import MemoryId, MemoryType
from agent_memory.projection_models import GraphMemory
from agent_memory.storage.graph import KuzuGraph, _Host

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
EMPTY = {
    "Memory": 0,
    "Entity": 0,
    "Session": 0,
    "MENTIONS": 0,
    "RELATED_TO": 0,
    "NEXT": 0,
    "IN_SESSION": 0,
    "EVOLVED_FROM": 0,
    "DREAM_LINK": 0,
    "SUPERSEDES": 0,
}
AWKWARD_NAMES = ("Smith, John", 'the "Big" one', "O'Brien", "two\nlines", "back\\slash", ",", '"', "Zoë 東京")


def mem(
    memory_id: str,
    *,
    session: str | None = "s1",
    previous: str | None = None,
    entities: tuple[str, ...] = (),
    namespace: str = "default",
    minutes: int = 0,
) -> GraphMemory:
    return GraphMemory(
        memory_id=MemoryId(memory_id),
        namespace=namespace,
        memory_type=MemoryType.EPISODIC,
        created_at=T0 + timedelta(minutes=minutes),
        session_id=session,
        previous_in_session=MemoryId(previous) if previous else None,
        entities=entities,
    )


def chat(n: int, *, sessions: int = 40, seed: int = 7) -> list[GraphMemory]:
    """`n` memories spread over sessions, chained by NEXT within each session, mentioning shared entities."""
    rng = random.Random(seed)
    names = [f"entity {i}" for i in range(300)] + list(AWKWARD_NAMES)
    last: dict[str, str] = {}
    memories = []
    for i in range(n):
        session = f"s{rng.randrange(sessions)}"
        entities = tuple(rng.sample(names, rng.randrange(4)))
        memories.append(mem(f"m{i:05d}", session=session, previous=last.get(session), entities=entities, minutes=i))
        last[session] = f"m{i:05d}"
    return memories


@pytest.fixture
async def graph(tmp_path: Path) -> AsyncIterator[KuzuGraph]:
    g = await KuzuGraph.open(tmp_path / "graph")
    yield g
    await g.aclose()


async def test_open_creates_directory_and_empty_schema(tmp_path: Path) -> None:
    g = await KuzuGraph.open(tmp_path / "a" / "b")
    try:
        assert (tmp_path / "a" / "b" / "graph.kuzu").exists()
        assert await g.counts() == EMPTY
        assert await g.memory_ids() == set()
    finally:
        await g.aclose()


async def test_upsert_creates_nodes_and_edges(graph: KuzuGraph) -> None:
    await graph.upsert_memories(
        [
            mem("a", entities=("Alice", "Paris")),
            mem("b", previous="a", entities=("Alice",)),
            mem("c", session="s2", entities=("Bob",)),
            mem("d", session=None),
        ]
    )
    assert await graph.memory_ids() == {"a", "b", "c", "d"}
    counts = await graph.counts()
    assert counts["Memory"] == 4
    assert counts["Entity"] == 3
    assert counts["Session"] == 2
    assert counts["MENTIONS"] == 4
    assert counts["IN_SESSION"] == 3
    assert counts["NEXT"] == 1
    assert await graph.entities(MemoryId("a")) == ["Alice", "Paris"]
    assert await graph.neighbours(MemoryId("a")) == [("b", "NEXT")]
    assert await graph.neighbours(MemoryId("b")) == [("a", "NEXT")]
    assert await graph.neighbours(MemoryId("c")) == []
    assert await graph.neighbours(MemoryId("d")) == []
    assert await graph.neighbours(MemoryId("unknown")) == []


async def test_neighbours_through_shared_entity_and_session(graph: KuzuGraph) -> None:
    await graph.upsert_memories(
        [
            mem("a", session="s1", entities=("Alice",)),
            mem("b", session="s1"),
            mem("c", session="s2", entities=("Alice",)),
            mem("d", session="s1", namespace="other"),  # same session id, another namespace: another session
        ]
    )
    assert await graph.neighbours(MemoryId("a")) == [("b", "IN_SESSION"), ("c", "MENTIONS")]
    assert await graph.neighbours(MemoryId("d")) == []
    assert (await graph.counts())["Session"] == 3


async def test_neighbours_depth_walks_memory_edges_only(graph: KuzuGraph) -> None:
    chain = [mem("m1", session=None), *(mem(f"m{i}", session=None, previous=f"m{i - 1}") for i in range(2, 6))]
    await graph.upsert_memories(chain)
    assert await graph.neighbours(MemoryId("m1"), depth=0) == []
    assert await graph.neighbours(MemoryId("m1")) == [("m2", "NEXT")]
    assert await graph.neighbours(MemoryId("m3"), depth=2) == [
        ("m2", "NEXT"),
        ("m4", "NEXT"),
        ("m1", "NEXT"),
        ("m5", "NEXT"),
    ]
    assert [n for n, _ in await graph.neighbours(MemoryId("m1"), depth=10)] == ["m2", "m3", "m4", "m5"]
    with pytest.raises(ValueError):
        await graph.neighbours(MemoryId("m1"), depth=-1)


async def test_direct_edge_wins_over_shared_session(graph: KuzuGraph) -> None:
    await graph.upsert_memories([mem("a"), mem("b", previous="a"), mem("c", previous="b")])
    assert await graph.neighbours(MemoryId("a"), depth=2) == [("b", "NEXT"), ("c", "IN_SESSION")]


async def test_upsert_twice_is_idempotent(graph: KuzuGraph) -> None:
    batch = chat(300)
    await graph.upsert_memories(batch)
    first = (await graph.counts(), await graph.memory_ids(), await graph.neighbours(MemoryId("m00010"), depth=2))
    await graph.upsert_memories(batch)
    await graph.upsert_memories(batch[100:200])  # an outbox replay of memories already present
    second = (await graph.counts(), await graph.memory_ids(), await graph.neighbours(MemoryId("m00010"), depth=2))
    assert first == second


async def test_upsert_replaces_entities_and_drops_orphans(graph: KuzuGraph) -> None:
    await graph.upsert_memories([mem("a", entities=("Alice", "Paris")), mem("b", entities=("Alice",))])
    await graph.upsert_memories([mem("a", session="s2", entities=("Bob",))])
    assert await graph.entities(MemoryId("a")) == ["Bob"]
    counts = await graph.counts()
    assert (counts["Entity"], counts["MENTIONS"], counts["Session"], counts["IN_SESSION"]) == (2, 2, 2, 2)


async def test_next_edge_ordering(graph: KuzuGraph) -> None:
    await graph.upsert_memories([mem("m2", previous="m1")])  # the previous memory is not there yet
    assert (await graph.counts())["NEXT"] == 0
    await graph.upsert_memories([mem("m1")])
    assert (await graph.counts())["NEXT"] == 0
    await graph.upsert_memories([mem("m3", previous="m2")])
    assert await graph.neighbours(MemoryId("m3")) == [("m2", "NEXT"), ("m1", "IN_SESSION")]
    # within one batch, order does not matter: every node is merged before any edge
    await graph.upsert_memories([mem("m5", previous="m4"), mem("m4", previous="m3")])
    assert (await graph.counts())["NEXT"] == 3
    assert (await graph.neighbours(MemoryId("m4")))[:2] == [("m3", "NEXT"), ("m5", "NEXT")]


async def test_delete_removes_node_and_its_edges(graph: KuzuGraph) -> None:
    await graph.upsert_memories(
        [mem("a", entities=("Alice",)), mem("b", previous="a", entities=("Alice", "Bob")), mem("c", previous="b")]
    )
    await graph.delete_memories([MemoryId("b"), MemoryId("nope")])
    assert await graph.memory_ids() == {"a", "c"}
    counts = await graph.counts()
    assert (counts["NEXT"], counts["MENTIONS"], counts["Entity"], counts["IN_SESSION"]) == (0, 1, 1, 2)
    assert await graph.neighbours(MemoryId("a")) == [("c", "IN_SESSION")]
    await graph.delete_memories([MemoryId("a"), MemoryId("c")])
    await graph.delete_memories([])
    assert await graph.counts() == EMPTY


async def assert_same_graph(left: KuzuGraph, right: KuzuGraph, memories: list[GraphMemory]) -> None:
    assert await left.memory_ids() == await right.memory_ids() == {m.memory_id for m in memories}
    assert await left.counts() == await right.counts()
    for memory in memories[:: max(1, len(memories) // 40)]:
        mid = memory.memory_id
        assert await left.neighbours(mid, depth=2) == await right.neighbours(mid, depth=2)
        assert await left.entities(mid) == await right.entities(mid) == sorted(set(memory.entities))


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[KuzuGraph, KuzuGraph]]:
    left, right = await KuzuGraph.open(tmp_path / "left"), await KuzuGraph.open(tmp_path / "right")
    yield left, right
    await left.aclose()
    await right.aclose()


async def test_rebuild_matches_upsert(pair: tuple[KuzuGraph, KuzuGraph]) -> None:
    upserted, rebuilt = pair
    memories = chat(2000)
    await upserted.upsert_memories(memories)
    await rebuilt.upsert_memories([mem("stale", entities=("gone",))])
    await rebuilt.rebuild(memories)
    await assert_same_graph(upserted, rebuilt, memories)
    counts = await rebuilt.counts()
    assert counts["NEXT"] == 2000 - 40 and counts["Entity"] > 300 and counts["Session"] == 40


@pytest.mark.parametrize("size", [12, 300])  # row by row, and with UNWIND and COPY
async def test_changed_upsert_and_delete_match_rebuild(pair: tuple[KuzuGraph, KuzuGraph], size: int) -> None:
    graph, reference = pair
    memories = chat(size, sessions=4)
    await graph.upsert_memories(memories)
    changed = [replace(m, session_id="moved", entities=(*m.entities[:1], "new")) for m in memories[: size // 2]]
    await graph.upsert_memories(changed)
    final = changed + memories[size // 2 :]
    await reference.rebuild(final)
    await assert_same_graph(graph, reference, final)
    kept = final[::3]
    await graph.delete_memories(m.memory_id for m in final if m not in kept)
    await reference.rebuild(kept)
    await assert_same_graph(graph, reference, kept)


async def test_rebuild_keeps_awkward_entity_names(graph: KuzuGraph) -> None:
    await graph.rebuild([mem("a", entities=AWKWARD_NAMES), mem("b", previous="a", entities=AWKWARD_NAMES[:2])])
    assert await graph.entities(MemoryId("a")) == sorted(AWKWARD_NAMES)
    assert await graph.entities(MemoryId("b")) == sorted(AWKWARD_NAMES[:2])
    await graph.upsert_memories([mem("c", entities=("O'Brien",))])  # the rebuilt nodes are found by name
    assert (await graph.counts())["Entity"] == len(AWKWARD_NAMES)


async def test_rebuild_drops_next_to_missing_memory_and_empty_rebuild(graph: KuzuGraph) -> None:
    await graph.rebuild([mem("b", previous="a", namespace="", entities=("",))])
    counts = await graph.counts()
    assert (counts["Memory"], counts["NEXT"], counts["Entity"], counts["Session"]) == (1, 0, 0, 1)
    await graph.upsert_memories([mem("c", previous="b", namespace="")])  # an empty namespace stays '' after COPY
    assert await graph.neighbours(MemoryId("c")) == [("b", "NEXT")]
    assert (await graph.counts())["Session"] == 1
    rows = await graph.query("MATCH (m:Memory) RETURN m.id, m.namespace ORDER BY m.id")
    assert rows == [["b", ""], ["c", ""]]
    await graph.rebuild([])
    assert await graph.counts() == EMPTY


async def test_timestamps_are_stored_as_utc(graph: KuzuGraph) -> None:
    paris = datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    await graph.upsert_memories([GraphMemory(MemoryId("a"), "default", MemoryType.SEMANTIC, paris, None, None, ())])
    await graph.rebuild([GraphMemory(MemoryId("b"), "default", MemoryType.SEMANTIC, paris, None, None, ())])
    await graph.upsert_memories([GraphMemory(MemoryId("a"), "default", MemoryType.SEMANTIC, paris, None, None, ())])
    rows = await graph.query("MATCH (m:Memory) RETURN m.id, m.created_at ORDER BY m.id")
    assert rows == [["a", datetime(2024, 5, 1, 12, 0)], ["b", datetime(2024, 5, 1, 12, 0)]]


async def test_second_open_of_same_path_is_refused(tmp_path: Path) -> None:
    first = await KuzuGraph.open(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(StorageError, match="already open in this process"):
        await KuzuGraph.open(tmp_path / "sub" / "..")
    await first.upsert_memories([mem("a")])
    await first.aclose()
    again = await KuzuGraph.open(tmp_path)
    try:
        assert await again.memory_ids() == {"a"}
    finally:
        await again.aclose()


async def test_graph_held_by_another_process_is_store_locked(tmp_path: Path) -> None:
    hold = "import sys, kuzu; db = kuzu.Database(sys.argv[1]); print('held', flush=True); sys.stdin.read()"
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", hold, str(tmp_path / "graph.kuzu"), stdin=PIPE, stdout=PIPE
    )
    try:
        assert other.stdout is not None
        assert await other.stdout.readline() == b"held\n"
        with pytest.raises(StoreLocked):
            await KuzuGraph.open(tmp_path, lock_wait=0.3)
    finally:
        await other.communicate(b"")
    graph = await KuzuGraph.open(tmp_path)  # the failed open released the path
    await graph.aclose()


async def test_an_open_waits_for_a_lock_that_is_released(tmp_path: Path) -> None:
    """The worker of an owner that was just killed still closes the database: a new owner waits for it."""
    hold = (
        "import sys, time, kuzu; db = kuzu.Database(sys.argv[1]); print('held', flush=True); "
        "time.sleep(1.0); db.close()"
    )
    other = await asyncio.create_subprocess_exec(sys.executable, "-c", hold, str(tmp_path / "graph.kuzu"), stdout=PIPE)
    assert other.stdout is not None
    assert await other.stdout.readline() == b"held\n"
    graph = await KuzuGraph.open(tmp_path)  # would be StoreLocked without the wait (as the test above shows)
    try:
        assert await other.wait() == 0  # the lock was held, then released, while the open waited
        assert await graph.memory_ids() == set()
    finally:
        await graph.aclose()


def alive(pid: int) -> bool:
    """Whether `pid` runs (not a zombie: whether the machine's init reaps an orphan is not this test's business)."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


async def test_kuzu_runs_in_a_worker_process_that_ends_with_the_graph(tmp_path: Path) -> None:
    graph = await KuzuGraph.open(tmp_path)
    pid = graph.worker_pid
    assert pid is not None and pid != os.getpid() and alive(pid)
    await graph.upsert_memories([mem("a", entities=("Alice",))])
    assert await graph.entities(MemoryId("a")) == ["Alice"]
    await graph.aclose()  # returns once the database is closed; the process ends right after
    assert await gone(pid)


async def gone(pid: int, seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.01)):
        if not alive(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_killed_owner_leaves_no_worker_and_the_next_owner_opens_the_graph(tmp_path: Path) -> None:
    """kill -9 of the owner: its worker reads end of file, closes the database and ends, as does the fork server,
    and the next owner opens the graph with what the first one wrote."""
    script = (
        "import asyncio, os, sys\n"
        "from agent_memory.storage.graph import KuzuGraph, _Host\n"
        "from tests.test_graph import mem\n"
        "async def main():\n"
        "    g = await KuzuGraph.open(__import__('pathlib').Path(sys.argv[1]))\n"
        "    await g.upsert_memories([mem('a', entities=('Alice',))])\n"
        "    print(g.worker_pid, _Host._current._process.pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(tmp_path), stdout=PIPE, cwd=ROOT)
    assert child.stdout is not None
    worker, host = (int(x) for x in (await child.stdout.readline()).split())
    assert alive(worker) and alive(host)  # the check can fail: both run while the owner does
    child.kill()
    await child.wait()
    assert await gone(worker) and await gone(host)
    graph = await KuzuGraph.open(tmp_path, lock_wait=0.0)  # the lock is free: no wait needed
    try:
        assert await graph.entities(MemoryId("a")) == ["Alice"]
    finally:
        await graph.aclose()


async def test_the_fork_server_runs_the_owner_s_package_whatever_the_working_directory(tmp_path: Path) -> None:
    """An owner run from a folder that holds another `agent_memory` (a second checkout): its graph's fork server
    imports the owner's package, not the one in the folder (as `python -m` would)."""
    decoy = tmp_path / "agent_memory"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the agent_memory of the working directory')\n")
    code, out, err = await owner(
        "async def main():\n"
        "    g = await KuzuGraph.open(Path('store'))\n"
        "    print(sorted(await g.memory_ids()), flush=True)\n"
        "    await g.aclose()\n"
        "asyncio.run(main())\n",
        cwd=tmp_path,
    )
    assert code == 0 and out == "[]\n", err[-2000:]


async def test_a_fork_server_that_cannot_start_is_engine_unavailable(tmp_path: Path) -> None:
    """Its own error (here: no Kuzu) is on stderr; the open says the server exited, with its exit code, as
    EngineUnavailable: a manager does not set the graph aside for it (engines.open_projection)."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "kuzu.py").write_text("raise ImportError('no kuzu here')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}  # the server finds this kuzu first
    code, _, err = await owner("asyncio.run(KuzuGraph.open(Path('store')))\n", cwd=tmp_path, env=env)
    assert code == 1 and "no kuzu here" in err, err[-2000:]
    assert "EngineUnavailable: Graph open failed" in err and "fork server exited (exit code 1" in err, err[-2000:]


async def owner(program: str, *, cwd: Path, env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """`program` run as the graph's owner in a new interpreter (this checkout's package first on its path, KuzuGraph
    and Path imported): its exit code, stdout and stderr."""
    head = f"import asyncio, sys; sys.path.insert(0, {str(ROOT)!r})\n"
    head += "from pathlib import Path\nfrom agent_memory.storage.graph import KuzuGraph\n"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", head + program, stdout=PIPE, stderr=PIPE, cwd=cwd, env=env
    )
    out, err = await child.communicate()
    return child.returncode, out.decode(), err.decode()


async def test_a_killed_fork_server_is_started_again_for_the_next_worker(graph: KuzuGraph) -> None:
    await graph.upsert_memories([mem("a", entities=("Alice",))])
    host = _Host._current
    assert host is not None
    first = host._process.pid
    os.kill(first, signal.SIGKILL)
    host._process.wait(5)
    await graph.rebuild_fresh([mem("b", entities=("Bob",))])  # needs a new worker, so a new server
    assert _Host._current is not None and _Host._current._process.pid != first
    assert await graph.memory_ids() == {"b"} and await graph.entities(MemoryId("b")) == ["Bob"]


async def test_a_killed_worker_is_replaced_and_the_call_made_again(graph: KuzuGraph) -> None:
    await graph.upsert_memories(chat(50))
    before = await graph.counts()
    first = graph.worker_pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await graph.upsert_memories([mem("late", session="s9", entities=("Zed",))])  # finds the worker dead
    second = graph.worker_pid
    assert second is not None and second != first and alive(second)
    after = await graph.counts()
    assert after["Memory"] == before["Memory"] + 1 and after["Entity"] == before["Entity"] + 1
    assert await graph.entities(MemoryId("late")) == ["Zed"]


async def test_a_fresh_rebuild_runs_in_a_new_worker_on_new_files(tmp_path: Path) -> None:
    """What an erase asks: no file of the old database, and no process that held its names, writes the new one."""
    graph = await KuzuGraph.open(tmp_path)
    try:
        secret = "Harbourmaster Oyelaran-Whitcombe"
        await graph.upsert_memories([mem("a", entities=(secret,)), mem("b", previous="a", entities=("Bob",))])
        await graph.checkpoint()
        assert secret.encode() in (tmp_path / "graph.kuzu").read_bytes()  # the check can fail: the name is there
        first = graph.worker_pid
        await graph.rebuild_fresh([mem("b", entities=("Bob",))])
        assert graph.worker_pid not in (None, first) and first is not None and await gone(first)
        assert await graph.memory_ids() == {"b"} and await graph.entities(MemoryId("b")) == ["Bob"]
        await graph.checkpoint()
        files = [f for f in tmp_path.iterdir() if f.name.startswith("graph.kuzu")]
        assert files and not any(secret.encode() in f.read_bytes() for f in files)
    finally:
        await graph.aclose()


async def test_use_after_close_raises(tmp_path: Path) -> None:
    g = await KuzuGraph.open(tmp_path)
    await g.aclose()
    await g.aclose()  # idempotent
    with pytest.raises(ClosedError, match="KuzuGraph"):
        await g.memory_ids()
    with pytest.raises(ClosedError):
        await g.upsert_memories([mem("a")])
    with pytest.raises(ClosedError):
        await g.rebuild([])


async def test_engine_errors_are_storage_errors(graph: KuzuGraph) -> None:
    with pytest.raises(StorageError, match="Graph query failed") as info:
        await graph.query("MATCH (n:NoSuchTable) RETURN n")
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_a_memory_alone_in_its_session_can_be_re_projected_after_a_rebuild(graph: KuzuGraph) -> None:
    """Kuzu 0.11 did not see, after a COPY-loaded rebuild, an IN_SESSION edge re-created in the same transaction,
    and the orphan sweep tried to delete the linked session; the sweep now runs before any edge is created."""
    alone = [mem("a", session="s1", entities=("Alice",)), mem("b", session="s2")]
    await graph.rebuild(alone)
    await graph.upsert_memories([alone[0]])
    counts = await graph.counts()
    assert (counts["Session"], counts["IN_SESSION"], counts["Entity"], counts["MENTIONS"]) == (2, 2, 1, 1)


async def test_owned_link_edges_are_projected_replaced_and_rebuilt(tmp_path: Path) -> None:
    link = ("b", "DREAM_LINK", 0.91, T0)
    memories = [replace(mem("a"), links=(link,)), mem("b", previous="a", minutes=1), mem("c", session="s2")]
    graphs = [await KuzuGraph.open(tmp_path / name) for name in ("upserted", "rebuilt")]
    try:
        await graphs[0].upsert_memories(memories)
        await graphs[0].upsert_memories([replace(memories[0], links=(link, ("c", "EVOLVED_FROM", 1.0, T0)))])
        await graphs[1].rebuild([replace(memories[0], links=(link, ("c", "EVOLVED_FROM", 1.0, T0))), *memories[1:]])
        for graph in graphs:
            counts = await graph.counts()
            assert (counts["DREAM_LINK"], counts["EVOLVED_FROM"], counts["NEXT"]) == (1, 1, 1)
            steps = await graph.expand(["a"], depth=1)
            assert {(s.memory_id, s.relation) for s in steps} == {("b", "DREAM_LINK"), ("c", "EVOLVED_FROM")}
    finally:
        for graph in graphs:
            await graph.aclose()
