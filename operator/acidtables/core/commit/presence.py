"""Whether a version's data files are still there (issue 24, item 4).

A file can vanish behind the table's back: deleted by hand, by an object store's lifecycle rule, lost
with a volume, or deleted between `add_files` and `commit()`. Three callers ask:

* readers (the Spark layer, the `acidtables` data source) before planning a read, so a job fails at
  once with `DataFilesMissingError` naming the table, the version, the files and the repair, never
  with Spark's PATH_NOT_FOUND halfway through;
* `Transaction.commit`, which re-proves that every file it adds still exists just before its
  compare-and-swap, so a vanished staged file is never committed;
* `Table.repair` and `fsck`, which name the missing files and remove their entries.

All of them go through `find_missing`, which tells a missing file from a location that cannot answer
(`StorageUnavailableError`): a repair must never remove the entries of files it merely could not see.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from acidtables.core.errors import DataFilesMissingError, StorageUnavailableError
from acidtables.core.log.records import DataFile
from acidtables.core.storage.storage import DATA_DIR, Storage

#: files a DataFilesMissingError names in its message (all of them are in its `paths`)
MESSAGE_FILES = 5


def find_missing(storage: Storage, paths: Sequence[str], *, under: str = DATA_DIR, action: str) -> list[str]:
    """Those of `paths` (relative to the location) that are gone, in their order; `under` is the
    directory they mostly lie in (one listing of it answers for many on an object store).

    Raises StorageUnavailableError, naming `action` (what could not be done), when the location does
    not answer: never an empty or partial answer taken for "nothing is missing" or "all are missing"."""
    try:
        return storage.missing(paths, under=under)
    except OSError as exc:  # not an answer about the files: a NotFound never raises here
        raise StorageUnavailableError(
            f"{action}: the table location {storage.location} did not answer whether its files exist ({exc}); "
            "nothing was changed. Check that the storage is reachable and readable, then try again"
        ) from None


def listed(storage: Storage, paths: Sequence[str]) -> str:
    """The first MESSAGE_FILES of `paths` (relative to the location) as URIs, and how many more."""
    shown = ", ".join(storage.absolute(p) for p in paths[:MESSAGE_FILES])
    return shown + (f" and {len(paths) - MESSAGE_FILES} more" if len(paths) > MESSAGE_FILES else "")


def missing_message(storage: Storage, table: str, version: int, paths: Sequence[str], *, reading: str) -> str:
    """The message of a DataFilesMissingError: what, where, and the two ways out."""
    shown = listed(storage, paths)
    return (
        f"{reading} {table} at version {version} needs {len(paths)} data file(s) that are missing from its "
        f"location: {shown}. Nothing was read. Restore the file(s), or run `acidtables fsck {table} "
        f"--repair --dry-run` to list every missing file and `acidtables fsck {table} --repair` "
        "(Table.repair()) to commit a version without them (their rows are lost; older versions still "
        "need them)"
    )


def check_files_exist(
    storage: Storage, files: Iterable[DataFile], *, table: str, version: int, reading: str = "reading"
) -> None:
    """Raise DataFilesMissingError when any of `files` (of `table` at `version`) is gone; what a read
    calls while it is planned. Costs a stat per file locally, a listing on an object store."""
    paths = list(dict.fromkeys(storage.relative(f.path) for f in files))
    if not paths:
        return
    gone = find_missing(storage, paths, action=f"{reading} {table} at version {version}")
    if gone:
        raise DataFilesMissingError(
            missing_message(storage, table, version, gone, reading=reading.capitalize()),
            table=table,
            version=version,
            paths=tuple(storage.absolute(p) for p in gone),
        )


__all__ = ["check_files_exist", "find_missing", "missing_message"]
