"""`Table.repair` / `acidtables fsck NAME --repair`: one version without the files that are gone.

When data files of the current version have vanished (deleted by hand, by a lifecycle rule, lost with
a volume), every read of the table fails at planning time (`presence.check_files_exist`). As
Databricks' `FSCK REPAIR TABLE` does, a repair commits ONE version that removes the entries of exactly
those files, so the table reads again, without their rows. It is a transaction like any other:

* its operation is REPAIR, which the conflict rules see as a DELETE of the files it removes (UD in the
  MaxCompute matrices, DEL under Delta's rules): it reads those files and removes them, so a
  concurrent commit that removed one of them, or wrote its partition where the matrix says a later
  DELETE fails, makes it lose and it can simply run again;
* it changes data (rows leave the table), so it gets a time version;
* a dry run finds the same files and changes nothing.

Missing must mean missing: the files are found with `presence.find_missing`, which raises
StorageUnavailableError when the location does not answer, so an unreachable store never looks like
a table whose every file is gone.

A repair also writes again each checkpoint a retained version may start from that cannot be read (its
list or a manifest gone, torn or edited: `fsck`'s checkpoints check), from a replay of the log, and
registers the new one in its place (issue 41, item 2). No version is committed for it: a checkpoint
holds nothing the log does not. Only a checkpoint whose key etcd still holds can be replaced; one an
archive segment holds stays as it is (segments never change), and readers of its versions keep
replaying the log until the retention moves past it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from acidtables.core.commit.presence import find_missing
from acidtables.core.commit.transaction import Transaction
from acidtables.core.commit.txn_ids import new_txn_id
from acidtables.core.errors import StorageUnavailableError
from acidtables.core.log.checkpoints import proven_checkpoint, read_snapshot
from acidtables.core.log.records import DataFile
from acidtables.core.log.services import Services
from acidtables.core.maintenance.metadata_files import oldest_retained_checkpoint
from acidtables.core.maintenance.retention import read_retention

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairReport:
    """What a repair found and did."""

    #: the table's name
    table: str
    #: True when nothing was committed on purpose (`dry_run=True`)
    dry_run: bool
    #: the version whose files were checked
    read_version: int
    #: the version the repair committed; None for a dry run, or when no file was missing
    version: int | None
    #: the entries of the read version whose files are gone: removed by the repair (or, in a dry run,
    #: the ones it would remove); paths as URIs (or absolute paths)
    removed: tuple[DataFile, ...]
    #: versions of the checkpoints that could not be read and were written again (or, in a dry run,
    #: would be); see `repair_checkpoints`
    checkpoints: tuple[int, ...] = ()

    @property
    def rows_removed(self) -> int:
        """Rows the table no longer has after the repair (they were unreadable already)."""
        return sum(f.live_rows for f in self.removed)


def repair(tx: Transaction, *, dry_run: bool) -> RepairReport:
    """Run the repair in `tx` (begun as REPAIR at the head): commit it, or abort it when there is
    nothing to do or `dry_run`. The caller owns nothing afterwards: `tx` is always ended."""
    storage = tx.storage
    name = tx.table_name
    with tx:  # any error below aborts it: nothing staged, nothing committed
        files = tx.snapshot.files
        gone = set(
            find_missing(
                storage,
                [f.path for f in files],
                action=f"repair of {name} at version {tx.read_version}",
            )
        )
        missing = [f for f in files if f.path in gone]
        absolute = tuple(replace(f, path=storage.absolute(f.path)) for f in missing)
        if dry_run or not missing:
            tx.abort()
            return RepairReport(name, bool(dry_run), tx.read_version, None, absolute)
        # what it removes is what it read (a DELETE that matched these files whole)
        tx.record_read(files=missing)
        tx.remove_files(missing)
        info = tx.commit()
    logger.warning(
        "%s: repair committed version %d (read version %d): removed %d missing file(s), %d row(s) lost",
        name,
        info.version,
        tx.read_version,
        len(missing),
        sum(f.live_rows for f in missing),
    )
    return RepairReport(name, False, tx.read_version, info.version, absolute)


def repair_checkpoints(
    services: Services, table_id: str, name: str, location: str, *, dry_run: bool
) -> tuple[int, ...]:
    """Write again, from a replay of the log, each checkpoint a retained version may start from that
    does not read (as a reader proves it: the list, then every manifest), and register it in place of
    the old one, whose files become leftovers vacuum deletes. Returns their versions (in a dry run, the
    versions it would write). A checkpoint whose registration an archive segment holds is left, with a
    warning."""
    coordinator, storage = services.coordinator, services.storage(location)
    retention, _ = read_retention(coordinator, table_id)
    registered, _ = services.log(table_id, location).registered_checkpoints()
    start = oldest_retained_checkpoint((version for version, _ in registered), retention.oldest_version)
    in_etcd = set(coordinator.checkpoints(table_id))
    unreadable: list[tuple[int, str]] = []
    for version, path in registered:
        if version < start:
            continue  # no reader starts there any more: vacuum's to delete
        try:
            read_snapshot(storage, proven_checkpoint(storage.read(path), version))
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
            unreadable.append((version, path))
        except OSError as exc:  # not an answer about the checkpoint: never rewrite what may be fine
            raise StorageUnavailableError(
                f"repair of {name}: the table location {storage.location} did not answer while checkpoint {path} "
                f"was read ({exc}); check that the storage is reachable and readable, then try again"
            ) from None
    repaired: list[int] = []
    for version, path in unreadable:
        if (version, path) not in in_etcd:
            logger.warning(
                "%s: checkpoint %s of version %d cannot be read, and an archive segment holds its registration, "
                "which never changes: readers of its versions replay the log until the retention moves past it",
                name,
                path,
                version,
            )
            continue
        if dry_run:
            repaired.append(version)
            continue
        # from the log: load() ignores the unreadable checkpoint, as every reader does
        snapshot = services.snapshots.load(table_id, location, version)
        txn_id = new_txn_id(coordinator.process_lease_id(services.settings.commit.lease_ttl_seconds))
        staged = services.snapshots.stage_checkpoint(snapshot, txn_id, rebuild=True)
        if staged is not None and staged.register():
            logger.warning("%s: checkpoint %s of version %d could not be read; wrote it again", name, path, version)
            repaired.append(version)
    return tuple(repaired)


__all__ = ["RepairReport", "repair", "repair_checkpoints"]
