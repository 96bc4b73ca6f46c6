"""`plain`: the models as JSON values, as FastAPI's `jsonable_encoder(asdict(x))` gives them, in a quarter of the time.

The daemon answers every retrieval with whole memories (a context of 1,024 tokens: 20 of them, 44 KB), and
`jsonable_encoder` walks each value through a chain of isinstance checks, after `asdict` has deep-copied it: 3.9
ms for one context on this machine, and FastAPI walked the result again (3.0 ms) before writing it, because a
route's return annotation made it a response model. Both were on the path of every proxy turn and every MCP
recall (docs/benchmarks.md, "The agent loop"). `plain` reads a dataclass's fields directly, and the hot routes hand
its result to a `JSONResponse`, so it is walked once.

It takes what the models hold: None, booleans, numbers, strings, enums (their value), datetimes and dates (ISO
8601, as `isoformat()` writes them), paths, dataclasses, mappings, and lists, tuples and sets. Anything else is a
TypeError naming its type: a model that grows a new kind of field fails its test here, not on a user's request.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from enum import Enum
from pathlib import PurePath
from typing import Any

from starlette.responses import JSONResponse

_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool)


def plain(value: Any) -> Any:
    """`value` as JSON values: dicts with string keys, lists, strings, numbers, booleans and None."""
    if value is None:
        return None
    if isinstance(value, Enum):  # before the scalars: a StrEnum is a str
        return plain(value.value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    names = _FIELDS.get(type(value))
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS.setdefault(type(value), tuple(f.name for f in dataclasses.fields(value)))
    if names is not None:
        return {name: plain(getattr(value, name)) for name in names}
    if isinstance(value, Mapping):
        return {plain(key): plain(item) for key, item in value.items()}  # json.dumps writes a number key as text
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(item) for item in value]
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value the API writes: {value!r:.80}")


def answer(data: Any) -> JSONResponse:
    """A route's answer, already JSON values (`plain`): FastAPI hands a Response on without walking it again."""
    return JSONResponse(data)


ENCODED_ON_THE_LOOP = 200
"""Up to this many memories an answer is encoded on the event loop (about 10 ms at 200); more on a worker thread:
a context of a million tokens (4,463 memories, 12.6 MB) took 0.5 s to turn into JSON."""


async def encoded(values: Callable[[], Any], memories: int) -> JSONResponse:
    """`answer(values())`, built on a worker thread when it holds more than ENCODED_ON_THE_LOOP memories."""
    if memories <= ENCODED_ON_THE_LOOP:
        return answer(values())
    return await asyncio.to_thread(lambda: answer(values()))
