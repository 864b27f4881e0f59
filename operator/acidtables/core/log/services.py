"""What every table of one catalog shares: the etcd coordinator, storage, the snapshot cache, the clock.

Tables and transactions receive this object instead of a reference back to the Catalog (style: no
back-references). The clock and the jitter's random generator are here so tests can inject them.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import random
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from acidtables.core import events
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer, join_thread
from acidtables.core.errors import CorruptMetadataError
from acidtables.core.events import CommitEvent
from acidtables.core.log.archive import Archive
from acidtables.core.log.background import BackgroundWork
from acidtables.core.log.checkpoint_writer import StagedCheckpoint, stage_checkpoint
from acidtables.core.log.checkpoints import Previous, proven_checkpoint, read_snapshot
from acidtables.core.log.records import CommitRecord, unseal_entry
from acidtables.core.log.snapshot import Snapshot, SnapshotBuilder
from acidtables.core.log.tablelog import TableLog, archive_log
from acidtables.core.settings import Settings
from acidtables.core.storage.storage import Storage

logger = logging.getLogger(__name__)

Clock = Callable[[], int]


def wall_clock_us() -> int:
    return time.time_ns() // 1000


#: the outcomes recorded in etcd for the operator; commits need no record of their own (the log is one)
#: how long close() waits for an in-flight registration under way (one etcd request)
_REGISTRAR_STOP_SECONDS = 10.0

RECORDED_KINDS = frozenset({"conflict", "retry", "exhausted", "aborted"})


class Services:
    def __init__(
        self,
        settings: Settings,
        coordinator: Coordinator,
        *,
        clock: Clock = wall_clock_us,
        rng: random.Random | None = None,
        timer: Timer = SYSTEM_TIMER,
    ) -> None:
        self.settings = settings
        self.coordinator = coordinator
        self.clock = clock
        #: the commit loop's pauses between attempts (injectable: tests assert on the pauses, not on time)
        self.timer = timer
        self.rng = rng or random.Random()
        self._storages: dict[str, Storage] = {}
        self._archives: dict[tuple[str, str], Archive] = {}
        self.snapshots = SnapshotCache(self)
        self.registrar = Registrar(settings.commit.register_after_seconds)
        #: (table id, location) -> archive the log entries etcd no longer needs
        self.archiver: BackgroundWork[tuple[str, str], None] = BackgroundWork("acidtables-archiver", self._archive)
        #: (table id, location) -> (version, txn id): write a checkpoint of that version (the newest asked,
        #: whichever of two committing threads asks last)
        #: file adds and removes this process committed per table since it last asked for a checkpoint
        self._actions_since_checkpoint: dict[tuple[str, str], int] = {}
        self._actions_lock = threading.Lock()
        self.checkpointer: BackgroundWork[tuple[str, str], tuple[int, str]] = BackgroundWork(
            "acidtables-checkpointer", self._checkpoint, combine=max
        )
        #: more background work by name (the mirrors), made by the layers above at first use
        self._background: dict[str, BackgroundWork[Any, Any]] = {}
        self._background_lock = threading.Lock()

    def background(
        self, name: str, work: Callable[[Any, Any], None], combine: Callable[[Any, Any], Any] = max
    ) -> BackgroundWork[Any, Any]:
        """The one `BackgroundWork` of this name (created with `work` at the first call), closed with
        these services: how a layer above the log (the Delta mirror) runs work off the commit path
        without the log knowing it."""
        with self._background_lock:
            found = self._background.get(name)
            if found is None:
                found = self._background[name] = BackgroundWork(name, work, combine=combine)
            return found

    def checkpoint_due(self, table: tuple[str, str], record: CommitRecord) -> bool:
        """Whether the commit of `record` should ask for a checkpoint: every `checkpoint_interval`
        versions, or once this process has committed `checkpoint_actions` file adds and removes to the
        table since it last asked (ten 10,000-file appends would otherwise leave a reader 100,000 entries
        of log to replay)."""
        commit = self.settings.commit
        with self._actions_lock:
            actions = self._actions_since_checkpoint.get(table, 0) + len(record.adds) + len(record.removes)
            due = record.version % commit.checkpoint_interval == 0 or actions >= commit.checkpoint_actions
            self._actions_since_checkpoint[table] = 0 if due else actions
        return due

    def _archive(self, table: tuple[str, str], _: None) -> None:
        table_id, location = table
        archive_log(self.log(table_id, location), keep_versions=self.settings.commit.log_window_versions)

    def _checkpoint(self, table: tuple[str, str], at: tuple[int, str]) -> None:
        table_id, location = table
        version, txn_id = at
        try:
            self.snapshots.write_checkpoint(self.snapshots.load(table_id, location, version), txn_id)
        except Exception as exc:  # a checkpoint is an optimisation; the next one covers the gap
            logger.warning(
                "the checkpoint of %s at version %d failed (%s); snapshots read more log until the next",
                location,
                version,
                exc,
            )

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Wait for the checkpoints, archiving and mirroring this process asked for (a process about to
        exit), within one deadline for all; False if they took longer."""
        deadline = time.monotonic() + timeout_seconds
        with self._background_lock:
            works: list[BackgroundWork[Any, Any]] = [self.checkpointer, self.archiver, *self._background.values()]
        return all([work.flush(max(0.0, deadline - time.monotonic())) for work in works])

    def settle(self, table_id: str, location: str) -> bool:
        """Drop the table's queued checkpoint and archiving and wait out any running (before a drop)."""
        table = (table_id, location)
        with self._background_lock:
            works: list[BackgroundWork[Any, Any]] = [self.checkpointer, self.archiver, *self._background.values()]
        return all([work.settle(table) for work in works])

    def close(self) -> None:
        """End the background threads (what is still queued is dropped: `flush` first to finish it)."""
        self.checkpointer.close()
        self.archiver.close()
        with self._background_lock:
            extra = list(self._background.values())
        for work in extra:
            work.close()
        self.registrar.close()

    def report(self, event: CommitEvent, detail: Mapping[str, Any] | None = None) -> None:
        """Tell this process's observers (metrics, logs) about a commit outcome, and record the ones the
        operator counts cluster-wide (conflict, retry, exhausted, aborted) in etcd: they happen inside
        Spark drivers and job pods the operator cannot see otherwise. Never raises."""
        events.emit(event)
        duration_ttl = self.settings.commit.duration_event_ttl_seconds
        if event.kind == "committed" and duration_ttl > 0:
            # the commit's real duration, its landing round trip included: only the writer knows it, and
            # only after the compare-and-swap, so it cannot be in the log record the operator reads
            self.coordinator.record_commit_duration(
                event.table_id,
                f"{event.namespace}.{event.table}",
                event.operation,
                event.duration_seconds,
                duration_ttl,
            )
            return
        if event.kind not in RECORDED_KINDS:
            return
        self.coordinator.record_event(
            event.table_id,
            event.txn_id,
            {
                **(detail or {}),
                # after the detail, so every event spells these the same way
                "kind": event.kind,
                "table": f"{event.namespace}.{event.table}",
                "operation": event.operation,
                "txn_id": event.txn_id,
                "retries": event.retries,
                "exception": event.exception,
            },
            self.settings.commit.event_ttl_seconds,
        )

    def storage(self, location: str) -> Storage:
        storage = self._storages.get(location)
        if storage is None:
            storage = self._storages[location] = Storage(location)
        return storage

    def log(self, table_id: str, location: str) -> TableLog:
        """The table's log across etcd and its archive segments: what every reader of the log uses."""
        key = (table_id, location)
        archive = self._archives.get(key)
        if archive is None:
            archive = self._archives[key] = Archive(self.storage(location), table_id)
        return TableLog(self.coordinator, archive)

    def decode_log_entry(self, location: str, entry: dict[str, Any]) -> CommitRecord:
        """A log entry is the record itself, or a pointer to the immutable commit file holding it.

        Either one damaged (unreadable, not JSON, not the shape of a record, not matching its checksum)
        is CorruptMetadataError naming the version and the file, never a raw decoding error."""
        version = entry.get("version", "?")
        try:
            entry = unseal_entry(entry)
        except ValueError as exc:
            raise CorruptMetadataError(f"log entry {version} cannot be trusted: {exc}", key=f"log/{version}") from None
        if "commit_file" in entry:
            path = str(entry["commit_file"])
            try:
                entry = unseal_entry(json.loads(self.storage(location).read(path)))
            except (OSError, ValueError, AttributeError) as exc:  # AttributeError: JSON, but not an object
                raise CorruptMetadataError(
                    f"commit file {path} of log entry {version} at {location} is unreadable ({exc})", key=path
                ) from None
        try:
            return CommitRecord.from_json(entry)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise CorruptMetadataError(
                f"log entry {version} does not have the shape of a commit record ({type(exc).__name__}: {exc})",
                key=f"log/{version}",
            ) from None


