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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from acidtables.core.commit.presence import find_missing
from acidtables.core.commit.transaction import Transaction
from acidtables.core.log.records import DataFile

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


__all__ = ["RepairReport", "repair"]
