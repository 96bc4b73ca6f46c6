"""Revisions: correcting a memory in place (`update`) or by a new one (`supersede`), and the history of both.

`forget` takes a memory out of recall (its status `forgotten`; the log and its words stay) and `restore` brings it
back; both are revisions too. Every change but `restore` names the revision it read (`expected_revision`). The check and the change are one SQLite
transaction (storage/revision_records.py), so of N concurrent changes naming the same revision exactly one wins
and the others get RevisionConflict with both numbers, having changed nothing. The revision a change replaces is
kept with who changed it, when and why (`history`). An update re-embeds the new words before the transaction and
queues the projections (vectors, graph, keywords) through the outbox, like any other change; a superseded memory
keeps its words, leaves recall, and is linked from the memory that replaced it (SUPERSEDES).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import numpy as np

from agent_memory.errors import InvalidInput
from agent_memory.models import Memory, MemoryId, Revision, fresh_memory
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.revision_records import Change, NewText
from agent_memory.validation import check_content, check_count

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
MAX_REVISION = 2**53 - 1
LABEL_MAX = 200  # characters of an agent name or a reason


class Revisions:
    """update, supersede and history over the records; the manager delegates to it."""

    def __init__(
        self,
        records: SqliteRecords,
        *,
        embed: Embed,
        embedding_model: Callable[[], str],
        entities: Callable[[str], Sequence[str]],
        max_bytes: int,
        clock: Callable[[], datetime],
        notify: Callable[[], None],
    ) -> None:
        self._records, self._embed, self._model = records, embed, embedding_model
        self._entities, self._max_bytes, self._clock, self._notify = entities, max_bytes, clock, notify

    async def update(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory:
        """Change the memory's words in place; returns it at its new revision."""
        change = self._change(memory_id, expected_revision, agent, reason)
        text = await self._text(content)
        await self._records.revise(change, text)
        self._notify()
        return await self._records.get_memory(memory_id)

    async def supersede(
        self,
        memory_id: str,
        content: str,
        *,
        expected_revision: int,
        agent: str | None = None,
        reason: str | None = None,
    ) -> Memory:
        """Replace the memory by a new one saying `content`; returns the new memory. The old one stays, superseded."""
        change = self._change(memory_id, expected_revision, agent, reason)
        text = await self._text(content)
        old = await self._records.get_memory(memory_id)
        new = fresh_memory(
            namespace=old.namespace,
            memory_type=old.memory_type,
            content=text.content,
            keywords=(),
            entities=text.entities,
            created_at=change.at,
            event_at=change.at,
            importance=old.importance,
            confidence=old.confidence,
            valence=old.valence,
            arousal=old.arousal,
            session_id=old.session_id,
        )
        await self._records.replace(change, new, text)
        self._notify()
        return await self._records.get_memory(new.memory_id)

    async def forget(
        self, memory_id: str, *, expected_revision: int, agent: str | None = None, reason: str | None = None
    ) -> Memory:
        """Take the memory out of every recall path (the log and its words stay); `restore` brings it back."""
        await self._records.set_forgotten(self._change(memory_id, expected_revision, agent, reason), forgotten=True)
        self._notify()
        return await self._records.get_memory(memory_id)

    async def restore(self, memory_id: str, *, agent: str | None = None, reason: str | None = None) -> Memory:
        """Bring a forgotten memory back into recall, as it was."""
        await self._records.set_forgotten(self._change(memory_id, 1, agent, reason), forgotten=False)
        self._notify()
        return await self._records.get_memory(memory_id)

    async def history(self, memory_id: str) -> list[Revision]:
        """Every earlier revision, oldest first (the memory itself is the current one)."""
        return await self._records.revisions(memory_id)

    async def lineage(self, memory_id: str) -> list[MemoryId]:
        """The memories this one was superseded or merged into, in order: the last is the current one."""
        return await self._records.supersede_chain(memory_id)

    def _change(self, memory_id: str, expected: int, agent: str | None, reason: str | None) -> Change:
        if not isinstance(memory_id, str) or not memory_id:
            raise InvalidInput(f"memory_id must be a non-empty string, not {memory_id!r}")
        check_count("expected_revision", expected, low=1, high=MAX_REVISION)
        for field, value in (("agent", agent), ("reason", reason)):
            if value is not None and (not isinstance(value, str) or len(value) > LABEL_MAX):
                raise InvalidInput(f"{field} must be a string of at most {LABEL_MAX} characters, not {value!r}")
        return Change(memory_id, expected, self._clock(), agent, reason)

    async def _text(self, content: str) -> NewText:
        text = check_content(content, max_bytes=self._max_bytes)
        vector = (await self._embed([text]))[0]
        blob = np.asarray(vector, dtype="<f4").tobytes()
        return NewText(text, blob, self._model(), tuple(self._entities(text)))
