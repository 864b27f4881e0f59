"""Retention: how far back time travel reaches (expire), and deleting the files only expired versions
read (vacuum). Issue 18; design §2.

The one record that ties them together is `tables/<id>/retention` in etcd: the oldest version a
snapshot may still be taken at. `expire` moves it forward (never back: the files behind it may be gone);
time travel behind it fails at planning time naming the retention; `vacuum` deletes only files that no
version at or after it references, whose removing commit is older than its own `retain_duration`
(judged by that commit's time, never by a file's modification time), and never a file a registered
transaction's snapshot holds. History stays: `history()` and `changes()` still list expired versions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.durations import spell_duration
from acidtables.core.errors import InvalidArgumentError, VersionExpiredError
from acidtables.core.log.records import to_datetime
from acidtables.core.log.services import Services
from acidtables.core.log.tablelog import archive_log, oldest_registered_read
from acidtables.core.maintenance.metadata_files import unreferenced_metadata
from acidtables.core.mirror import mirror_formats, trim_delta
from acidtables.core.storage.locations import check_owner
from acidtables.core.storage.storage import DATA_DIR, Storage

logger = logging.getLogger(__name__)

#: compare-and-swap attempts on the retention record before giving up (two maintainers at once)
_ATTEMPTS = 8

#: beyond `register_after_seconds`, how late a transaction's registration may land (the registrar's round
#: trip to etcd, a busy process) and how far writers' clocks may run ahead of vacuum's
REGISTRATION_GRACE_SECONDS = 2.0


def registration_window_seconds(register_after_seconds: float) -> float:
    """How young a removal vacuum never judges, `force` or not (issue 41).

    A running transaction is registered `register_after_seconds` after it begins (design §2), so one
    younger than that may read a snapshot no registration names yet. That snapshot holds a file only if
    the file was removed after the transaction began; so a removal older than the registration window
    (plus its grace) can only have hidden files from transactions that are registered by now, or ended."""
    return register_after_seconds + REGISTRATION_GRACE_SECONDS


@dataclass(frozen=True)
class Retention:
    """The table's retention record; the zero record (nothing expired) when it has none."""

    #: the oldest version time travel may still read
    oldest_version: int = 0
    retain_versions: int | None = None
    retain_duration_seconds: float | None = None
    #: microseconds; when expire last moved `oldest_version`
    expired_at: int | None = None
    #: every file removed at or before this version was vacuumed (or judged and kept)
    vacuumed_upto: int = -1
    last_vacuum: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "oldest_version": self.oldest_version,
            "retain_versions": self.retain_versions,
            "retain_duration_seconds": self.retain_duration_seconds,
            "expired_at": self.expired_at,
            "vacuumed_upto": self.vacuumed_upto,
            "last_vacuum": self.last_vacuum,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Retention:
        return Retention(
            oldest_version=int(data["oldest_version"]),
            retain_versions=data.get("retain_versions"),
            retain_duration_seconds=data.get("retain_duration_seconds"),
            expired_at=data.get("expired_at"),
            vacuumed_upto=int(data.get("vacuumed_upto", -1)),
            last_vacuum=data.get("last_vacuum"),
        )

    def describe(self) -> str:
        parts = []
        if self.retain_versions is not None:
            parts.append(f"retain_versions={self.retain_versions}")
        if self.retain_duration_seconds is not None:
            parts.append(f"retain_duration={spell_duration(timedelta(seconds=self.retain_duration_seconds))}")
        when = to_datetime(self.expired_at)
        return ", ".join(parts) + (f", set by expire at {when:%Y-%m-%d %H:%M:%S} UTC" if when else "")


def read_retention(coordinator: Coordinator, table_id: str) -> tuple[Retention, int]:
    record, revision = coordinator.read_retention(table_id)
    return (Retention() if record is None else Retention.from_json(record)), revision


def check_readable(coordinator: Coordinator, table_id: str, name: str, version: int) -> None:
    """Refuse a snapshot behind the retention before any file is read (time travel plans, then reads)."""
    retention, _ = read_retention(coordinator, table_id)
    if version < retention.oldest_version:
        raise VersionExpiredError(
            f"{name} version {version} has expired: the table's retention ({retention.describe()}) keeps versions "
            f"{retention.oldest_version} and newer, and the files only older versions read may have been vacuumed. "
            "history() and changes() still list it",
            oldest_version=retention.oldest_version,
        )


