"""Work a commit asks for but does not wait for: archiving the log and writing checkpoints (design §2).

Both cost what the table holds, not what the commit changed, so neither may run on the commit path
(issue 32): the commit that asks returns at once and a thread of this process does the work. Each is
advisory: a failure is logged and the next request, or a reader's log replay, covers the gap. A key
asked for again while queued is done once, with the value `combine` keeps (the newest by default).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from acidtables.core.coordination.waiting import join_thread

logger = logging.getLogger(__name__)

#: how long close() waits for the work under way (one checkpoint or archive write) before leaving the
#: thread to end on its own
_STOP_SECONDS = 30.0

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _newest(_queued: V, asked: V) -> V:
    return asked


class BackgroundWork(Generic[K, V]):
    """A queue of keyed work and the one daemon thread that runs it, started at the first request and
    ended by `close` (a thread left running would keep its owner, and every snapshot it caches, alive)."""

    def __init__(self, name: str, work: Callable[[K, V], None], combine: Callable[[V, V], V] = _newest) -> None:
        self.name = name
        self._work = work
        self._combine = combine
        self._queue: OrderedDict[K, V] = OrderedDict()
        #: the key being worked on (None: idle)
        self._running: K | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, key: K, value: V) -> None:
        """Do `work(key, value)` soon; a queued request of the same key is combined with this one."""
        with self._changed:
            if self._closed:
                logger.debug("%s: closed, not doing %r", self.name, key)
                return
            self._queue[key] = self._combine(self._queue[key], value) if key in self._queue else value
            if self._thread is None:
                thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                thread.start()
                self._thread = thread  # only once started: a thread that never ran must not be waited for
            self._changed.notify_all()

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Wait until everything asked for is done; False if that took longer than the timeout."""
        return self._wait(lambda: not self._queue and self._running is None, time.monotonic() + timeout_seconds)

    def settle(self, key: K, timeout_seconds: float = 30.0) -> bool:
        """Drop the queued request for `key` and wait out a running one (a table about to be dropped: its
        checkpoint must not land in a location being emptied); False if the running one took too long."""
        with self._changed:
            self._queue.pop(key, None)
        return self._wait(lambda: self._running != key, time.monotonic() + timeout_seconds)

    def close(self) -> None:
        """Take no more work and let the thread end once what is queued is done (or dropped: `flush` first
        to have it done)."""
        with self._changed:
            self._closed = True
            self._queue.clear()
            self._changed.notify_all()
            thread = self._thread
        # what runs now finishes (a checkpoint or archive write is bounded); the thread then ends
        if not join_thread(thread, _STOP_SECONDS):
            logger.warning("%s: still working %g s after close; it ends with its work", self.name, _STOP_SECONDS)

    def _wait(self, done: Callable[[], bool], deadline: float) -> bool:
        with self._changed:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def _run(self) -> None:
        """Do queued work in order until closed: one request at a time, a failure logged and survived."""
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if not self._queue:
                    return
                key, value = self._queue.popitem(last=False)
                self._running = key
            try:
                self._work(key, value)
            except Exception:  # advisory: the next request covers it, and readers replay the log meanwhile
                logger.info("%s: %r failed", self.name, key, exc_info=True)
            finally:
                with self._changed:
                    self._running = None
                    self._changed.notify_all()
