"""A background thread's CPU priority: on Linux a thread's niceness is its own, so one pool can give way to the
rest of the process without a process of its own."""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

IMPORT_NICENESS = 10
"""How much lower an import's model threads run than the rest of the process (Linux niceness, per thread)."""


def give_way(niceness: int = IMPORT_NICENESS) -> None:
    """Lower the calling thread's CPU priority to the main thread's niceness plus `niceness`, on Linux: an import's
    passes then give the cores to the questions and live turns that want them, and use them fully when nothing else
    does. Counted from the main thread (its id is the process's), so a thread started by a niced one is not niced
    twice. Elsewhere a thread cannot be niced alone, and nothing changes. A ThreadPoolExecutor's initializer."""
    if sys.platform != "linux":
        return
    thread = threading.get_native_id()
    try:
        wanted = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + niceness)
        if os.getpriority(os.PRIO_PROCESS, thread) < wanted:
            os.setpriority(os.PRIO_PROCESS, thread, wanted)
    except OSError as exc:  # a sandbox that forbids it: the thread keeps the process's priority
        log.debug("a background thread keeps its priority: %s", exc)
