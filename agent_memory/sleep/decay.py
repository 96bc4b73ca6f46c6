"""Decay and tiering: how strongly each memory is still held, and which tier that puts it in.

Both use `scoring.decay_strength`, the one decay function, which retrieval also calls with the query's `now`: a
memory fades exponentially in the time since it was last used, slower the more often it was used and the more
arousing and surprising it was, and a consolidated memory (generation >= 1) never below the floor (0.3).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent_memory.config import DecayConfig, SleepConfig
from agent_memory.models import Tier
from agent_memory.scoring import memory_strength
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.sleep_records import DecayRow


def strength_of(row: DecayRow, now: datetime, decay: DecayConfig) -> float:
    return memory_strength(row, now, decay)


def tier_of(score: float, generation: int, sleep: SleepConfig) -> Tier:
    """Hot while strongly held, warm as it fades, cold when nearly gone; a consolidated memory stops at warm."""
    if score >= sleep.warm_below:
        return Tier.HOT
    if score >= sleep.cold_below or generation >= 1:
        return Tier.WARM
    return Tier.COLD


async def run_decay(records: SqliteRecords, now: datetime, decay: DecayConfig, sleep: SleepConfig) -> dict[str, Any]:
    """Score every active memory at `now`, a page per transaction; counts what changed."""
    scored = changed = 0
    after = 0
    while page := await records.decay_page(after, sleep.page_size):
        scores = [(row.memory_id, round(strength_of(row, now, decay), 6)) for row in page]
        moved = [(m, s) for (m, s), row in zip(scores, page, strict=True) if abs(s - row.decay_score) > 1e-6]
        if moved:
            await records.set_decay_scores(moved)
        scored, changed, after = scored + len(page), changed + len(moved), page[-1].rowid
    return {"scored": scored, "changed": changed}


async def run_tiering(records: SqliteRecords, now: datetime, sleep: SleepConfig) -> dict[str, Any]:
    """Move memories between tiers by their decay score (run decay first to bring it up to date)."""
    moves: dict[str, int] = {}
    after = 0
    while page := await records.decay_page(after, sleep.page_size):
        changes = [(row, tier_of(row.decay_score, row.generation, sleep)) for row in page]
        changes = [(row, tier) for row, tier in changes if tier is not row.tier]
        if changes:
            await records.set_tiers([(row.memory_id, tier) for row, tier in changes], now=now)
        for row, tier in changes:
            key = f"{row.tier.value}->{tier.value}"
            moves[key] = moves.get(key, 0) + 1
        after = page[-1].rowid
    tiers = await records.tier_counts()
    hot = tiers.get(Tier.HOT.value, 0)
    return {"moved": moves, "tiers": tiers, "compaction_due": hot > sleep.hot_tier_threshold}
