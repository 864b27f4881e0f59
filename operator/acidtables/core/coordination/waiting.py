"""Deadline-bounded polling.

Waiting on another process (etcd coming up, a key appearing) with a fixed ``sleep`` is
either too slow or flaky depending on the machine.  Polling a predicate against a
monotonic deadline is as fast as the condition allows and fails loudly when it never
holds, so every such wait in the project goes through :func:`wait_for`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["SYSTEM_TIMER", "SystemTimer", "Timer", "join_thread", "wait_for"]


class Timer(Protocol):
    """How the retry loops (the commit's backoff, etcd's unavailable deadline) read time and pause.

    Injected, so a test can run a loop to its deadline in no time and assert on the pauses it asked
    for instead of on the wall clock."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemTimer:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_TIMER: Timer = SystemTimer()


def wait_for(
    predicate: Callable[[], bool],
    timeout_seconds: float,
    interval_seconds: float = 0.05,
    message: str = "",
) -> None:
    """Call ``predicate`` until it returns true or ``timeout_seconds`` pass.

    The predicate is always called at least once, even with a zero timeout, so a condition
    that already holds never times out.  Exceptions raised by the predicate propagate.

    Raises:
        ValueError: if the timeout is negative or the interval is not positive.
        TimeoutError: if the predicate never returned true before the deadline; its text is
            ``message`` when given.
    """
    if timeout_seconds < 0:
        raise ValueError(f"timeout_seconds must be >= 0, got {timeout_seconds!r}")
    if interval_seconds <= 0:
        raise ValueError(f"interval_seconds must be > 0, got {interval_seconds!r}")
    # monotonic, not time.time(): a wall-clock jump must not shorten or stretch the wait.
    deadline = time.monotonic() + timeout_seconds
    while True:
        if predicate():
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(message or f"condition not met within {timeout_seconds:g} s")
        # Never sleep past the deadline: the last check should happen close to it.
        time.sleep(min(interval_seconds, remaining))


def join_thread(thread: threading.Thread | None, timeout_seconds: float) -> bool:
    """Wait (within `timeout_seconds`) for a background thread a close() ended to finish; a thread never
    waits for itself (close() called from its own work). True when it is gone."""
    if thread is None or thread is threading.current_thread():
        return True
    thread.join(timeout_seconds)
    return not thread.is_alive()