class Registrable(Protocol):
    def register_in_flight(self) -> None: ...


class Registrar:
    """Registers each transaction that is still running `after_seconds` after it began, on a thread of
    its own (design §2): a quick commit's one round trip is its compare-and-swap, and a long one is
    visible in etcd (operator, retention) within a second of starting. Holds transactions weakly: one
    dropped without commit or abort is simply never registered."""

    def __init__(self, after_seconds: float) -> None:
        self.after_seconds = after_seconds
        self._due: list[tuple[float, int, weakref.ref[Registrable]]] = []
        self._sequence = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def schedule(self, transaction: Registrable) -> None:
        with self._changed:
            if self._closed:
                return
            due = time.monotonic() + self.after_seconds
            heapq.heappush(self._due, (due, next(self._sequence), weakref.ref(transaction)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="acidtables-registrar", daemon=True)
                self._thread.start()
            self._changed.notify()

    def close(self) -> None:
        """Register nothing more, and end the thread (waiting out a registration under way)."""
        with self._changed:
            self._closed = True
            self._due.clear()
            self._changed.notify_all()
            thread = self._thread
        join_thread(thread, _REGISTRAR_STOP_SECONDS)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    self._changed.wait(None if not self._due else self._due[0][0] - time.monotonic())
                if self._closed:
                    return
                _, _, ref = heapq.heappop(self._due)
            transaction = ref()
            if transaction is not None:
                try:
                    transaction.register_in_flight()
                except Exception:  # advisory: the commit does not depend on it
                    logger.info("an in-flight registration failed", exc_info=True)


class SnapshotCache:
    """Loads snapshots reading only what is new: from a cached snapshot, else from the nearest checkpoint.

    Either way at most `checkpoint_interval` log entries are read per load (plus the cached or
    checkpointed file set), so load time does not grow with the length of the history.
    """

    def __init__(self, services: Services, capacity: int = 16) -> None:
        self.services = services
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, int], Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def _nearest_cached(self, table_id: str, version: int) -> Snapshot | None:
        with self._lock:
            best = None
            for (tid, v), snap in self._entries.items():
                if tid == table_id and v <= version and (best is None or v > best.version):
                    best = snap
            return best

    def put(self, snapshot: Snapshot) -> None:
        key = (snapshot.metadata.table_id, snapshot.version)
        with self._lock:
            self._entries[key] = snapshot
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def forget(self, table_id: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == table_id]:
                del self._entries[key]

    def load(self, table_id: str, location: str, version: int) -> Snapshot:
        interval = self.services.settings.commit.checkpoint_interval
        base = self._nearest_cached(table_id, version)
        if base is not None and base.version == version:
            return base
        log = self.services.log(table_id, location)
        if base is None or version - base.version > interval:
            checkpoint = log.checkpoint_at_or_before(version, within=2 * interval)
            if checkpoint is not None and (base is None or checkpoint[0] > base.version):
                base = self._read_checkpoint(location, checkpoint[1], checkpoint[0]) or base
        entries = log.read(base.version if base else -1, version)
        builder = SnapshotBuilder(base)
        try:
            builder.apply_all(self.services.decode_log_entry(location, e) for e in entries)
        except ValueError as exc:  # a gap: a log entry between two others is missing
            raise CorruptMetadataError(str(exc), key=f"log/{builder.version + 1}") from None
        if builder.version != version:
            raise CorruptMetadataError(
                f"the log ends at version {builder.version} but the head says {version}: log entries are missing",
                key=f"log/{builder.version + 1}",
            )
        snapshot = builder.build()
        self.put(snapshot)
        return snapshot

    def _read_checkpoint(self, location: str, path: str, version: int) -> Snapshot | None:
        """The checkpoint's snapshot, or None (with a warning) when it is unreadable or does not prove
        itself: its version, file count and checksum must match. The log still has everything, so a
        checkpoint is never trusted, only used."""
        try:
            storage = self.services.storage(location)
            return read_snapshot(storage, proven_checkpoint(storage.read(path), version))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # a checkpoint is an optimisation: if it is unreadable the log still has everything
            logger.warning("checkpoint %s of %s is ignored (%s); reading the log instead", path, location, exc)
            return None

    def write_checkpoint(self, snapshot: Snapshot, txn_id: str) -> bool:
        """Write and register `snapshot`'s checkpoint, rewriting only the manifests the commits since the
        previous checkpoint touched (core.log.checkpoints); False when it was not registered (said in
        the log)."""
        staged = self.stage_checkpoint(snapshot, txn_id)
        return staged is not None and staged.register()

    def stage_checkpoint(self, snapshot: Snapshot, txn_id: str, *, rebuild: bool = False) -> StagedCheckpoint | None:
        """Write `snapshot`'s checkpoint without registering it yet, its writer registered in etcd so that
        no vacuum deletes what it names (core.log.checkpoint_writer); None when a checkpoint at or after
        its version is registered already. `rebuild`: every manifest new, and registered in place of
        one already at its version (a repair of a checkpoint that cannot be read)."""
        table_id, location = snapshot.metadata.table_id, snapshot.metadata.location
        return stage_checkpoint(
            self.services.coordinator,
            self.services.storage(location),
            snapshot,
            txn_id,
            None if rebuild else self._previous(table_id, location, snapshot.version),
            lease_ttl_seconds=self.services.settings.commit.lease_ttl_seconds,
        )

    def _previous(self, table_id: str, location: str, version: int) -> Previous | None:
        """The manifest checkpoint before `version` and the records since, when it is near enough to
        build on (None: the next checkpoint writes every manifest)."""
        log = self.services.log(table_id, location)
        within = 4 * self.services.settings.commit.checkpoint_interval
        found = log.checkpoint_at_or_before(version - 1, within=within)
        if found is None or found[0] <= version - within:
            return None
        try:
            content = proven_checkpoint(self.services.storage(location).read(found[1]), found[0])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # unreadable: the new checkpoint does not need it
        if "manifests" not in content:
            return None
        records = [self.services.decode_log_entry(location, e) for e in log.read(found[0], version)]
        return Previous(found[0], content, records, found[1])