def _update(coordinator: Coordinator, table_id: str, change: Callable[[Retention], Retention]) -> Retention:
    """Apply `change(current) -> new` to the retention record with compare-and-swap."""
    for _ in range(_ATTEMPTS):
        current, revision = read_retention(coordinator, table_id)
        new = change(current)
        if new == current or coordinator.put_retention(table_id, new.to_json(), revision):
            return new
    raise InvalidArgumentError(
        f"the retention record of table {table_id} changed {_ATTEMPTS} times while this run tried to update it; "
        "another expire or vacuum is running: try again once it has finished"
    )


def check_minimum(duration: timedelta, minimum: timedelta, *, force: bool, method: str) -> None:
    if duration < minimum and not force:
        raise InvalidArgumentError(
            f"{method}(): retain_duration={spell_duration(duration)} is shorter than the safety minimum "
            f"{spell_duration(minimum)} (ACIDTABLES_RETENTION_MINIMUM_SECONDS): readers and writers running longer "
            "than that could lose files they are reading. Pass force=True (--force) if no job runs that long"
        )


@dataclass(frozen=True)
class ExpireReport:
    """What `Table.expire` did."""

    #: log entries moved from etcd to archive segments by this run
    versions_archived: int
    #: etcd keys deleted by this run
    keys_removed: int
    #: the oldest version time travel may read from now on
    oldest_version_kept: int


def expire(
    services: Services,
    table_id: str,
    location: str,
    *,
    retain_versions: int,
    retain_duration: timedelta,
) -> ExpireReport:
    """Table.expire: see its docstring. The caller has checked the arguments and the safety minimum."""
    coordinator = services.coordinator
    head = int(coordinator.read_head(table_id).value["version"])
    log = services.log(table_id, location)
    cutoff = services.clock() - int(retain_duration.total_seconds() * 1_000_000)
    # Time travel to the cutoff reads the version `version_as_of` names (the newest one holding the data
    # of the last data commit at or before it), so that version and every newer one are kept; a version
    # before a compaction holds the same rows as the compaction and is not (issue 24, item 3).
    at_cutoff = log.version_as_of(cutoff, lambda entry: services.decode_log_entry(location, entry))
    oldest = min(head - retain_versions + 1, 0 if at_cutoff is None else at_cutoff)
    registered = oldest_registered_read(coordinator, table_id)
    if registered is not None:
        oldest = min(oldest, registered)
    oldest = max(0, oldest)
    now = services.clock()
    retention = _update(
        coordinator,
        table_id,
        lambda current: replace(
            current,
            oldest_version=max(current.oldest_version, oldest),
            retain_versions=retain_versions,
            retain_duration_seconds=retain_duration.total_seconds(),
            expired_at=now,
        ),
    )
    archived = archive_log(log, keep_versions=services.settings.commit.log_window_versions)
    return ExpireReport(archived.versions_archived, archived.keys_removed, retention.oldest_version)


@dataclass(frozen=True)
class VacuumReport:
    """What `Table.vacuum` deleted, or (dry run) would delete: exactly the same paths."""

    files_deleted: int
    bytes_deleted: int
    dry_run: bool = False
    #: relative to the table location
    paths: tuple[str, ...] = ()
    #: files the run could not delete (kept, named in the log); a later run tries them again
    failed: tuple[str, ...] = ()
    #: the table's own checkpoints and manifests no retained version needs (core.maintenance.metadata_files),
    #: deleted (or, dry run, to be deleted) beside the data files; relative to the table location
    metadata: tuple[str, ...] = ()


