"""A table's log in two tiers: a short recent window in etcd, everything older in archive segments.

etcd is the commit point, not the log store (design §2): one commit a second kept for a week would be
600,000 entries of one table in etcd, whose quota stops every table at once. So `archive_log` moves
entries etcd no longer needs into immutable segments (core.log.archive) and then deletes them from etcd in
one transaction that also moves the "archived up to" marker; `TableLog` reads both tiers, so every reader
(snapshot loads, history, changes, time travel, the conflict check of a transaction whose read version
left etcd, the lost-answer lookup, cleanup) gets exactly the log it got before archiving.

Why readers are never fooled by a concurrent archiver: entries leave etcd only from the old end, and only
after their segment is written. A reader reads etcd first and the marker after; any version etcd no
longer had is at or before the marker it then reads, so in a segment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from acidtables.core.coordination.archiving import TXN_KEYS_IN_A_TXN, ArchiveMarker
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.errors import CorruptMetadataError
from acidtables.core.log.archive import Archive
from acidtables.core.log.records import CommitRecord

logger = logging.getLogger(__name__)

#: log entries read at a time while looking for the end of a run of commits without a time version
_RUN_BATCH = 16


class TableLog:
    """Reads of one table's log, its time index, txn index and checkpoints, across etcd and the archive."""

    def __init__(self, coordinator: Coordinator, archive: Archive) -> None:
        self.coordinator = coordinator
        self.archive = archive
        self.table_id = archive.table_id

    def read(self, after: int, upto: int | None = None) -> list[dict[str, Any]]:
        """Log entries with after < version <= upto (every newer one when upto is None), oldest first."""
        return self.complete(self.coordinator.read_log(self.table_id, after, upto), after, upto)

    def complete(self, recent: list[dict[str, Any]], after: int, upto: int | None) -> list[dict[str, Any]]:
        """`recent` (what etcd returned for after < version <= upto, a contiguous run ending at its newest)
        with the archived entries before it put in front."""
        first = int(recent[0]["version"]) if recent else None
        if first == after + 1:
            return recent
        marker = self.coordinator.archive_marker(self.table_id)
        end = marker.upto if first is None else first - 1
        if upto is not None:
            end = min(end, upto)
        archived = self.archive.entries(after, end) if end > after else []
        if first is not None and end < first - 1:
            raise CorruptMetadataError(
                f"log entries {max(after, end) + 1}..{first - 1} of table {self.table_id} are neither in etcd nor "
                f"archived (the archive reaches version {marker.upto})",
                key=f"log/{max(after, end) + 1}",
            )
        return archived + recent

    def find_txn(self, txn_id: str) -> int | None:
        """The version a transaction committed, or None. The archiver deletes a batch's txn-index keys
        after writing its segment and before moving the marker, so a miss in etcd always asks the
        archive (whose index of txn ids is built once per process and then grows with new segments)."""
        found = self.coordinator.find_txn(self.table_id, txn_id)
        if found is not None:
            return found
        return self.archive.find_txn(txn_id)

    def version_at_time(self, time_us: int) -> tuple[int, int] | None:
        """The newest data commit at or before `time_us`: (time version, ID version)."""
        while True:
            marker = self.coordinator.archive_marker(self.table_id)
            if marker.time_upto is not None and time_us <= marker.time_upto:
                return self.archive.version_at_time(time_us)
            found = self.coordinator.version_at_time(self.table_id, time_us, newer_than=marker.time_upto)
            if found is not None:
                return found
            if marker.time_upto is None:
                return None
            if self.coordinator.archive_marker(self.table_id).revision == marker.revision:
                # nothing in etcd between the archive's newest and time_us: that newest is the answer
                return self.archive.version_at_time(time_us)
            # the archive moved while we looked: what we did not find may have left etcd; look again

    def version_as_of(self, time_us: int, decode: Callable[[dict[str, Any]], CommitRecord]) -> int | None:
        """The version time travel to `time_us` reads (None: no data commit at or before it yet).

        That is the newest data commit at or before `time_us`, carried forward over the commits after
        it that have no time version (compaction, clustering, ALTER, a protocol upgrade: D-19, D-20) up
        to the next data commit. They keep the rows of the version before them, so every version of that
        run reads the same data, and the newest one is the one a retention keeps: on a table compacted
        and then left alone, a read as of now is a read of the head, whose files are the live ones, not
        of the version before the compaction, whose files vacuum may delete (issue 24, item 3). The run
        stops before a part of a multi-table transaction made after `time_us` (every part bears the
        transaction's time as `committed_at`): its other tables' parts are not seen as of `time_us`
        either, so neither is it (issue 44). `decode` turns a log entry into its record (an entry may
        point to a commit file)."""
        found = self.version_at_time(time_us)
        if found is None:
            return None
        version = found[1]
        while True:
            # usually the next entry is a data commit, or there is none: one read
            entries = self.read(version, version + _RUN_BATCH)
            for entry in entries:
                record = decode(entry)
                if record.time_version is not None or (
                    record.multi_txn_id is not None and record.committed_at > time_us
                ):
                    return version
                version = int(entry["version"])
            if len(entries) < _RUN_BATCH:
                return version  # the head: nothing after the run

    def versions_between_times(self, start_us: int, end_us: int) -> list[tuple[int, int]]:
        recent = self.coordinator.versions_between_times(self.table_id, start_us, end_us)
        marker = self.coordinator.archive_marker(self.table_id)
        if marker.time_upto is None or start_us > marker.time_upto:
            return recent
        archived = self.archive.versions_between_times(start_us, min(end_us, marker.time_upto))
        return sorted({v: (t, v) for t, v in [*archived, *recent]}.values())

    def registered_checkpoints(self) -> tuple[list[tuple[int, str]], bool]:
        """(version, path) of every checkpoint registered anywhere (etcd, the archive marker, the
        readable segments), oldest first, and whether every archive segment could be read."""
        state = self.checkpoint_state()
        return state.registered, state.complete

    def checkpoint_state(self) -> CheckpointState:
        """Every checkpoint registered anywhere and every checkpoint writer registered now.

        etcd first (its checkpoint keys and writers at one revision), the archive after: the archiver
        writes a segment before etcd lets go of its checkpoint keys, so a registration etcd no longer
        held is in a segment listed after, and none made before the etcd read is missed however an
        archiver interleaves (vacuum decides from this what nobody names)."""
        recent, writers = self.coordinator.checkpoints_and_writers(self.table_id)
        marker = self.coordinator.archive_marker(self.table_id)
        archived, complete = self.archive.all_checkpoints()
        found = {*recent, *archived}
        if marker.checkpoint:
            found.add(marker.checkpoint)
        return CheckpointState(sorted(found), complete, writers)

    def checkpoint_at_or_before(self, version: int, *, within: int) -> tuple[int, str] | None:
        """The newest checkpoint at or before `version`, wherever its registration is now."""
        found = self.coordinator.checkpoint_at_or_before(self.table_id, version, within=within)
        if found is not None and found[0] > version - within:
            return found
        marker = self.coordinator.archive_marker(self.table_id)
        if marker.upto < 0:
            return found
        if version > marker.upto:
            candidates = [c for c in (found, marker.checkpoint) if c is not None and c[0] <= version]
            return max(candidates, default=None)
        return self.archive.checkpoint_at_or_before(version)


