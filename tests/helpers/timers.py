"""A Timer for the retry loops that skips their pauses and records them, so a test asserts on the
pauses a loop asked for (how long it would have waited) instead of on the wall clock."""

from __future__ import annotations

import threading
import time


class SkippingTimer:
    """Real monotonic time plus every pause requested so far; a pause returns at once."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._skipped = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() + self._skipped

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.pauses.append(seconds)
            self._skipped += seconds

    @property
    def paused(self) -> float:
        return sum(self.pauses)
