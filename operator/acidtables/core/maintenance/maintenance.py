"""Maintenance that deletes files: cleanup of dead transactions' staged files, and a dropped table's data.

Both delete only what the table wrote (design §2, the issue "a table owns its location"): files its log
references or referenced, its staging directories and its own metadata, each path inside the location
and never through a symlink out of it (`Storage.delete`), and only after the ownership marker says the
location is this table's (`locations.check_owner`). Nothing here removes a location recursively.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from acidtables.core.commit.txn_ids import lease_of
from acidtables.core.errors import CorruptMetadataError
from acidtables.core.log.archive import ARCHIVE_DIR
from acidtables.core.log.records import CommitRecord
from acidtables.core.log.services import Services
from acidtables.core.log.tablelog import TableLog
from acidtables.core.mirror import DELTA_LOG, mirror_formats
from acidtables.core.storage.locations import check_owner, mark_dropped
from acidtables.core.storage.storage import DATA_DIR, METADATA_DIR, txn_of_staging_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanupReport:
    deleted: tuple[str, ...]
    kept_inflight: tuple[str, ...]
    #: staging directories kept because the log that would say what they hold is damaged (the txn id
    #: names a version whose entry is missing or unreadable): (directory, reason)
    kept_damaged: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DropReport:
    """What dropping a table with its data deleted; `kept` are paths under the location it did not write."""

    deleted: tuple[str, ...]
    kept: tuple[str, ...]


def _log_entry_of(log: TableLog, txn_id: str) -> dict[str, Any] | None:
    """The raw log entry a transaction committed, None when it committed nothing; CorruptMetadataError
    when the txn index names a version whose log entry is missing."""
    version = log.find_txn(txn_id)
    if version is None:
        return None
    entries = log.read(int(version) - 1, int(version))
    if not entries:
        raise CorruptMetadataError(
            f"txn {txn_id} committed version {version}, whose log entry is missing", key=f"log/{version}"
        )
    return entries[0]


def cleanup(services: Services, table_id: str, name: str, location: str, grace_seconds: float) -> CleanupReport:
    """Table.cleanup: see its docstring."""
    storage = services.storage(location)
    check_owner(storage, table_id, name, "cleanup")
    log = services.log(table_id, location)
    inflight = services.coordinator.list_inflight(table_id)
    now = services.clock() / 1_000_000
    deleted: list[str] = []
    kept: list[str] = []
    damaged: list[tuple[str, str]] = []
    staging = {
        txn_id: entry
        for entry in storage.list_dir(DATA_DIR)
        if (txn_id := txn_of_staging_dir(entry.path.rsplit("/", 1)[-1])) is not None
    }  # anything else under data/ is nothing this library staged, so never its to delete
    # A running transaction is registered, or (younger than register_after_seconds) its id names the
    # lease of a writer process that is still alive (core.commit.txn_ids) and it has not committed.
    commit_files = {entry.path: entry for entry in storage.list_dir(f"{METADATA_DIR}/commits")}
    owners = {*staging, *(path.rsplit("/", 1)[-1].split("-", 1)[0] for path in commit_files)}
    leases = {txn_id: lease for txn_id in owners if txn_id not in inflight and (lease := lease_of(txn_id))}
    alive = services.coordinator.live_leases(leases.values())
    running = set(inflight) | {
        txn_id for txn_id, lease in leases.items() if lease in alive and log.find_txn(txn_id) is None
    }
    for txn_id, entry in staging.items():
        if txn_id in running:
            kept.append(txn_id)
            continue
        files = list(storage.walk(entry.path))
        newest = max([entry.modified_at, *(f.modified_at for f in files)])
        if now - newest < grace_seconds:
            continue
        try:
            raw = _log_entry_of(log, txn_id)
            record = None if raw is None else services.decode_log_entry(location, raw)
        except CorruptMetadataError as exc:  # keep what the damaged log cannot account for, and say so
            damaged.append((entry.path, str(exc)))
            continue
        if record is None:
            deleted += storage.discard_staged(txn_id)
            continue
        referenced = {f.path for f in record.adds}
        unreferenced = [
            f.path
            for f in files
            if f.path not in referenced
            and not f.path.rsplit("/", 1)[-1].startswith((".", "_"))
            and f.path.endswith(".parquet")
        ]
        deleted += storage.discard_staged(txn_id, unreferenced)
    for entry in commit_files.values():
        txn_id = entry.path.rsplit("/", 1)[-1].split("-", 1)[0]
        if txn_id in running or now - entry.modified_at < grace_seconds:
            continue
        try:
            raw = _log_entry_of(log, txn_id)
        except CorruptMetadataError as exc:
            damaged.append((entry.path, str(exc)))
            continue
        if raw is not None and raw.get("commit_file") == entry.path:
            continue  # the log points at this file: it is the committed record
        storage.delete(entry.path)
        deleted.append(entry.path)
    if deleted:
        logger.info("%s: cleanup deleted %d abandoned staged paths", name, len(deleted))
    for path, reason in damaged:
        logger.warning("%s: cleanup kept %s: %s", name, path, reason)
    return CleanupReport(tuple(deleted), tuple(kept), tuple(damaged))


def delete_table_data(
    services: Services, table_id: str, name: str, location: str, records: Iterable[CommitRecord]
) -> DropReport:
    """After a drop: delete every file the log ever referenced, every staging directory and the table's
    own metadata (its Delta mirror's log too, if it ever had one: a Delta reader would otherwise still
    open the dropped table and fail on its deleted files), then leave the tombstone that frees the
    location once its leases have expired. The caller has checked the marker before dropping the
    catalog entry."""
    storage = services.storage(location)
    deleted: list[str] = []
    records = list(records)
    referenced = {f.path for r in records for f in (*r.adds, *r.removes)}
    mirrored = any(r.metadata is not None and "delta" in mirror_formats(r.metadata) for r in records)
    for path in sorted(referenced):
        if "://" in path or path.startswith("/"):
            continue  # an absolute path from before files had to lie inside the location: not ours
        try:
            storage.delete(path)
            deleted.append(path)
        except OSError as exc:
            logger.warning("%s: drop kept %s (%s)", name, path, exc)
    for entry in storage.list_dir(DATA_DIR):
        txn_id = txn_of_staging_dir(entry.path.rsplit("/", 1)[-1])
        if txn_id is not None:
            deleted += storage.discard_staged(txn_id)
    own_dirs = [f"{METADATA_DIR}/commits", f"{METADATA_DIR}/checkpoints", f"{METADATA_DIR}/manifests", ARCHIVE_DIR]
    for own in own_dirs + ([DELTA_LOG] if mirrored else []):
        storage.delete(own)
        deleted.append(own)
    storage.remove_empty_dirs(DATA_DIR)
    kept = sorted(f.path for f in storage.walk("") if not f.path.startswith(METADATA_DIR + "/"))
    mark_dropped(storage, table_id, services.clock())
    if kept:
        logger.warning(
            "%s: dropped; %d file(s) under %s that the table did not write were kept, e.g. %s",
            name,
            len(kept),
            location,
            kept[0],
        )
    return DropReport(tuple(deleted), tuple(kept))
