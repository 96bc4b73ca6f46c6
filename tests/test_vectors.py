"""One contract suite for the VectorStore Protocol, run over Qdrant Edge and over qdrant-client."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from agent_memory.errors import ClosedError, StorageError
from agent_memory.models import MemoryId
from agent_memory.projection_models import Between, VectorItem
from agent_memory.storage.server_vectors import QdrantServerVectors
from agent_memory.storage.vectors import EdgeVectors

Store = EdgeVectors | QdrantServerVectors


def unit_vectors(count: int, dim: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((count, dim))
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def memory_id(n: int) -> MemoryId:
    return MemoryId(str(uuid.UUID(int=n + 1)))


def items(vectors: np.ndarray, **payload: Any) -> list[VectorItem]:
    base = {"namespace": "alice", "type": "episodic", "tier": "hot", "status": "active"}
    base["created_at"] = "2025-01-01T00:00:00+00:00"
    return [VectorItem(memory_id(n), v.tolist(), {**base, **payload}) for n, v in enumerate(vectors)]


async def open_server() -> QdrantServerVectors:
    vectors = QdrantServerVectors(AsyncQdrantClient(location=":memory:"), prefix="test")
    await vectors.ensure_collections()
    return vectors


@pytest.fixture(params=["edge", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    opened: Store = await EdgeVectors.open(tmp_path / "vectors") if request.param == "edge" else await open_server()
    yield opened
    await opened.aclose()


@pytest.fixture
def text() -> np.ndarray:
    return unit_vectors(50, 384)


async def test_search_finds_the_nearest_first(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text))
    query = text[3] + 0.05 * unit_vectors(1, 384, seed=99)[0]
    hits = await store.search("text", query.tolist(), limit=5)
    assert hits[0].memory_id == memory_id(3)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    expected = text @ (query / np.linalg.norm(query))
    assert hits[0].score == pytest.approx(expected[3], abs=1e-4)
    assert [h.memory_id for h in hits] == [memory_id(int(n)) for n in np.argsort(-expected)[:5]]


async def test_exact_vector_scores_one(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text[:5]))
    hits = await store.search("text", text[2].tolist(), limit=1)
    assert hits[0].memory_id == memory_id(2)
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_where_filters_by_namespace_and_status_list(store: Store, text: np.ndarray) -> None:
    alice = items(text[:4])
    bob = [
        VectorItem(memory_id(10 + n), v.tolist(), {"namespace": "bob", "status": "active"})
        for n, v in enumerate(text[:4])
    ]
    merged = [VectorItem(memory_id(20), text[0].tolist(), {"namespace": "alice", "status": "merged"})]
    erased = [VectorItem(memory_id(21), text[0].tolist(), {"namespace": "alice", "status": "erased"})]
    await store.upsert("text", alice + bob + merged + erased)
    found = await store.search("text", text[0].tolist(), limit=20, where={"namespace": "bob"})
    assert {h.memory_id for h in found} == {memory_id(10 + n) for n in range(4)}
    where = {"namespace": "alice", "status": ["active", "merged"]}
    found = await store.search("text", text[0].tolist(), limit=20, where=where)
    assert {h.memory_id for h in found} == {memory_id(n) for n in range(4)} | {memory_id(20)}
    assert await store.search("text", text[0].tolist(), limit=20, where={"namespace": "carol"}) == []


async def test_where_between_keeps_the_points_of_a_range(store: Store, text: np.ndarray) -> None:
    """A `Between` is a half-open range of a numeric payload field, either side open: the time layer's window over
    `event_at`. A point without the field is outside every range."""
    timed = [
        VectorItem(i.memory_id, i.vector, {**i.payload, "event_at": 1000.0 * n}) for n, i in enumerate(items(text[:10]))
    ]
    untimed = [VectorItem(memory_id(30), text[0].tolist(), {"namespace": "alice", "status": "active"})]
    await store.upsert("text", timed + untimed)

    async def inside(span: Between) -> set[MemoryId]:
        where = {"namespace": "alice", "status": "active", "event_at": span}
        return {h.memory_id for h in await store.search("text", text[0].tolist(), limit=20, where=where)}

    assert await inside(Between(gte=2000.0, lt=5000.0)) == {memory_id(n) for n in (2, 3, 4)}
    assert await inside(Between(gte=8000.0)) == {memory_id(8), memory_id(9)}
    assert await inside(Between(lt=1000.0)) == {memory_id(0)}
    assert await inside(Between(gte=2500.0, lt=2600.0)) == set()
    assert await inside(Between()) == {memory_id(n) for n in range(10)}  # the field, any value
    await store.set_payloads("text", [(memory_id(9), {"event_at": 2100.0})])  # a memory's time revised
    assert await inside(Between(gte=2000.0, lt=3000.0)) == {memory_id(2), memory_id(9)}


async def test_search_many_answers_each_vector_as_search_does(store: Store, text: np.ndarray) -> None:
    bob = [VectorItem(memory_id(100 + n), v.tolist(), {"namespace": "bob"}) for n, v in enumerate(text[40:])]
    await store.upsert("text", items(text[:40]) + bob)
    queries = [(text[n] + 0.05 * unit_vectors(1, 384, seed=n)[0]).tolist() for n in (3, 17, 41)]
    where = {"namespace": "alice"}
    together = await store.search_many("text", queries, limit=3, where=where)
    apart = [await store.search("text", query, limit=3, where=where) for query in queries]
    assert [[h.memory_id for h in hits] for hits in together] == [[h.memory_id for h in hits] for hits in apart]
    assert [hits[0].memory_id for hits in together[:2]] == [memory_id(3), memory_id(17)]
    assert memory_id(101) not in {h.memory_id for h in together[2]}  # text[41] is bob's: the filter holds
    assert [h.score for h in together[0]] == pytest.approx([h.score for h in apart[0]], abs=1e-5)
    assert await store.search_many("text", [], limit=3) == []
    assert await store.search_many("text", queries[:2], limit=0) == [[], []]


async def test_delete_removes_points(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text[:5]))
    await store.delete("text", [memory_id(0), memory_id(1)])
    await store.delete("text", [memory_id(40)])  # absent: not an error
    assert await store.ids("text") == {memory_id(n) for n in range(2, 5)}
    hits = await store.search("text", text[0].tolist(), limit=5)
    assert memory_id(0) not in {h.memory_id for h in hits}


async def test_set_payloads_changes_each_points_fields_and_keeps_the_vector(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text[:4]))
    cold = {"tier": "cold", "status": "merged"}
    await store.set_payloads(
        "text", [(memory_id(0), {**cold, "event_at": 1.0}), (memory_id(1), {**cold, "event_at": 2.0})]
    )
    cold_hits = await store.search("text", text[0].tolist(), limit=10, where={"tier": "cold"})
    assert [h.memory_id for h in cold_hits] == [memory_id(0), memory_id(1)]
    assert cold_hits[0].score == pytest.approx(1.0, abs=1e-5)
    later = await store.search("text", text[0].tolist(), limit=10, where={"event_at": Between(gte=1.5)})
    assert [h.memory_id for h in later] == [memory_id(1)]  # each point its own value
    with pytest.raises(StorageError, match="00000000-0000-0000-0000-000000000029"):  # no point 40: the caller's error
        await store.set_payloads("text", [(memory_id(40), {"tier": "cold"})])
    assert await store.count("text") == 4
    active = await store.search("text", text[0].tolist(), limit=10, where={"namespace": "alice", "status": "active"})
    assert {h.memory_id for h in active} == {memory_id(2), memory_id(3)}  # the other fields were kept


async def test_payloads_gives_every_points_payload_by_id(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text[:3], event_at=5.0))
    await store.set_payloads("text", [(memory_id(2), {"status": "merged"})])
    found = await store.payloads("text")
    assert set(found) == {memory_id(n) for n in range(3)}
    assert found[memory_id(0)] == {**items(text[:1])[0].payload, "event_at": 5.0}
    assert found[memory_id(2)]["status"] == "merged" and found[memory_id(2)]["tier"] == "hot"
    assert await store.payloads("image") == {}


async def test_ids_and_count(store: Store, text: np.ndarray) -> None:
    assert await store.count("text") == 0
    assert await store.ids("text") == set()
    many = unit_vectors(2_345, 384, seed=3)
    await store.upsert("text", items(many))
    assert await store.count("text") == 2_345
    ids = await store.ids("text")
    assert ids == {memory_id(n) for n in range(2_345)}
    assert all(isinstance(i, str) for i in ids)


async def test_upsert_is_idempotent_and_replaces(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text[:3]))
    await store.upsert("text", items(text[:3]))
    assert await store.count("text") == 3
    await store.upsert("text", [VectorItem(memory_id(0), text[9].tolist(), {"namespace": "alice"})])
    assert await store.count("text") == 3
    hits = await store.search("text", text[9].tolist(), limit=1)
    assert hits[0].memory_id == memory_id(0)
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_uppercase_ids_come_back_canonical(store: Store, text: np.ndarray) -> None:
    upper = MemoryId(memory_id(5).upper())
    await store.upsert("text", [VectorItem(upper, text[0].tolist(), {})])
    assert await store.ids("text") == {memory_id(5)}


async def test_non_uuid_id_is_a_storage_error(store: Store, text: np.ndarray) -> None:
    with pytest.raises(StorageError, match="not-a-uuid"):
        await store.upsert("text", [VectorItem(MemoryId("not-a-uuid"), text[0].tolist(), {})])


async def test_rebuild_replaces_the_contents(store: Store, text: np.ndarray) -> None:
    await store.upsert("text", items(text[:10]))
    fresh = [VectorItem(memory_id(100 + n), v.tolist(), {"namespace": "alice"}) for n, v in enumerate(text[10:13])]
    await store.rebuild("text", fresh)
    assert await store.ids("text") == {memory_id(100), memory_id(101), memory_id(102)}
    hits = await store.search("text", text[11].tolist(), limit=1, where={"namespace": "alice"})
    assert hits[0].memory_id == memory_id(101)


async def test_image_collection_is_512_d_and_separate(store: Store, text: np.ndarray) -> None:
    images = unit_vectors(8, 512, seed=5)
    await store.upsert("image", items(images))
    await store.upsert("text", items(text[:2]))
    hits = await store.search("image", images[6].tolist(), limit=3)
    assert hits[0].memory_id == memory_id(6)
    assert await store.count("image") == 8
    assert await store.count("text") == 2


async def test_wrong_dimension_is_a_storage_error(store: Store, text: np.ndarray) -> None:
    with pytest.raises(StorageError):
        await store.upsert("image", items(text[:1]))


async def test_unknown_collection_is_named(store: Store, text: np.ndarray) -> None:
    with pytest.raises(StorageError, match="'audio'"):
        await store.search("audio", text[0].tolist(), limit=3)
    with pytest.raises(StorageError, match="'audio'"):
        await store.upsert("audio", items(text[:1]))


async def test_closed_store_raises(store: Store, text: np.ndarray) -> None:
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(ClosedError):
        await store.search("text", text[0].tolist(), limit=3)
    with pytest.raises(ClosedError):
        await store.count("text")


async def test_optimize_keeps_results(store: Store) -> None:
    many = unit_vectors(3_000, 384, seed=11)
    await store.upsert("text", items(many))
    assert isinstance(await store.optimize("text"), bool)
    hits = await store.search("text", many[1234].tolist(), limit=1, where={"namespace": "alice"})
    assert hits[0].memory_id == memory_id(1234)


async def test_edge_persists_across_close_and_reopen(tmp_path: Path, text: np.ndarray) -> None:
    first = await EdgeVectors.open(tmp_path / "vectors")
    await first.upsert("text", items(text))
    await first.delete("text", [memory_id(49)])
    await first.aclose()
    again = await EdgeVectors.open(tmp_path / "vectors")
    try:
        assert await again.count("text") == 49
        hits = await again.search("text", text[7].tolist(), limit=1, where={"status": ["active"]})
        assert hits[0].memory_id == memory_id(7)
    finally:
        await again.aclose()


async def test_edge_reopen_with_other_dimensions_fails(tmp_path: Path) -> None:
    await (await EdgeVectors.open(tmp_path / "vectors", {"text": 8})).aclose()
    with pytest.raises(StorageError, match="'text'"):
        await EdgeVectors.open(tmp_path / "vectors", {"text": 16})


async def test_edge_runs_on_its_own_thread(tmp_path: Path, text: np.ndarray) -> None:
    vectors = await EdgeVectors.open(tmp_path / "vectors", {"text": 384})
    try:
        await vectors.upsert("text", items(text[:3]))
        await vectors.flush()
        name = await vectors._call("probe", lambda: threading.current_thread().name)
        assert name.startswith("qdrant-edge")
    finally:
        await vectors.aclose()
