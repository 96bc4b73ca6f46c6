"""Dense vectors in a Qdrant server or cluster through qdrant-client: the scale-out path (`vectors.url`).

Same semantics as `EdgeVectors`: one collection per name (`f"{prefix}_{name}"`), cosine distance, ids are canonical
lowercase UUID strings, a hit's score is the cosine similarity, upsert replaces, `where` is exact match (a list
value means any of; a `Between`, a range of numbers). `namespace` carries a tenant keyword index, so one collection
can hold many namespaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from agent_memory.errors import AgentMemoryError, ClosedError, StorageError
from agent_memory.models import MemoryId, Vector
from agent_memory.projection_models import Between, VectorHit, VectorItem
from agent_memory.storage.vectors import BATCH_SIZE, DEFAULT_DIMENSIONS, FLOAT_FIELDS, KEYWORD_FIELDS, batches, point_id

TENANT_INDEX = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)


def server_filter(where: Mapping[str, Any] | None) -> models.Filter | None:
    """Payload key -> exact value, all must match; a list (or tuple, set) value matches any of its items, and a
    `Between` a range of numbers."""
    if not where:
        return None
    conditions: list[models.Condition] = []
    for key, value in where.items():
        if isinstance(value, Between):
            conditions.append(models.FieldCondition(key=key, range=models.Range(gte=value.gte, lt=value.lt)))
            continue
        many = isinstance(value, list | tuple | set | frozenset)
        match = models.MatchAny(any=list(value)) if many else models.MatchValue(value=value)
        conditions.append(models.FieldCondition(key=key, match=match))
    return models.Filter(must=conditions)


def server_point(item: VectorItem) -> models.PointStruct:
    return models.PointStruct(
        id=point_id(item.memory_id), vector=[float(x) for x in item.vector], payload=dict(item.payload)
    )


def is_local(client: AsyncQdrantClient) -> bool:
    """qdrant-client's in-process mode (":memory:" or a path), which has no payload indexes and warns if asked."""
    options = client.init_options
    return options.get("location") == ":memory:" or options.get("path") is not None


