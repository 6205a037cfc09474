"""Graceful stop: the first SIGINT/SIGTERM asks the training loop to stop after the current step.

The loop polls `stop.requested` between steps, writes a checkpoint and exits 0. A second
signal aborts at once (KeyboardInterrupt); the last complete checkpoint stays usable because
checkpoints are written atomically.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulStop:
    """Context manager that turns the first SIGINT/SIGTERM into `requested = "SIGTERM"` (etc.)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> GracefulStop:
        # Handlers can only be installed from the main thread; elsewhere signals keep their default.
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise KeyboardInterrupt(f"second {name}: aborting without a checkpoint")
        self.requested = name
        note = f"\n{name}: finishing the current step, then writing a checkpoint (send it again to abort now)"
        print(note, file=sys.stderr, flush=True)
