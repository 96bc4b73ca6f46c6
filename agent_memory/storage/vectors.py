"""Dense vectors in Qdrant Edge: the Rust engine in process, one shard per collection.

Qdrant Edge is a blocking engine, so every call runs on one owner thread and the event loop never waits on it.
Notes on the engine a caller relies on:
- point ids must be UUIDs (or unsigned ints); Edge takes UUID strings and hands back `uuid.UUID` objects, so ids
  are canonicalised to lowercase UUID strings here and callers only ever see `str`;
- with cosine distance Edge normalises vectors on insert and a hit's score is the cosine similarity, in [-1, 1];
- upsert replaces a point with the same id, so replaying an outbox row is harmless;
- the HNSW index is built only by `optimize()` (a sleep job); until then search is an exact scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    PayloadSchemaType,
    Point,
    Query,
    QueryBatchRequest,
    QueryRequest,
    RangeFloat,
    ScrollRequest,
    UpdateOperation,
)

from agent_memory.errors import AgentMemoryError, ClosedError, StorageError
from agent_memory.models import MemoryId, Vector
from agent_memory.projection_models import Between, VectorHit, VectorItem

T = TypeVar("T")
AtSwap = Callable[[], contextlib.AbstractAsyncContextManager[object]]  # entered around a shard swap (the index job)
log = logging.getLogger(__name__)
DEFAULT_DIMENSIONS: Mapping[str, int] = MappingProxyType({"text": 384, "image": 512, "context": 384})
BATCH_SIZE = 1_000
TENANT_FIELD = "namespace"
KEYWORD_FIELDS = ("type", "tier", "status")
FLOAT_FIELDS = ("event_at",)  # when a memory happened, in seconds since the epoch: the time layer's window


def point_id(memory_id: str) -> str:
    """The canonical UUID string Qdrant stores for a memory id; anything else is refused."""
    try:
        return str(uuid.UUID(str(memory_id)))
    except ValueError as exc:
        raise StorageError(f"Memory id {memory_id!r} is not a UUID, so it cannot be a Qdrant point id") from exc


def batches(items: Sequence[T], size: int = BATCH_SIZE) -> Iterable[Sequence[T]]:
    return (items[start : start + size] for start in range(0, len(items), size))


def edge_filter(where: Mapping[str, Any] | None) -> Filter | None:
    """Payload key -> exact value, all must match; a list (or tuple, set) value matches any of its items, and a
    `Between` a range of numbers."""
    if not where:
        return None
    conditions: list[Any] = []
    for key, value in where.items():
        if isinstance(value, Between):
            conditions.append(FieldCondition(key, range=RangeFloat(gte=value.gte, lt=value.lt)))
            continue
        match = MatchAny(list(value)) if isinstance(value, list | tuple | set | frozenset) else MatchValue(value)
        conditions.append(FieldCondition(key, match=match))
    return Filter(must=conditions)


def edge_point(item: VectorItem) -> Point:
    return Point(point_id(item.memory_id), [float(x) for x in item.vector], dict(item.payload))


class EdgeVectors:
    """One Qdrant Edge shard per collection at `directory / name`, all driven from one owner thread."""

    def __init__(self, directory: Path, dimensions: Mapping[str, int] = DEFAULT_DIMENSIONS) -> None:
        self._dir = directory
        self._dimensions = dict(dimensions)
        self._shards: dict[str, EdgeShard] = {}
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="qdrant-edge")
        self._closed = False

    @classmethod
    async def open(cls, directory: Path, dimensions: Mapping[str, int] = DEFAULT_DIMENSIONS) -> EdgeVectors:
        vectors = cls(directory, dimensions)
        try:
            for name in vectors._dimensions:
                await vectors._call(f"recovery of collection {name!r}", vectors._after_swap_sync, name)
                await vectors._call(f"open of collection {name!r}", vectors._open_sync, name)
        except BaseException:
            await vectors.aclose()
            raise
        return vectors

    @property
    def collections(self) -> tuple[str, ...]:
        return tuple(self._dimensions)

    async def _call(self, op: str, fn: Callable[..., T], /, *args: Any) -> T:
        if self._closed:
            raise ClosedError("EdgeVectors")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        except AgentMemoryError:
            raise
        except Exception as exc:
            raise StorageError(f"Qdrant Edge {op} failed: {exc}") from exc

    def _config(self, name: str) -> EdgeConfig:
        return EdgeConfig(vectors=EdgeVectorParams(size=self._dimensions[name], distance=Distance.Cosine))

    def _check(self, name: str) -> None:
        """Validate on the event loop, before any work is queued."""
        if self._closed:
            raise ClosedError("EdgeVectors")
        if name not in self._dimensions:
            known = ", ".join(self._dimensions)
            raise StorageError(f"Unknown vector collection {name!r}; known collections: {known}")

    def _shard(self, name: str) -> EdgeShard:
        shard = self._shards.get(name)
        if shard is None:
            raise StorageError(f"Vector collection {name!r} is not open (did a rebuild fail?); rebuild it")
        return shard

    # Everything below named *_sync runs on the owner thread.

    def _after_swap_sync(self, name: str) -> None:
        """What an index build cut off by the process's death left (`optimize_offline`): between the swap's two
        renames the shard is aside, and comes back (the rows the index job requeued before the swap are then applied
        to it); after them, the shard it replaced is removed. A copy being optimized is removed too."""
        path, aside, staging = self._dir / name, self._dir / f".{name}.replaced", self._dir / f".{name}.optimizing"
        if aside.is_dir() and not path.exists():
            log.warning("vector collection %r was set aside by an index build cut off mid-swap; restoring it", name)
            aside.rename(path)
        for leftover in (aside, staging):
            if leftover.exists():
                shutil.rmtree(leftover)

    def _open_sync(self, name: str) -> None:
        path = self._dir / name
        if path.is_dir() and any(path.iterdir()):
            shard = EdgeShard.load(str(path), self._config(name))
        else:
            shard = EdgeShard.create(str(path), self._config(name))
        self._ensure_indexes(shard)
        self._shards[name] = shard

    @staticmethod
    def _ensure_indexes(shard: EdgeShard) -> None:
        present = shard.info().payload_schema
        if TENANT_FIELD not in present:
            shard.update(UpdateOperation.create_field_index(TENANT_FIELD, KeywordIndexParams(is_tenant=True)))
        for field in KEYWORD_FIELDS:
            if field not in present:
                shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Keyword))
        for field in FLOAT_FIELDS:
            if field not in present:
                shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Float))

    def _upsert_sync(self, name: str, items: Sequence[VectorItem]) -> None:
        self._shard(name).update(UpdateOperation.upsert_points([edge_point(item) for item in items]))

    def _search_sync(self, name: str, vector: Vector, limit: int, where: Mapping[str, Any] | None) -> list[VectorHit]:
        found = self._shard(name).query(_nearest(vector, limit, where))
        return [VectorHit(MemoryId(str(hit.id)), float(hit.score)) for hit in found]

    def _search_many_sync(
        self, name: str, vectors: Sequence[Vector], limit: int, where: Mapping[str, Any] | None
    ) -> list[list[VectorHit]]:
        batch = QueryBatchRequest([_nearest(vector, limit, where) for vector in vectors])
        return [
            [VectorHit(MemoryId(str(hit.id)), float(hit.score)) for hit in found]
            for found in self._shard(name).query_batch(batch)
        ]

    def _set_payloads_sync(self, name: str, payloads: Sequence[tuple[str, dict[str, Any]]]) -> None:
        shard = self._shard(name)
        for point, payload in payloads:
            shard.update(UpdateOperation.set_payload([point], payload))

    def _delete_sync(self, name: str, ids: list[str]) -> None:
        self._shard(name).update(UpdateOperation.delete_points(list(ids)))

    def _ids_sync(self, name: str) -> set[str]:
        shard = self._shard(name)
        found: set[str] = set()
        offset: Any = None
        while True:
            request = ScrollRequest(offset=offset, limit=BATCH_SIZE, with_payload=False, with_vector=False)
            records, offset = shard.scroll(request)
            found.update(str(record.id) for record in records)
            if offset is None:
                return found

    def _payloads_sync(self, name: str) -> dict[str, dict[str, Any]]:
        shard = self._shard(name)
        found: dict[str, dict[str, Any]] = {}
        offset: Any = None
        while True:
            request = ScrollRequest(offset=offset, limit=BATCH_SIZE, with_payload=True, with_vector=False)
            records, offset = shard.scroll(request)
            found.update((str(record.id), dict(record.payload or {})) for record in records)
            if offset is None:
                return found

    def _recreate_sync(self, name: str) -> None:
        shard = self._shards.pop(name, None)
        if shard is not None:
            shard.close()
        if (self._dir / name).exists():
            shutil.rmtree(self._dir / name)
        self._open_sync(name)

    def _flush_sync(self) -> None:
        for shard in self._shards.values():
            shard.flush()

    def _close_sync(self) -> None:
        errors: list[Exception] = []
        for name in list(self._shards):
            shard = self._shards.pop(name)
            try:
                shard.flush()
                shard.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise StorageError(f"Qdrant Edge close failed: {errors[0]}") from errors[0]

    # The VectorStore Protocol.

    async def upsert(self, collection: str, items: Sequence[VectorItem]) -> None:
        """Insert or replace points, in batches of BATCH_SIZE; the same id twice leaves one point."""
        self._check(collection)
        for batch in batches(items):
            await self._call(f"upsert into {collection!r}", self._upsert_sync, collection, batch)

    async def search(
        self, collection: str, vector: Vector, *, limit: int, where: dict[str, Any] | None = None
    ) -> list[VectorHit]:
        """The `limit` nearest points, best first; score is the cosine similarity."""
        self._check(collection)
        if limit <= 0:
            return []
        return await self._call(f"search of {collection!r}", self._search_sync, collection, vector, limit, where)

    async def search_many(
        self, collection: str, vectors: Sequence[Vector], *, limit: int, where: dict[str, Any] | None = None
    ) -> list[list[VectorHit]]:
        """`search` for each vector, in order, as one planned batch on the shard's thread: one hop from the loop,
        not one per vector (the write path's novelty check of a batch of turns)."""
        self._check(collection)
        if limit <= 0 or not vectors:
            return [[] for _ in vectors]
        return await self._call(f"search of {collection!r}", self._search_many_sync, collection, vectors, limit, where)

    async def set_payloads(self, collection: str, payloads: Sequence[tuple[MemoryId, dict[str, Any]]]) -> None:
        """Set each point's own payload fields, a batch to a hop to the owner thread (a point that does not exist is
        a StorageError naming it)."""
        self._check(collection)
        wanted = [(point_id(memory_id), payload) for memory_id, payload in payloads]
        for batch in batches(wanted):
            await self._call(f"payload of {collection!r}", self._set_payloads_sync, collection, batch)

    async def delete(self, collection: str, ids: Iterable[MemoryId]) -> None:
        self._check(collection)
        wanted = [point_id(memory_id) for memory_id in ids]
        for batch in batches(wanted):
            await self._call(f"delete from {collection!r}", self._delete_sync, collection, batch)

    async def ids(self, collection: str) -> set[str]:
        self._check(collection)
        return await self._call(f"scroll of {collection!r}", self._ids_sync, collection)

    async def payloads(self, collection: str) -> dict[str, dict[str, Any]]:
        """Every point's payload, by id: what `agent-memory doctor` compares with SQLite."""
        self._check(collection)
        return await self._call(f"scroll of {collection!r}", self._payloads_sync, collection)

    async def count(self, collection: str) -> int:
        self._check(collection)
        return await self._call(f"count of {collection!r}", lambda: self._shard(collection).count(CountRequest()))

    async def rebuild(self, collection: str, items: Sequence[VectorItem]) -> None:
        """Drop the shard directory, create it empty, then load `items` in batches."""
        self._check(collection)
        await self._call(f"rebuild of {collection!r}", self._recreate_sync, collection)
        await self.upsert(collection, items)

    async def optimize(self, collection: str) -> bool:
        """Build the HNSW index (slow: a sleep job, never the write path). True if anything changed."""
        self._check(collection)
        return await self._call(f"optimize of {collection!r}", lambda: self._shard(collection).optimize())

    async def index_status(self, collection: str) -> tuple[int, int]:
        """(points, vectors in the HNSW index): the difference is what an exact scan still covers."""
        self._check(collection)

        def status() -> tuple[int, int]:
            info = self._shard(collection).info()
            return int(info.points_count), int(info.indexed_vectors_count)

        return await self._call(f"status of {collection!r}", status)

    async def optimize_offline(self, collection: str, *, at_swap: AtSwap | None = None) -> dict[str, Any]:
        """Build the HNSW index without stopping the process: copy the shard (flushed, on the owner thread, so the
        copy is consistent), optimize the copy in a child process, then swap it in (close, rename, load). Searches
        and writes go on meanwhile against the old shard; writes made after the copy are not in the new one, so the
        caller re-projects them: the swap runs inside `at_swap()`, where the index job requeues them first."""
        self._check(collection)
        staging = self._dir / f".{collection}.optimizing"
        await self._call(f"snapshot of {collection!r}", self._snapshot_sync, collection, staging)
        try:
            result = await _optimize_in_child(staging, self._dimensions[collection])
            async with at_swap() if at_swap is not None else contextlib.nullcontext():
                await self._call(f"swap of {collection!r}", self._swap_sync, collection, staging)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)
        return result

    def _snapshot_sync(self, name: str, staging: Path) -> None:
        shard = self._shard(name)
        shard.flush()
        if staging.exists():
            shutil.rmtree(staging)
        shutil.copytree(self._dir / name, staging)

    def _swap_sync(self, name: str, staging: Path) -> None:
        """Replace the open shard by the optimized copy; if the copy cannot be loaded, the old shard comes back."""
        path, aside = self._dir / name, self._dir / f".{name}.replaced"
        self._shards.pop(name).close()
        if aside.exists():
            shutil.rmtree(aside)
        path.rename(aside)
        staging.rename(path)
        try:
            self._open_sync(name)
        except Exception:
            shutil.rmtree(path, ignore_errors=True)
            aside.rename(path)
            self._open_sync(name)
            raise
        shutil.rmtree(aside, ignore_errors=True)

    async def flush(self) -> None:
        await self._call("flush", self._flush_sync)

    async def aclose(self) -> None:
        """Flush and close every shard. Idempotent; any later call raises ClosedError."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._close_sync)
        finally:
            self._thread.shutdown(wait=True)


async def _optimize_in_child(path: Path, dimension: int) -> dict[str, Any]:
    """Run agent_memory.storage.optimize_shard on `path` in a child Python; its JSON report, or StorageError."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_memory.storage.optimize_shard",
        str(path),
        str(dimension),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    if child.returncode != 0:
        raise StorageError(f"Building the vector index failed (exit {child.returncode}): {err.decode()[-500:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def _nearest(vector: Vector, limit: int, where: Mapping[str, Any] | None) -> QueryRequest:
    return QueryRequest(
        limit=limit,
        query=Query.Nearest([float(x) for x in vector]),
        filter=edge_filter(where),
        with_payload=False,
        with_vector=False,
    )
