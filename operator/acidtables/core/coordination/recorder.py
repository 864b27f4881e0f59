"""Recorded events: conflicts, aborts, retries and commit durations written to etcd under short leases,
so the operator can count what happens inside Spark jobs (design §2). Written by a thread of their own,
off the commit path, and best effort: recording never fails a job."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from acidtables.core.coordination.connection import Connection
from acidtables.core.coordination.values import dumps, json_object
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer, join_thread
from acidtables.core.errors import CorruptMetadataError
from acidtables.core.settings import EtcdSettings

logger = logging.getLogger(__name__)

#: how long commit durations gather before their batch is written (record_commit_duration)
DURATION_BATCH_SECONDS = 1.0


class Recorder(Connection):
    """The event queue, its writer thread and the events' leases."""

    def __init__(self, settings: EtcdSettings, *, timer: Timer = SYSTEM_TIMER) -> None:
        super().__init__(settings, timer=timer)
        #: per event TTL: (granted at, lease) shared by this process's events of that TTL
        self._events_leases: dict[int, tuple[float, Any]] = {}
        #: events waiting to be recorded by the recorder thread (off the commit path)
        self._events: list[tuple[str, dict[str, Any], int]] = []
        #: commit durations waiting for their batch: (table id, ttl) -> the batch event being filled
        self._durations: dict[tuple[str, int], dict[str, Any]] = {}
        self._durations_timer: threading.Timer | None = None
        self._events_ready = threading.Condition(self._lock)
        self._recorder: threading.Thread | None = None

    def record_event(self, table_id: str, txn_id: str, event: dict[str, Any], ttl: int) -> None:
        """Store a conflict, retry, exhaustion or abort for the operator to count: queued and written by
        a thread of its own, so a rebase costs no round trip for it; best effort, it never fails a job
        (close() flushes what is queued). Every event of this process shares one lease per `ttl / 2`
        window (one grant per window, not per event), so an event lives between `ttl / 2` and `ttl`
        seconds."""
        key = self.keys.event(table_id, time.time_ns() // 1000, txn_id, random.randrange(1 << 16))
        with self._lock:
            if self._closed.is_set():  # no thread is started once closed: it would outlive close()
                logger.debug("closed: not recording a %s event", event.get("kind"))
                return
            self._events.append((key, event, ttl))
            if self._recorder is None:
                self._recorder = threading.Thread(target=self._record_events, name="acidtables-events", daemon=True)
                self._recorder.start()
            self._events_ready.notify_all()

    def record_commit_duration(self, table_id: str, table: str, operation: str, seconds: float, ttl: int) -> None:
        """A landed commit's whole duration, for the operator's commit-duration histogram. Durations are
        batched per table and written at most once per `DURATION_BATCH_SECONDS` by the event recorder:
        one etcd write a second per busy table and process, however many commits, so the commit path
        keeps its one round trip and etcd its one proposal per commit."""
        with self._lock:
            batch = self._durations.setdefault((table_id, ttl), {"kind": "committed", "table": table, "durations": []})
            batch["durations"].append([operation, seconds])
            if self._durations_timer is None:
                self._durations_timer = threading.Timer(DURATION_BATCH_SECONDS, self._flush_durations)
                self._durations_timer.daemon = True
                self._durations_timer.start()

    def _flush_durations(self) -> None:
        with self._lock:
            batches, self._durations = self._durations, {}
            timer, self._durations_timer = self._durations_timer, None
        if timer is not None:
            timer.cancel()
        for (table_id, ttl), event in batches.items():
            self.record_event(table_id, "durations", event, ttl)

    def flush_events(self, timeout_seconds: float = 5.0) -> None:
        """Wait until the queued events (and batched commit durations) are written (or `timeout_seconds`
        passed)."""
        self._flush_durations()
        deadline = time.monotonic() + timeout_seconds
        with self._lock:
            while self._events and self._recorder is not None and time.monotonic() < deadline:
                self._events_ready.wait(0.05)

    def _record_events(self) -> None:
        while True:
            with self._lock:
                while not self._events and not self._closed.is_set():
                    self._events_ready.wait()
                if not self._events:
                    self._recorder = None
                    return
                key, event, ttl = self._events[0]
            try:
                lease = self._event_lease(ttl)
                self.client.put(key, dumps(event), lease=lease)
            except Exception as exc:  # metrics must never turn a result into a failure
                with self._lock:
                    self._events_leases.pop(ttl, None)  # a lost or revoked lease: grant a new one next time
                logger.info("could not record a %s event in etcd: %s", event.get("kind"), exc)
            with self._lock:
                self._events.pop(0)
                self._events_ready.notify_all()

    def _event_lease(self, ttl: int) -> Any:
        with self._lock:
            granted_at, lease = self._events_leases.get(ttl, (0.0, None))
            if lease is None or self.timer.now() - granted_at >= ttl / 2:
                lease = self.client.lease(ttl)
                self._events_leases[ttl] = (self.timer.now(), lease)
            return lease

    def _stop_recorder(self, timeout_seconds: float) -> None:
        """Once closed: let the recorder thread see it, and wait (within `timeout_seconds`) for it and the
        durations timer to end, so no thread of this coordinator is inside gRPC when the process exits."""
        with self._lock:
            self._events_ready.notify_all()
            recorder, timer = self._recorder, self._durations_timer
        if timer is not None:
            timer.cancel()
        for thread in (recorder, timer):
            join_thread(thread, timeout_seconds)

    def list_events(self, table_id: str | None = None) -> list[dict[str, Any]]:
        prefix = self.keys.events(table_id)
        values = self._call("an event listing", lambda c: list(c.get_prefix(prefix, sort_order="ascend")))
        events = []
        for value, meta in values:
            try:
                events.append(json_object(value, meta.key.decode(errors="replace")))
            except CorruptMetadataError as exc:  # events only feed metrics: skip a damaged one, say so
                logger.warning("skipping an unreadable event: %s", exc)
        return events