@dataclass(frozen=True)
class CheckpointState:
    """A table's checkpoints as vacuum sees them (TableLog.checkpoint_state)."""

    #: (version, list path) of every checkpoint registered in etcd or the archive, oldest first
    registered: list[tuple[int, str]]
    #: whether every archive segment could be read (if not, `registered` may lack some)
    complete: bool
    #: checkpoint writers registered now: writer name (how its files' names begin) -> {"base": the list
    #: path it builds on, or None} ({"damaged": why} when the value cannot be read)
    writers: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class ArchiveReport:
    """What one archiving run moved."""

    versions_archived: int
    #: etcd keys deleted: log entries, time-index entries, checkpoint and txn-index keys
    keys_removed: int
    #: the newest archived version after the run (-1: none)
    archived_upto: int
    segments_written: int = 0


def oldest_registered_read(coordinator: Coordinator, table_id: str) -> int | None:
    """The oldest read version among the table's registered transactions (None: none registered): what
    archiving leaves in etcd, and what expire and vacuum keep readable."""
    reads = [
        info["read_version"]
        for info in coordinator.list_inflight(table_id).values()
        if isinstance(info.get("read_version"), int) and not isinstance(info.get("read_version"), bool)
    ]
    return min(reads, default=None)


def archivable_upto(coordinator: Coordinator, table_id: str, keep_versions: int) -> int:
    """The newest version etcd may let go of: older than the newest `keep_versions`, and older than the
    read version of every registered transaction (whose conflict check reads the log after it)."""
    # the head this process committed or read moments ago will do: an older one only archives less
    head = coordinator.known_head(table_id) or coordinator.read_head(table_id)
    upto = int(head.value["version"]) - keep_versions
    registered = oldest_registered_read(coordinator, table_id)
    return upto if registered is None else min(upto, registered)


