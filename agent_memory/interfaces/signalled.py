"""A uvicorn server that ends on SIGTERM or SIGINT and then lets its caller finish.

uvicorn's own handlers raise the signal again once serving stops, which kills the process before the code after
`serve()` runs: the daemon's scheduler and store would not be closed, and the proxy's recordings behind the answers
it gave would be lost. This one only asks the server to exit, and notes when.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Generator

import uvicorn

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalledServer(uvicorn.Server):
    """uvicorn.Server, except that a SIGTERM or SIGINT is not raised again once serving stops."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stopping_at: float | None = None  # time.monotonic() when the exit signal came

    def _on_signal(self, sig: int) -> None:
        self.stopping_at = self.stopping_at or time.monotonic()
        self.handle_exit(sig, None)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        for sig in HANDLED_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in HANDLED_SIGNALS:
                loop.remove_signal_handler(sig)
