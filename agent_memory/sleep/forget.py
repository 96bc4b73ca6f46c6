"""The sleep job `forget`: the forgetting policies (issue #20, seed "agent-memory"). Soft, like `forget()`: each
memory a policy takes becomes `forgotten` (a revision, kept in its history, agent `policy:forget`), leaves every
recall path, and can be restored; the log keeps every word.

The policies (sleep.forget_*, or the job's options): the memories of turns said in a role ("assistant"), of turns
older than an age or a date, and those whose words are only a greeting, a thanks or a reaction. They take only turn
memories (generation 0, text), never one kept by the fast path (an intense or startling turn), never a digest or a
merge. `dry_run` counts what would go and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from agent_memory.cognition.save_decision import is_phatic
from agent_memory.errors import InvalidInput
from agent_memory.manager import MemoryManager
from agent_memory.models import Role
from agent_memory.validation import check_aware, check_identifier


async def run_forgetting(
    manager: MemoryManager,
    now: datetime,
    *,
    roles: Sequence[str] | None = None,
    before: datetime | None = None,
    phatic: bool | None = None,
    namespace: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Apply the policies once; options left None come from `sleep.forget_*`. Returns what each took."""
    config = manager.config.sleep
    roles = tuple(config.forget_roles if roles is None else roles)
    for role in roles:
        if role not in {r.value for r in Role}:
            raise InvalidInput(
                f"Unknown role {role!r} in a forgetting policy; expected one of {[r.value for r in Role]}"
            )
    if before is None and config.forget_older_than > timedelta(0):
        before = now - config.forget_older_than
    before = None if before is None else check_aware("before", before)
    phatic = config.forget_phatic if phatic is None else phatic
    if namespace is not None:
        check_identifier("namespace", namespace)
    taken: dict[str, list[str]] = {"role": [], "older": [], "phatic": []}
    if roles or before is not None or phatic:
        await _choose(manager, taken, roles=roles, before=before, phatic=phatic, namespace=namespace)
    chosen = list(dict.fromkeys(i for ids in taken.values() for i in ids))
    forgotten = 0
    if not dry_run:
        for start in range(0, len(chosen), manager.config.sleep.page_size):
            page = chosen[start : start + manager.config.sleep.page_size]
            forgotten += await manager.records.forget_many(
                page, at=now, agent="policy:forget", reason=_why(roles, before, phatic)
            )
        manager.projector.notify()
    return {"by_role": len(taken["role"]), "older": len(taken["older"]), "phatic": len(taken["phatic"]),
            "forgotten": forgotten, "dry_run": dry_run}  # fmt: skip


async def _choose(
    manager: MemoryManager,
    taken: dict[str, list[str]],
    *,
    roles: tuple[str, ...],
    before: datetime | None,
    phatic: bool,
    namespace: str | None,
) -> None:
    after, size = 0, manager.config.sleep.page_size
    while page := await manager.records.forgettable(
        namespace=namespace, roles=roles, before=before, every=phatic, after_rowid=after, limit=size
    ):
        for rowid, memory_id, content, role, said_at in page:
            after = rowid
            if role in roles:
                taken["role"].append(memory_id)
            elif before is not None and said_at < before:
                taken["older"].append(memory_id)
            elif phatic and is_phatic(content):
                taken["phatic"].append(memory_id)


def _why(roles: tuple[str, ...], before: datetime | None, phatic: bool) -> str:
    parts = [f"said as {', '.join(roles)}"] if roles else []
    parts += [f"said before {before:%Y-%m-%d}"] if before is not None else []
    parts += ["phatic"] if phatic else []
    return "forgetting policy: " + "; ".join(parts)
