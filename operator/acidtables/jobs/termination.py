"""SIGTERM in a job pod: stop at once, but never between a commit and its record in the outcome.

The job is its container's PID 1, to which the kernel delivers SIGTERM only through a handler: without
one, a CompactionJob deleted (or a node drained) left its pod running the whole grace period and then
killed it mid-write, with nothing said. With `install()`, SIGTERM interrupts the job as Ctrl-C would
(`Terminated` is a KeyboardInterrupt, so whatever cleans up after Ctrl-C cleans up after it: the group
being staged is aborted), after asking Spark to cancel its running jobs. A commit runs `held()`: a
signal that arrives during it waits until the commit has an answer and the outcome has recorded it, so
the outcome never says "nothing was committed" of a version that was.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

#: how long the handler waits for Spark to take the cancellation (a py4j call; the tasks stop after it)
CANCEL_WAIT_SECONDS = 10.0


class Terminated(KeyboardInterrupt):
    """SIGTERM: Kubernetes stops the pod."""


def cancel_spark_jobs() -> None:
    """Ask Spark to cancel every running job, as PySpark's own Ctrl-C handler does, so that its tasks stop
    writing into the staging directory the abort is about to delete. From a thread of its own: with
    PySpark's pinned threads the main thread's py4j connection is busy with the action it waits on, and
    a second command on it never gets through."""
    from pyspark import SparkContext  # here: the handler is installed before the job imports Spark

    context = SparkContext._active_spark_context
    if context is None:
        return

    def cancel() -> None:
        try:
            context.cancelAllJobs()
        except Exception:  # a JVM already gone: nothing runs there
            logger.info("cancelling Spark's jobs failed", exc_info=True)

    worker = threading.Thread(target=cancel, name="acidtables-cancel-spark", daemon=True)
    worker.start()
    worker.join(CANCEL_WAIT_SECONDS)


class Termination:
    """The job's SIGTERM handling; `held()` works (and does nothing) where it is not installed."""

    def __init__(self) -> None:
        self._holding = 0
        self._pending: str | None = None
        self._installed = False
        self._previous: Any = None

    def install(self) -> None:
        """Handle SIGTERM from now on; `restore()` puts back what was there before the first call."""
        previous = signal.signal(signal.SIGTERM, self._handle)
        if not self._installed:
            self._installed, self._previous = True, previous

    def ignore(self) -> None:
        """From here on the job only reports and cleans up: a signal must not cut that short (the grace
        period's SIGKILL still bounds it)."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed, self._previous = False, None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.ignore()  # one is enough: a second one must not interrupt the clean-up the first began
        cancel_spark_jobs()
        reason = f"stopped by {signal.Signals(signum).name}"
        if self._holding:
            self._pending = reason
            return
        raise Terminated(reason)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Run a step that must end as a whole; a SIGTERM during it is raised once it has ended, over any
        error it raised (the job stops either way), which becomes the Terminated's cause: a commit whose
        outcome is unknown must not be reported as nothing committed."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending is not None:
                reason, self._pending = self._pending, None
                raise Terminated(reason) from sys.exc_info()[1]


#: the process's one handler (a job process runs one job)
TERMINATION = Termination()