class QdrantServerVectors:
    """The VectorStore Protocol over `AsyncQdrantClient`. Call `ensure_collections()` (or use `open`) first."""

    def __init__(
        self,
        client: AsyncQdrantClient,
        prefix: str = "agent_memory",
        dimensions: Mapping[str, int] = DEFAULT_DIMENSIONS,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._dimensions = dict(dimensions)
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        api_key: str = "",
        prefix: str = "agent_memory",
        dimensions: Mapping[str, int] = DEFAULT_DIMENSIONS,
    ) -> QdrantServerVectors:
        vectors = cls(AsyncQdrantClient(url=url, api_key=api_key or None), prefix, dimensions)
        try:
            await vectors.ensure_collections()
        except BaseException:
            await vectors.aclose()
            raise
        return vectors

    @property
    def collections(self) -> tuple[str, ...]:
        return tuple(self._dimensions)

    def _name(self, collection: str) -> str:
        """The server-side collection name, after checking the store is open and knows `collection`."""
        if self._closed:
            raise ClosedError("QdrantServerVectors")
        if collection not in self._dimensions:
            known = ", ".join(self._dimensions)
            raise StorageError(f"Unknown vector collection {collection!r}; known collections: {known}")
        return f"{self._prefix}_{collection}"

    @contextmanager
    def _guard(self, op: str) -> Iterator[None]:
        try:
            yield
        except AgentMemoryError:
            raise
        except Exception as exc:
            raise StorageError(f"Qdrant server {op} failed: {exc}") from exc

    async def ensure_collections(self) -> None:
        """Create every missing collection (cosine) with its payload indexes, and the float indexes a collection made
        before them lacks."""
        for collection in self._dimensions:
            name = self._name(collection)
            with self._guard(f"creation of {name!r}"):
                if not await self._client.collection_exists(name):
                    await self._create(collection)
                elif not is_local(self._client):
                    indexed = (await self._client.get_collection(name)).payload_schema
                    for field in FLOAT_FIELDS:
                        if field not in indexed:
                            await self._client.create_payload_index(
                                name, field, models.PayloadSchemaType.FLOAT, wait=True
                            )

    async def _create(self, collection: str) -> None:
        name = self._name(collection)
        params = models.VectorParams(size=self._dimensions[collection], distance=models.Distance.COSINE)
        await self._client.create_collection(name, vectors_config=params)
        if is_local(self._client):
            return
        await self._client.create_payload_index(name, "namespace", field_schema=TENANT_INDEX, wait=True)
        for field in KEYWORD_FIELDS:
            await self._client.create_payload_index(name, field, models.PayloadSchemaType.KEYWORD, wait=True)
        for field in FLOAT_FIELDS:
            await self._client.create_payload_index(name, field, models.PayloadSchemaType.FLOAT, wait=True)

    async def upsert(self, collection: str, items: Sequence[VectorItem]) -> None:
        """Insert or replace points, in batches of BATCH_SIZE; the same id twice leaves one point."""
        name = self._name(collection)
        for batch in batches(items):
            points = [server_point(item) for item in batch]
            with self._guard(f"upsert into {name!r}"):
                await self._client.upsert(name, points=points, wait=True)

    async def search(
        self, collection: str, vector: Vector, *, limit: int, where: dict[str, Any] | None = None
    ) -> list[VectorHit]:
        """The `limit` nearest points, best first; score is the cosine similarity."""
        name = self._name(collection)
        if limit <= 0:
            return []
        with self._guard(f"search of {name!r}"):
            response = await self._client.query_points(
                name,
                query=[float(x) for x in vector],
                limit=limit,
                query_filter=server_filter(where),
                with_payload=False,
                with_vectors=False,
            )
        return [VectorHit(MemoryId(str(hit.id)), float(hit.score)) for hit in response.points]

    async def search_many(
        self, collection: str, vectors: Sequence[Vector], *, limit: int, where: dict[str, Any] | None = None
    ) -> list[list[VectorHit]]:
        """`search` for each vector, in order, in one request (query_batch_points)."""
        name = self._name(collection)
        if limit <= 0 or not vectors:
            return [[] for _ in vectors]
        requests = [
            models.QueryRequest(
                query=[float(x) for x in vector],
                limit=limit,
                filter=server_filter(where),
                with_payload=False,
                with_vector=False,
            )
            for vector in vectors
        ]
        with self._guard(f"search of {name!r}"):
            responses = await self._client.query_batch_points(name, requests=requests)
        return [[VectorHit(MemoryId(str(hit.id)), float(hit.score)) for hit in r.points] for r in responses]

    async def set_payloads(self, collection: str, payloads: Sequence[tuple[MemoryId, dict[str, Any]]]) -> None:
        """Set each point's own payload fields, a batch of them to a request (a point that does not exist is a
        StorageError naming it)."""
        name = self._name(collection)
        for batch in batches(list(payloads)):
            operations: list[models.UpdateOperation] = [
                models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=[point_id(memory_id)]))
                for memory_id, payload in batch
            ]
            with self._guard(f"payload of {name!r}"):
                await self._client.batch_update_points(name, update_operations=operations, wait=True)

    async def delete(self, collection: str, ids: Iterable[MemoryId]) -> None:
        name = self._name(collection)
        wanted: list[models.ExtendedPointId] = [point_id(memory_id) for memory_id in ids]
        for batch in batches(wanted):
            with self._guard(f"delete from {name!r}"):
                await self._client.delete(name, points_selector=models.PointIdsList(points=list(batch)), wait=True)

    async def ids(self, collection: str) -> set[str]:
        name = self._name(collection)
        found: set[str] = set()
        offset: models.ExtendedPointId | None = None
        while True:
            with self._guard(f"scroll of {name!r}"):
                records, offset = await self._client.scroll(
                    name, limit=BATCH_SIZE, offset=offset, with_payload=False, with_vectors=False
                )
            found.update(str(record.id) for record in records)
            if offset is None:
                return found

    async def payloads(self, collection: str) -> dict[str, dict[str, Any]]:
        """Every point's payload, by id: what `agent-memory doctor` compares with SQLite."""
        name = self._name(collection)
        found: dict[str, dict[str, Any]] = {}
        offset: models.ExtendedPointId | None = None
        while True:
            with self._guard(f"scroll of {name!r}"):
                records, offset = await self._client.scroll(
                    name, limit=BATCH_SIZE, offset=offset, with_payload=True, with_vectors=False
                )
            found.update((str(record.id), dict(record.payload or {})) for record in records)
            if offset is None:
                return found

    async def count(self, collection: str) -> int:
        name = self._name(collection)
        with self._guard(f"count of {name!r}"):
            return (await self._client.count(name, exact=True)).count

    async def rebuild(self, collection: str, items: Sequence[VectorItem]) -> None:
        """Delete the collection, create it empty, then load `items` in batches."""
        name = self._name(collection)
        with self._guard(f"rebuild of {name!r}"):
            await self._client.delete_collection(name)
            await self._create(collection)
        await self.upsert(collection, items)

    async def optimize(self, collection: str) -> bool:
        """A server optimizes on its own; kept for parity with EdgeVectors. Always False."""
        self._name(collection)
        return False

    async def index_status(self, collection: str) -> tuple[int, int]:
        """(points, indexed vectors) as the server reports them; the server indexes on its own."""
        name = self._name(collection)
        with self._guard(f"info of {name!r}"):
            info = await self._client.get_collection(name)
        return int(info.points_count or 0), int(info.indexed_vectors_count or 0)

    async def optimize_offline(
        self, collection: str, *, at_swap: Callable[[], AbstractAsyncContextManager[object]] | None = None
    ) -> dict[str, Any]:
        """A server builds its index itself: nothing to do, and no swap to make (`at_swap` is never entered)."""
        return {"changed": False}

    async def flush(self) -> None:
        """Writes are acknowledged with wait=True, so there is nothing to flush."""
        if self._closed:
            raise ClosedError("QdrantServerVectors")

    async def aclose(self) -> None:
        """Close the client. Idempotent; any later call raises ClosedError."""
        if self._closed:
            return
        self._closed = True
        with self._guard("close"):
            await self._client.close()