def archive_log(log: TableLog, *, keep_versions: int, batch_versions: int = 1000) -> ArchiveReport:
    """Move every log entry etcd no longer needs (see `archivable_upto`) into archive segments, in
    batches of at most `batch_versions`. Each batch: its segment is written, then its txn-index keys are
    deleted (a lookup that misses etcd reads the archive), then one transaction moves the marker and
    deletes its log, time-index and checkpoint keys.

    Safe to run anywhere at any time, concurrently too: an archiver that loses the marker's
    compare-and-swap reads it again and goes on with what is left below its target (its segment is a
    harmless duplicate), so its report says where the archive really ends; a run killed at any point
    leaves entries still in etcd that the next run archives again, each in a segment already."""
    coordinator, table_id = log.coordinator, log.table_id
    target = archivable_upto(coordinator, table_id, keep_versions)
    archived = removed = segments = 0
    marker = coordinator.archive_marker(table_id)
    while marker.upto < target:
        upto = min(target, marker.upto + batch_versions)
        batch = coordinator.archive_batch(table_id, marker, upto)
        if [int(e["version"]) for e in batch.entries] != list(range(marker.upto + 1, upto + 1)):
            current = coordinator.archive_marker(table_id)
            if current.revision != marker.revision:  # another archiver took some of them meanwhile
                marker = current
                continue
            raise CorruptMetadataError(
                f"the log of table {table_id} is not contiguous between versions {marker.upto + 1} and {upto}; "
                "archiving stopped before moving anything",
                key=f"log/{marker.upto + 1}",
            )
        log.archive.write(batch.entries, batch.times, batch.checkpoints)
        segments += 1
        txn_ids = [str(e["txn_id"]) for e in batch.entries]
        if len(txn_ids) > TXN_KEYS_IN_A_TXN:  # too many for the marker's transaction: before it, on their own
            coordinator.delete_txn_keys(table_id, txn_ids)
            txn_ids = []
        newer = replace(
            marker,
            upto=upto,
            time_upto=max((t for t, _ in batch.times), default=marker.time_upto),
            checkpoint=max(batch.checkpoints, default=marker.checkpoint),
        )
        moved = coordinator.advance_archive(table_id, marker, newer, txn_ids)
        if moved is None:  # another archiver (a background one of some committing process) got there first
            logger.info("table %s: another archiver moved the marker first; going on from where it is", table_id)
            marker = coordinator.archive_marker(table_id)
            continue
        archived += len(batch.entries)
        removed += 2 * len(batch.entries) + len(batch.times) + len(batch.checkpoints)
        marker = moved
    return ArchiveReport(archived, removed, marker.upto, segments)


__all__ = [
    "ArchiveMarker",
    "ArchiveReport",
    "CheckpointState",
    "TableLog",
    "archivable_upto",
    "archive_log",
    "oldest_registered_read",
]
