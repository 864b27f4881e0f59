"""Work a commit asks for but does not wait for: archiving the log and writing checkpoints (design §2).

Both cost what the table holds, not what the commit changed, so neither may run on the commit path
(issue 32): the commit that asks returns at once and a thread of this process does the work. Each is
advisory: a failure is logged and the next request, or a reader's log replay, covers the gap. A key
asked for again while queued is done once, with the newest value.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BackgroundWork(Generic[K, V]):
    """A queue of keyed work and the one daemon thread that runs it, started at the first request."""

    def __init__(self, name: str, work: Callable[[K, V], None]) -> None:
        self.name = name
        self._work = work
        self._queue: OrderedDict[K, V] = OrderedDict()
        self._busy = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, key: K, value: V) -> None:
        """Do `work(key, value)` soon; a queued request of the same key takes this value instead."""
        with self._changed:
            self._queue[key] = value
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Wait until everything asked for is done; False if that took longer than the timeout."""
        deadline = time.monotonic() + timeout_seconds
        with self._changed:
            while self._queue or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                key, value = self._queue.popitem(last=False)
                self._busy = True
            try:
                self._work(key, value)
            except Exception:  # advisory: the next request covers it, and readers replay the log meanwhile
                logger.info("%s: %r failed", self.name, key, exc_info=True)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
