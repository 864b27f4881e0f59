"""Commit, conflict, retry and abort events, for whoever observes them (metrics, logs, tests).

Core reports to registered observers instead of importing prometheus_client (style §3: only
`acidtables.metrics` does), so the same events feed metrics in a Spark driver, a job pod and the
operator. An observer that raises never affects the transaction.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acidtables.core.names import split_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitEvent:
    #: "committed", "conflict", "retry", "aborted" or "exhausted"
    kind: str
    namespace: str
    table: str
    table_id: str
    operation: str
    txn_id: str
    version: int | None = None
    retries: int = 0
    duration_seconds: float = 0.0
    #: the exception class name, for conflicts
    exception: str | None = None
    #: for a retry: the pause before it (0 for the first rebase, which retries at once)
    backoff_seconds: float = 0.0


@functools.lru_cache(maxsize=1024)
def _split(table_name: str, kind: str) -> tuple[str, str]:
    """`split_name`, remembered: it is a pure function of its arguments (a name it refuses raises, and
    is never remembered), and every commit reports an event naming a table this process has named
    before, which would otherwise be matched against the identifier pattern again each time."""
    return split_name(table_name, method=kind)


def commit_event(
    kind: str, table_name: str, *, table_id: str, operation: str, txn_id: str, **fields: Any
) -> CommitEvent:
    """The one place a CommitEvent is built: the committer's outcomes and an abort alike."""
    namespace, table = _split(table_name, kind)
    return CommitEvent(
        kind=kind, namespace=namespace, table=table, table_id=table_id, operation=operation, txn_id=txn_id, **fields
    )


Observer = Callable[[CommitEvent], None]

_observers: list[Observer] = []
_lock = threading.Lock()


def subscribe(observer: Observer) -> Callable[[], None]:
    """Register an observer; returns the function that unregisters it."""
    with _lock:
        _observers.append(observer)

    def unsubscribe() -> None:
        with _lock:
            if observer in _observers:
                _observers.remove(observer)

    return unsubscribe


def emit(event: CommitEvent) -> None:
    with _lock:
        observers = list(_observers)
    for observer in observers:
        try:
            observer(event)
        except Exception:  # an observer's bug must not turn a commit into a failure
            logger.warning("commit event observer %r failed on %s", observer, event.kind, exc_info=True)
