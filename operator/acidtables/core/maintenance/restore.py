"""`Table.restore` / `RESTORE TABLE t TO VERSION AS OF n`: an earlier version's files become the table's.

As Delta Lake's RESTORE does, it commits ONE version whose files are exactly those of the earlier
version: entries the table has now and the earlier version lacks are removed, entries it had and the
table lacks now are added back, as they were (the same paths, sizes and deletion vectors; no data file
is read or written). History says RESTORE. It is a transaction like any other:

* it reads the whole table and replaces its files, so the conflict rules judge it as an overwrite of
  all of it (IO/T in the MaxCompute matrices, DEL under Delta's rules): a concurrent commit that
  changed anything makes it lose, and it can simply run again;
* it changes data, so it gets a time version;
* restoring to the version the table already reads like commits nothing (the commit would be empty).

Refused, naming why: a primary-key table (merge-on-read orders a key's versions by the version that
added each file, which a re-added file would lose; `INSERT OVERWRITE t SELECT * FROM t VERSION AS OF
n` is the statement that works), a version whose columns differ from the table's (a restore does not
change the schema), and a version whose files vacuum has deleted (DataFilesMissingError lists them).

Not guarded: expire and vacuum running while a restore to a version at the very edge of retention
commits. Each file is proven present when it is re-added and again just before the compare-and-swap,
but the restore registers its read at the head, so a vacuum could delete a file between that last
proof and the commit; restore to versions well inside retention (acidtables fsck would then name the
file).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from acidtables.core.commit.transaction import Transaction
from acidtables.core.errors import InvalidArgumentError
from acidtables.core.log.records import CommitInfo, DataFile
from acidtables.core.log.snapshot import Snapshot

logger = logging.getLogger(__name__)


def restore(tx: Transaction, earlier: Snapshot) -> CommitInfo:
    """Commit `tx` (begun as RESTORE at the head) with the files of `earlier`; the caller owns nothing
    afterwards: `tx` is always ended."""
    name = tx.table_name
    with tx:  # any error below aborts it
        meta = tx.metadata
        if meta.primary_key:
            raise InvalidArgumentError(
                f"restore(): {name} has a primary key, and a restore is not supported on merge-on-read tables; "
                f"write INSERT OVERWRITE {name} SELECT * FROM {name} VERSION AS OF {earlier.version} instead"
            )
        if earlier.metadata.columns != meta.columns:
            raise InvalidArgumentError(
                f"restore(): version {earlier.version} of {name} has columns "
                f"{[c.name for c in earlier.metadata.columns]}, the table now {[c.name for c in meta.columns]}; a "
                "restore does not change the schema: read that version (VERSION AS OF) and write what you need"
            )
        current = {f.path: f for f in tx.snapshot.files}
        wanted = {f.path: f for f in earlier.files}
        removed = [f for path, f in current.items() if not _same(f, wanted.get(path))]
        added = [f for path, f in wanted.items() if not _same(f, current.get(path))]
        tx.record_read(whole_table=True)
        tx.remove_files(removed)
        tx.add_earlier_files(added, version=earlier.version)
        if not (removed or added):
            tx.abort()
            return CommitInfo(tx.read_version, None, 0, tx.txn_id, tx.operation, skipped=True)
        info = tx.commit()
    logger.info(
        "%s: restored version %d as version %d (%d file(s) removed, %d re-added)",
        name,
        earlier.version,
        info.version,
        len(removed),
        len(added),
    )
    return info


def _same(entry: DataFile, other: DataFile | None) -> bool:
    """Whether two entries of one path are the same file as the table reads it (its deletion vector
    included); the version that added it, and whether that was a data change, do not count."""
    return other is not None and replace(entry, added_version=None, data_change=True) == replace(
        other, added_version=None, data_change=True
    )
