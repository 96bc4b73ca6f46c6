"""What recovery and doctor keep in SQLite about the log: where recovery starts reading, the log records that repeat
an indexed turn, the projection formats, and the row counts stats() reads. Mixed into `SqliteRecords`
(records.py), which owns the connections."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiosqlite

from agent_memory.models import LogPosition, LogRecord
from agent_memory.storage.rows import ts

COUNTED = ("turns", "memories", "access_log", "save_decisions", "retrieval_events", "compaction_history")
"""The tables whose rows stats() reports, in its order (then retrieval_gaps, memories_<status>, sessions, images)."""


async def set_recovery_start(db: aiosqlite.Connection, start: tuple[int, int]) -> None:
    """In the transaction that indexes turns: where recovery must start if the process dies after it commits."""
    await db.execute(
        "INSERT INTO recovery_start (id, segment, offset) VALUES (1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET segment = excluded.segment, offset = excluded.offset",
        start,
    )


class RecoveryQueries:
    if TYPE_CHECKING:  # provided by SqliteRecords, which owns the connections

        async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

        def transaction(self, *, projected: bool = True) -> AbstractAsyncContextManager[Any]: ...

    async def recovery_start(self) -> LogPosition | None:
        """Where recovery reads the log from on open; None means from its first record."""
        rows = await self._fetch("SELECT segment, offset FROM recovery_start WHERE id = 1")
        return LogPosition(int(rows[0][0]), int(rows[0][1]), 0) if rows else None

    async def shadowed_ids(self) -> set[str]:
        """The log records that repeat a turn SQLite maps to another record."""
        return {str(r[0]) for r in await self._fetch("SELECT turn_id FROM shadowed_records")}

    async def shadow(self, repeats: Sequence[tuple[LogPosition, LogRecord]], *, now: datetime) -> None:
        """Note log records that repeat an indexed turn key: accounted for, never indexed (the key keeps its one
        record)."""
        async with self.transaction(projected=False) as db:
            await db.executemany(
                "INSERT OR IGNORE INTO shadowed_records (turn_id, namespace, session_id, turn_number, segment, "
                "offset, length, noted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (r.turn_id, r.namespace, r.session_id, r.turn_number, p.segment, p.offset, p.length, ts(now))
                    for p, r in repeats
                ],
            )

    async def move_turns(self, moves: Mapping[str, LogPosition]) -> None:
        """Point turn rows at where their record really is in the log (doctor --repair)."""
        async with self.transaction(projected=False) as db:
            await db.executemany(
                "UPDATE turns SET segment = ?, offset = ?, length = ? WHERE turn_id = ?",
                [(p.segment, p.offset, p.length, turn_id) for turn_id, p in moves.items()],
            )

    async def projection_format(self, name: str) -> int | None:
        rows = await self._fetch("SELECT version FROM projection_formats WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else None

    async def set_projection_format(self, name: str, version: int) -> None:
        async with self.transaction(projected=False) as db:
            await db.execute(
                "INSERT INTO projection_formats (name, version) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET version = excluded.version",
                (name, version),
            )

    async def counts(self) -> dict[str, int]:
        """Rows per table, memories per status, sessions (distinct namespace and session id) and image memories:
        one read of the counts the triggers keep (migration 0018), not a scan."""
        kept = {str(name): int(n) for name, n in await self._fetch("SELECT name, n FROM row_counts")}
        result = {table: kept.get(table, 0) for table in (*COUNTED, "retrieval_gaps")}
        result |= {name: n for name, n in sorted(kept.items()) if name.startswith("memories_") and n}
        result["sessions"] = kept.get("sessions", 0)
        result["images"] = kept.get("images", 0)
        return result

    async def counted_by_scan(self) -> dict[str, int]:
        """The same counts as `counts()`, counted from the tables (slow on a large store): what doctor compares the
        kept counts with."""
        result = {}
        for table in (*COUNTED, "retrieval_gaps"):
            result[table] = int((await self._fetch(f"SELECT count(*) FROM {table}"))[0][0])
        rows = await self._fetch("SELECT status, count(*) FROM memories GROUP BY status ORDER BY status")
        result |= {f"memories_{status}": int(n) for status, n in rows if n}
        sessions = "SELECT count(*) FROM (SELECT DISTINCT namespace, session_id FROM turns)"
        result["sessions"] = int((await self._fetch(sessions))[0][0])
        result["images"] = int((await self._fetch("SELECT count(*) FROM memories WHERE media = 'image'"))[0][0])
        return result

    async def recount(self) -> None:
        """Set the kept counts from the tables (doctor --repair, when they drifted)."""
        counted = await self.counted_by_scan()
        async with self.transaction(projected=False) as db:
            await db.execute("DELETE FROM row_counts")
            await db.executemany("INSERT INTO row_counts (name, n) VALUES (?, ?)", list(counted.items()))
