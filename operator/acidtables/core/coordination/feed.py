"""A feed of what changes in etcd: catalog entries, table heads, in-flight transactions, recorded events.

The operator keeps AcidTable status and cluster-wide metrics from it instead of polling (design §6).
It starts from a state read at one store revision and then follows etcd's watch from the next one. A
watch that ends (a dropped connection, etcd restarted) is started again from the last revision seen,
so nothing is missed or repeated; when etcd has compacted that revision away, the feed reads the state
again and hands it over as a `Resync`, which says that changes in between may have been skipped
(a consumer that counts events dedupes them by key: each recorded event has a key of its own).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer
from acidtables.core.coordination.watches import RawKey, WatchCompacted, WatchLost
from acidtables.core.errors import AcidTablesError

logger = logging.getLogger(__name__)

ChangeKind = Literal["catalog", "head", "inflight", "event"]


@dataclass(frozen=True)
class KeyChange:
    """One key that changed. `value` is its JSON object, None when it was deleted (or is unreadable:
    then `damaged` says why, and the consumer reports it instead of failing)."""

    kind: ChangeKind
    #: the key under the prefix, e.g. tables/<id>/head
    key: str
    #: the table the key belongs to (for catalog entries: the id the entry names, if readable)
    table_id: str | None
    value: dict[str, Any] | None
    revision: int
    damaged: str | None = None

    @property
    def deleted(self) -> bool:
        return self.value is None and self.damaged is None


@dataclass(frozen=True)
class Resync:
    """The whole watched state at `revision`: replace what you had (changes before it may be lost)."""

    revision: int
    state: tuple[KeyChange, ...]


def classify(raw: RawKey) -> KeyChange | None:
    """The KeyChange a raw key is, or None for keys the feed does not follow (log, times, checkpoints...)."""
    parts = raw.key.split("/")
    kind: ChangeKind
    table_id: str | None
    if parts[0] == "catalog" and len(parts) == 3:
        kind, table_id = "catalog", None
    elif parts[0] == "tables" and len(parts) == 3 and parts[2] == "head":
        kind, table_id = "head", parts[1]
    elif parts[0] == "tables" and len(parts) == 4 and parts[2] == "inflight":
        kind, table_id = "inflight", parts[1]
    elif parts[0] == "events" and len(parts) == 3:
        kind, table_id = "event", parts[1]
    else:
        return None
    if raw.value is None:
        return KeyChange(kind, raw.key, table_id, None, raw.revision)
    try:
        value = json.loads(raw.value)
    except ValueError as exc:
        return KeyChange(kind, raw.key, table_id, None, raw.revision, damaged=f"not readable JSON ({exc})")
    if not isinstance(value, dict):
        return KeyChange(kind, raw.key, table_id, None, raw.revision, damaged=f"a JSON {type(value).__name__}")
    if kind == "catalog" and isinstance(value.get("table_id"), str):
        table_id = value["table_id"]
    return KeyChange(kind, raw.key, table_id, value, raw.revision)


def _changes(raws: Iterable[RawKey]) -> list[KeyChange]:
    return [c for c in map(classify, raws) if c is not None]


class ChangeFeed:
    """Follows the watched keys of one catalog (one etcd prefix). Thread-safe to `next` from one
    consumer; the watch's own thread only puts into a queue."""

    def __init__(self, coordinator: Coordinator, *, timer: Timer = SYSTEM_TIMER) -> None:
        self.coordinator = coordinator
        self.timer = timer
        #: the newest revision handed to the consumer (changes up to it are delivered)
        self.revision = 0
        #: False while the watch is down and being restarted (the operator reports it as a metric)
        self.up = False
        self._queue: queue.Queue[list[RawKey] | AcidTablesError] = queue.Queue()
        self._cancel: Any = None
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> Resync:
        """Read the state and start watching after it; the state is the first thing to apply."""
        return self._resync()

    def _resync(self) -> Resync:
        revision, raws = self.coordinator.watched_state()
        self.revision = revision
        self._watch()
        return Resync(revision, tuple(_changes(raws)))

    def _watch(self) -> None:
        with self._lock:
            if self._cancel is not None:
                self._cancel()
            self._queue = queue.Queue()
            target = self._queue
            self._cancel = self.coordinator.watch(self.revision + 1, lambda item: target.put(item))
            self.up = not self._closed  # a close() during the restart wins

    def next(self, timeout_seconds: float) -> list[KeyChange] | Resync:
        """The next changes in revision order ([] when none came within the timeout), or a Resync.

        A watch that ended is started again here, from the last revision delivered; while etcd is away
        this keeps trying (each attempt bounded by the coordinator's unavailable timeout) and returns []
        with `up` False, so the consumer can report it and call again."""
        if self._closed:
            raise AcidTablesError("the change feed is closed")
        try:
            item = self._queue.get(timeout=timeout_seconds)
        except queue.Empty:
            return []
        if isinstance(item, WatchCompacted):
            logger.warning("etcd compacted revision %d away under the watch: reading the state again", self.revision)
            self.up = False
            return self._resync()
        if isinstance(item, AcidTablesError):
            logger.warning("%s; watching again from revision %d", item, self.revision + 1)
            self.up = False
            return self._restart()
        changes = _changes(item)
        if item:
            self.revision = max(self.revision, max(raw.revision for raw in item))
        return changes

    def _restart(self) -> list[KeyChange] | Resync:
        try:
            self._watch()
        except WatchCompacted:
            return self._resync()
        except (WatchLost, AcidTablesError) as exc:  # etcd still away: say so and let the caller come back
            logger.info("etcd watch not restarted yet: %s", exc)
            self.timer.sleep(0.5)
            self._queue.put(WatchLost(str(exc)))
        return []

    def close(self) -> None:
        # down before the watch is cancelled: a reader that finds the feed closed must not see it up
        # while the cancel is still under way
        self._closed = True
        self.up = False
        with self._lock:
            if self._cancel is not None:
                self._cancel()
                self._cancel = None


__all__ = ["ChangeFeed", "KeyChange", "Resync", "classify"]
