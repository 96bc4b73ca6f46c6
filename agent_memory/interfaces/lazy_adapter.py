"""`LazyAdapter`: a pydantic `TypeAdapter` built on its first use instead of at import.

Building a TypeAdapter compiles its validator: a few milliseconds each, about 50 ms for the daemon client's dozen,
paid by every process that imports the client. A one-shot CLI command through the daemon decodes one answer, so it
should build one validator (issue #23: the faces that talk to the daemon stay light; tests/test_light_faces.py).
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from pydantic import TypeAdapter

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Decoder(Protocol[T_co]):
    """What the client asks of an adapter: a `TypeAdapter` or a `LazyAdapter`."""

    def validate_python(self, data: Any, /) -> T_co: ...


class LazyAdapter(Generic[T]):
    """`TypeAdapter(kind)`, built the first time `validate_python` is called (two threads racing build it twice,
    which is harmless: the adapters are equal)."""

    def __init__(self, kind: type[T]) -> None:
        self._kind = kind
        self._adapter: TypeAdapter[T] | None = None

    def validate_python(self, data: Any, /) -> T:
        if self._adapter is None:
            self._adapter = TypeAdapter(self._kind)
        return self._adapter.validate_python(data)
