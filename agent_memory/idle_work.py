"""Background work that runs only while a store is idle: batches back to back once nothing was written and no
question asked for a while, until someone writes or asks, or nothing is left.

The vector upgrade (vector_upgrade.py) and the entity refresh (entity_refresh.py) share it. Each batch is one
transaction, so it adds one to the activity count; more than that while a batch ran means someone else wrote or
asked, and the loop steps back until the store is quiet again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Batch = Callable[[], Awaitable[tuple[int, int]]]
"""One batch of the work: (changed, found). Found 0: nothing is left."""


class IdleWork:
    """Runs `batch` while `activity` stands still but for the batches' own commits; see the module docstring."""

    def __init__(
        self, name: str, batch: Batch, *, activity: Callable[[], int], delay: float, finished: str = ""
    ) -> None:
        """`activity` grows with every write and every question; `delay` is how long (seconds) it must stand
        still before the work starts; `finished` is logged once the work that changed something is done."""
        self.name, self._batch, self._activity, self._delay, self._finished = name, batch, activity, delay, finished
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        """Once no write was committed and no question asked for `delay` (and something was written since the last
        look found nothing to do), batches back to back until someone writes or asks, or nothing is left."""
        settled = -1  # activity when nothing was last found to do, or a batch last failed
        while True:
            seen = self._activity()
            await asyncio.sleep(self._delay)
            if self._activity() != seen or seen == settled:  # someone is busy, or nothing new since
                continue
            settled = await self._while_idle()

    async def _while_idle(self) -> int:
        """Batches while only they commit. Returns the activity count if the work is done or a batch failed (wait
        for the next write), else -1."""
        changed = 0
        while True:
            before = self._activity()
            try:
                done, found = await self._batch()
            except asyncio.CancelledError:
                raise
            except Exception:  # a log record that cannot be read, an engine gone: doctor reports those
                log.exception("%s: a batch failed; trying again after the next write", self.name)
                return self._activity()
            changed += done
            if not found:
                if changed and self._finished:
                    log.info("%s: %s", self.name, self._finished)
                return self._activity()
            if self._activity() != before + 1:  # more than the batch's own commit: someone wrote or asked meanwhile
                return -1