def vacuum(
    services: Services,
    table_id: str,
    name: str,
    location: str,
    *,
    retain_duration: timedelta,
    dry_run: bool,
) -> VacuumReport:
    """Table.vacuum: see its docstring. The caller has checked the arguments and the safety minimum."""
    coordinator = services.coordinator
    storage = services.storage(location)
    check_owner(storage, table_id, name, "vacuum")
    log = services.log(table_id, location)
    retention, _ = read_retention(coordinator, table_id)
    floor = retention.oldest_version
    registered = oldest_registered_read(coordinator, table_id)
    if registered is not None:
        floor = min(floor, registered)
    now = services.clock()
    cutoff = now - int(retain_duration.total_seconds() * 1_000_000)
    # data files: the registration window too, as a transaction begun a moment ago is not registered yet
    # (metadata has its own guard: a checkpoint's writer is registered before it writes)
    window = registration_window_seconds(services.settings.commit.register_after_seconds)
    removed_before = min(cutoff, now - int(window * 1_000_000))
    head = int(coordinator.read_head(table_id).value["version"])

    # path -> recorded size, of files whose latest removal is at a judged version: a path added again
    # (a deletion vector's update, a restore) was live after that removal, so only a later one counts
    removed: dict[str, int] = {}
    judged_upto = retention.vacuumed_upto
    judging = True
    if floor > retention.vacuumed_upto:
        for entry in log.read(retention.vacuumed_upto, floor):
            record = services.decode_log_entry(location, entry)
            if judging and record.committed_at > removed_before:
                judging = False  # it and everything after it left the table too recently: the next run judges them
            if judging:
                removed.update((f.path, f.size_bytes) for f in record.removes)
                for f in record.adds:
                    removed.pop(f.path, None)
                judged_upto = record.version
            else:  # a path these add or remove again was live after its judged removal: judged later
                for f in (*record.adds, *record.removes):
                    removed.pop(f.path, None)
    # of those, what any retained version reads: the snapshot at the floor (looked up by path, so a
    # table of a million files is not listed) and every file added after it
    live: set[str] = set()
    if removed:
        live.update(services.snapshots.load(table_id, location, floor).find(removed))
        for entry in log.read(floor, head):
            live.update(f.path for f in services.decode_log_entry(location, entry).adds if f.path in removed)
    doomed = sorted(
        p for p in removed if p not in live and "://" not in p and not p.startswith("/") and p.startswith(DATA_DIR)
    )
    dead_metadata = unreferenced_metadata(storage, log, floor, name, older_than=cutoff / 1_000_000)
    if dry_run:
        return VacuumReport(len(doomed), sum(removed[p] for p in doomed), True, tuple(doomed), (), tuple(dead_metadata))
    if doomed and mirror_formats(services.snapshots.load(table_id, location, head).metadata):
        # a Delta reader must never be offered a version whose files are about to go: the mirror drops
        # every version before the floor first (and vacuum deletes nothing if it cannot)
        trim_delta(services, table_id, location, floor)
    deleted, failed = _delete_each(storage, doomed, name)
    freed = sum(removed[p] for p in deleted)
    metadata_deleted, _ = _delete_each(storage, dead_metadata, name)
    if failed:  # judge them again next time: do not move past the first version that removed one
        judged_upto = retention.vacuumed_upto
    summary = {"at": services.clock(), "files_deleted": len(deleted), "bytes_deleted": freed}
    _update(
        coordinator,
        table_id,
        lambda current: replace(current, vacuumed_upto=max(current.vacuumed_upto, judged_upto), last_vacuum=summary),
    )
    if deleted or metadata_deleted:
        logger.info(
            "%s: vacuum deleted %d files (%d bytes) and %d checkpoints and manifests",
            name,
            len(deleted),
            freed,
            len(metadata_deleted),
        )
    return VacuumReport(len(deleted), freed, False, tuple(deleted), tuple(failed), tuple(metadata_deleted))


def _delete_each(storage: Storage, paths: Sequence[str], name: str) -> tuple[list[str], list[str]]:
    """Delete `paths` one by one: (deleted, kept). One that cannot be deleted is kept and named in the
    log; the next run tries it again."""
    deleted: list[str] = []
    kept: list[str] = []
    for path in paths:
        try:
            storage.delete(path)
            deleted.append(path)
        except OSError as exc:
            logger.warning("%s: vacuum kept %s (%s); the next run tries again", name, path, exc)
            kept.append(path)
    return deleted, kept


__all__ = ["ExpireReport", "Retention", "VacuumReport", "check_readable", "expire", "read_retention", "vacuum"]
