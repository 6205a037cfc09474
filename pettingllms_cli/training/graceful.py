"""Graceful stop: the first SIGINT/SIGTERM asks the training loop to stop after the current step.

The loop polls `stop.requested` between steps, writes a checkpoint and exits 0. A second
signal aborts at once (KeyboardInterrupt); the last complete checkpoint stays usable because
checkpoints are written atomically. After the last checkpoint (the final held-out eval) there is
no step to finish: `at_once()` makes the first signal raise StopNow, which train.py reports.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_last_abort: list[str] = []  # why the last abort happened, for the CLI's one-line message


def abort_reason() -> str | None:
    """What the last signal abort said (None when no GracefulStop aborted in this process)."""
    return _last_abort[-1] if _last_abort else None


class StopNow(KeyboardInterrupt):
    """The first signal while `GracefulStop.at_once()` is on: there is no step to finish, so stop at once."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class GracefulStop:
    """Context manager that turns the first SIGINT/SIGTERM into `requested = "SIGTERM"` (etc.)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, object] = {}
        self._at_once = False

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

    def at_once(self) -> None:
        """From now on the first signal raises StopNow (e.g. in the final eval, after the last checkpoint)."""
        self._at_once = True
        if self.requested is not None:
            raise StopNow(self.requested)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._at_once and self.requested is None:
            self.requested = name
            raise StopNow(name)
        if self.requested is not None:
            _last_abort.append(f"second {name}: stopped at once without a checkpoint; --resume continues from the last one")
            raise KeyboardInterrupt(f"second {name}: aborting without a checkpoint")
        self.requested = name
        note = f"\n{name}: finishing the current step, then writing a checkpoint (send it again to abort now)"
        print(note, file=sys.stderr, flush=True)
