"""The `assess` job: label each save decision and retrieval whose outcome window has passed (policy/outcomes.py
says how), so the exported log can train a learned policy."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent_memory.manager import MemoryManager
from agent_memory.policy.outcomes import label_dropped, label_kept, label_retrieval


async def run_assess(manager: MemoryManager, now: datetime) -> dict[str, Any]:
    counts: dict[str, int] = {}
    await _assess_decisions(manager, now, counts)
    await _assess_retrievals(manager, now, counts)
    return counts


async def _assess_decisions(manager: MemoryManager, now: datetime, counts: dict[str, int]) -> None:
    window = manager.config.sleep.outcome_window
    records = manager.records
    while pending := await records.unlabelled_decisions(now - window):
        labels = []
        for decision in pending:
            end = decision.decided_at + window
            if decision.memory_id is not None:
                label = label_kept(await records.accessed(decision.memory_id, decision.decided_at, end))
            else:
                gaps = await records.gap_keywords(decision.namespace, decision.decided_at, end)
                text = (await manager.journal.read(decision.position)).content if gaps else ""
                label = label_dropped(text, gaps)
            labels.append((decision.decision_id, label))
            counts[f"save:{label}"] = counts.get(f"save:{label}", 0) + 1
        await records.label_decisions(labels, now=now)


async def _assess_retrievals(manager: MemoryManager, now: datetime, counts: dict[str, int]) -> None:
    window = manager.config.sleep.requery_window
    records = manager.records
    while pending := await records.unlabelled_retrievals(now - window):
        labels = []
        for event in pending:
            later = await records.queries_after(event.namespace, event.retrieval_id, event.at, event.at + window)
            label = label_retrieval(event.results, event.query, later)
            labels.append((event.retrieval_id, label))
            counts[f"retrieval:{label}"] = counts.get(f"retrieval:{label}", 0) + 1
        await records.label_retrievals(labels, now=now)
