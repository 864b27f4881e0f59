"""A Delta Lake log beside a table (`mirror.formats` = `delta`): a copy for Delta readers, never the truth.

acidtables never reads it. After commits, a thread of the committing process (`Services.background`),
the operator, or anyone calling `Table.sync_mirror()` writes `_delta_log/<version>.json` for each version
committed since the newest one there, and a Parquet checkpoint every `mirror.delta.checkpointInterval`
versions (default 10) with `_last_checkpoint` naming it. Each file is a pure function of the log and is
created exclusively, so a crash leaves a readable earlier version that the next run continues from, and
two writers racing write the same bytes. Version numbers are acidtables' own: Delta readers time travel
to the same versions.

Retention: before vacuum deletes files only versions older than the table's retention read
(`trim_delta`), the mirror gets a checkpoint at the oldest retained version and loses every entry
before it, so no Delta reader is ever offered a version whose files are gone.

What Delta cannot express is refused when the property is set (`check_mirror`): primary-key tables
(merge-on-read delta files: a Delta reader would return every version of a key) and tables with
deletion vectors (acidtables' own format, not Delta's).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.log.records import TableMetadata
from acidtables.core.log.services import Services
from acidtables.core.mirror.delta_actions import WRITER_FEATURE, checkpoint_rows, commit_actions, encode
from acidtables.core.storage.storage import Storage

logger = logging.getLogger(__name__)

MIRROR_PROPERTY = "mirror.formats"
CHECKPOINT_INTERVAL_PROPERTY = "mirror.delta.checkpointInterval"
DEFAULT_CHECKPOINT_INTERVAL = 10
FORMATS = ("delta",)
DELTA_LOG = "_delta_log"
LAST_CHECKPOINT = f"{DELTA_LOG}/_last_checkpoint"
_ENTRY = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet)$")


def mirror_formats(meta: TableMetadata) -> tuple[str, ...]:
    """The formats a table is mirrored in (`mirror.formats`, a comma-separated list; empty: none)."""
    raw = meta.properties.get(MIRROR_PROPERTY, "")
    return tuple(dict.fromkeys(part.strip().lower() for part in raw.split(",") if part.strip()))


def checkpoint_interval(meta: TableMetadata) -> int:
    return int(meta.properties.get(CHECKPOINT_INTERVAL_PROPERTY, DEFAULT_CHECKPOINT_INTERVAL))


def check_mirror(meta: TableMetadata, storage: Storage | None, *, method: str) -> None:
    """Refuse a mirror the table cannot have, naming why; nothing is written before this passes."""
    raw = meta.properties.get(MIRROR_PROPERTY)
    interval = meta.properties.get(CHECKPOINT_INTERVAL_PROPERTY)
    if interval is not None and not (interval.isascii() and interval.isdigit() and int(interval) > 0):
        raise InvalidArgumentError(f"{method}(): {CHECKPOINT_INTERVAL_PROPERTY}={interval!r}; give a whole number >= 1")
    if raw is None:
        return
    formats = mirror_formats(meta)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InvalidArgumentError(
            f"{method}(): {MIRROR_PROPERTY}={raw!r} names {', '.join(unknown)}; the formats are {', '.join(FORMATS)} "
            "(a comma-separated list; empty turns mirroring off)"
        )
    if "delta" not in formats:
        return
    if meta.primary_key:
        raise InvalidArgumentError(
            f"{method}(): {meta.name} has a primary key, and its updates are merge-on-read delta files that Delta "
            f"cannot express (a Delta reader would return every version of a key): {MIRROR_PROPERTY}=delta is for "
            "tables without a primary key. Read it with Table.scan() (docs/reading.md)"
        )
    if meta.deletion_vectors:
        raise InvalidArgumentError(
            f"{method}(): {meta.name} uses row-level concurrency, whose deletion vectors are acidtables' own and "
            f"not Delta's: {MIRROR_PROPERTY}=delta is for tables without row_level_concurrency. Read it with "
            "Table.scan() (docs/reading.md)"
        )
    if storage is not None:
        foreign = _foreign_log(storage, meta.table_id)
        if foreign:
            raise InvalidArgumentError(
                f"{method}(): {storage.location} already holds a Delta log ({DELTA_LOG}/) that {foreign}; "
                f"acidtables will not write its mirror into another writer's log. Move that table elsewhere first"
            )


def _foreign_log(storage: Storage, table_id: str) -> str | None:
    """Why the location's `_delta_log` is not this table's mirror; None when there is none, or it is."""
    entries = _entries(storage)
    if not entries:
        return None
    try:
        return _foreign_entry(storage, table_id, *max(entries))
    except FileNotFoundError:
        # removed since the listing (this table's mirror being removed by another process): look again
        return _foreign_log(storage, table_id)


def _foreign_entry(storage: Storage, table_id: str, version: int, kind: str) -> str | None:
    if kind == "checkpoint.parquet":
        table = pq.read_table(
            pa.BufferReader(storage.read(_checkpoint_path(version))), columns=["metaData", "protocol"]
        )
        actions: list[dict[str, Any]] = [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]
    else:
        text = storage.read(_json_path(version)).decode()
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    owner = next((a["metaData"].get("id") for a in actions if a.get("metaData")), None)
    features = next((a["protocol"].get("writerFeatures") or [] for a in actions if a.get("protocol")), None)
    if features is not None and WRITER_FEATURE not in features:
        return "another Delta writer made"
    if owner is not None and owner != table_id:
        return f"belongs to table id {owner}"
    return None


def _json_path(version: int) -> str:
    return f"{DELTA_LOG}/{version:020d}.json"


def _checkpoint_path(version: int) -> str:
    return f"{DELTA_LOG}/{version:020d}.checkpoint.parquet"


def _entries(storage: Storage) -> list[tuple[int, str]]:
    """(version, 'json' | 'checkpoint.parquet') of every log entry at the location."""
    found = []
    for info in storage.list_dir(DELTA_LOG):
        match = _ENTRY.match(info.path.rsplit("/", 1)[-1])
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found


@dataclass(frozen=True)
class MirrorState:
    """How far a table's Delta mirror is: `version` None when it has none (off, or not written yet)."""

    enabled: bool
    version: int | None
    head: int
    #: commit time (µs) of the oldest version the mirror does not have yet; None when it is caught up
    behind_since: int | None = None

    @property
    def lag_versions(self) -> int:
        return self.head - (self.version if self.version is not None else -1) if self.enabled else 0


def delta_state(services: Services, table_id: str, location: str) -> MirrorState:
    """The mirror's newest version, from one listing of `_delta_log/`."""
    head = int(services.coordinator.read_head(table_id).value["version"])
    meta = services.snapshots.load(table_id, location, head).metadata
    enabled = "delta" in mirror_formats(meta)
    entries = _entries(services.storage(location))
    version = max((v for v, _ in entries), default=None)
    behind_since = None
    if enabled and (version is None or version < head):
        first = services.log(table_id, location).read((version if version is not None else -1), head)[:1]
        behind_since = services.decode_log_entry(location, first[0]).committed_at if first else None
    return MirrorState(enabled, version, head, behind_since)


def sync_delta(services: Services, table_id: str, location: str, *, known: int | None = None) -> MirrorState:
    """Write the mirror's entries for every version committed since its newest (or, for a table whose
    mirror was just turned on, from the oldest version retention keeps); remove the mirror of a table
    whose mirror was turned off. Returns the state after. `known`: the newest version this process
    mirrored last time, confirmed with two existence checks instead of listing `_delta_log/` (which
    holds an entry per version)."""
    storage = services.storage(location)
    head = int(services.coordinator.read_head(table_id).value["version"])
    meta = services.snapshots.load(table_id, location, head).metadata
    if "delta" not in mirror_formats(meta):
        if _entries(storage) and _foreign_log(storage, table_id) is None:
            _remove_log(storage, meta.name)
        return MirrorState(False, None, head)
    newest: int | None
    if known is not None and storage.exists(_json_path(known)) and not storage.exists(_json_path(known + 1)):
        newest = known
    else:
        newest = max((v for v, _ in _entries(storage)), default=None)
    if newest is None:
        start = min(_oldest_retained(services, table_id), head)
        if start == 0:
            newest = -1
        else:
            _write_checkpoint(services, storage, table_id, location, start)
            newest = start
    if newest < head:
        previous = services.snapshots.load(table_id, location, newest).metadata if newest >= 0 else None
        interval = checkpoint_interval(meta)
        skipped = False
        oldest = _oldest_retained(services, table_id)
        for entry in services.log(table_id, location).read(newest, head):
            record = services.decode_log_entry(location, entry)
            current = record.metadata or previous
            if record.version < oldest:
                # expired before this run reached it (a vacuum's trim may be deleting entries this old): a
                # Delta reader must not be offered it; the chain restarts at a checkpoint below
                previous, skipped = current, True
                continue
            if current is None:
                raise InvalidArgumentError(f"{meta.name}: version {record.version} has no table definition to mirror")
            changed = record.metadata is not None or previous is None
            if skipped:
                # versions before this one expired unwritten: a checkpoint here starts the chain again, then
                # nothing older stays offered, and only then its commit file (a crash between the steps
                # leaves a readable log: never a commit file after a gap)
                _write_checkpoint(services, storage, table_id, location, record.version)
                _remove_before(storage, record.version)
            _publish(
                storage, _json_path(record.version), encode(commit_actions(record, current, metadata_changed=changed))
            )
            # Delta readers travel by timestamp on the commit files' modification times: the commit's own
            # time, not the moment the mirror wrote it (locally; an object store keeps the write time)
            storage.set_modified(_json_path(record.version), record.committed_at / 1_000_000)
            previous = current
            if skipped:
                skipped = False
            elif record.version % interval == 0 and record.version > 0:
                _write_checkpoint(services, storage, table_id, location, record.version)
        # a vacuum's trim that ran meanwhile (checkpoint at its floor, entries before it deleted) may have
        # seen this run write entries before its floor again: they go
        floor = _oldest_retained(services, table_id)
        if floor > oldest and storage.exists(_checkpoint_path(floor)):
            _remove_before(storage, floor)
    return MirrorState(True, head, head)


def _oldest_retained(services: Services, table_id: str) -> int:
    """The oldest version retention keeps (its record is core.maintenance.retention's `Retention`)."""
    record, _ = services.coordinator.read_retention(table_id)
    return int(record["oldest_version"]) if record else 0


def _publish(storage: Storage, relative: str, data: bytes) -> None:
    # FileExistsError: another writer mirrored this version, the same bytes (every entry is a function of the log)
    with contextlib.suppress(FileExistsError):
        storage.publish(relative, data)


def _write_checkpoint(services: Services, storage: Storage, table_id: str, location: str, version: int) -> None:
    snapshot = services.snapshots.load(table_id, location, version)
    rows = checkpoint_rows(snapshot)
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    _publish(storage, _checkpoint_path(version), sink.getvalue().to_pybytes())
    hint = {"version": version, "size": rows.num_rows, "numOfAddFiles": len(snapshot.files_by_path)}
    named = storage.read_json(LAST_CHECKPOINT)
    if named is None or int(named.get("version", -1)) < version:  # a late writer never points it back
        storage.replace(LAST_CHECKPOINT, json.dumps(hint).encode())


MIRROR_WORK = "acidtables-delta-mirror"
#: how long the committing process's mirror thread lets commits gather before it catches up
MIRROR_COALESCE_SECONDS = 0.2


def schedule_mirror(services: Services, table: tuple[str, str], version: int) -> None:
    """Catch the table's mirror up to at least `version` on this process's mirror thread, off the
    commit path; a failure is logged and the next commit, the operator or `Table.sync_mirror` retries."""

    # what this process mirrored last, per table: the work function (and so this dict) of the first call
    # is the one the background thread keeps; later calls only schedule
    mirrored: dict[tuple[str, str], int] = {}

    def work(key: tuple[str, str], _version: int) -> None:
        # commits that land meanwhile are combined into this one request (BackgroundWork keeps the newest),
        # so a writer committing back to back shares one catch-up per interval instead of one per commit
        time.sleep(MIRROR_COALESCE_SECONDS)
        state = sync_delta(services, *key, known=mirrored.get(key))
        if state.version is not None:
            mirrored[key] = state.version
        else:
            mirrored.pop(key, None)

    services.background(MIRROR_WORK, work).schedule(table, version)


def trim_delta(services: Services, table_id: str, location: str, floor: int) -> None:
    """Make the mirror offer no version older than `floor` (vacuum's: the files of older versions are
    about to be deleted): catch it up, checkpoint at `floor`, then delete every entry before it."""
    storage = services.storage(location)
    state = sync_delta(services, table_id, location)
    if not state.enabled:
        return
    entries = _entries(storage)
    if not any(v < floor for v, _ in entries):
        return
    if (floor, "checkpoint.parquet") not in entries:
        _write_checkpoint(services, storage, table_id, location, floor)
    _remove_before(storage, floor)


def _remove_before(storage: Storage, floor: int) -> None:
    """Delete every log entry older than `floor` (the newest first is irrelevant: none of them is read
    once a checkpoint at `floor` exists)."""
    for version, kind in sorted(_entries(storage)):
        if version < floor:
            storage.delete(_json_path(version) if kind == "json" else _checkpoint_path(version))


def _remove_log(storage: Storage, name: str) -> None:
    for version, kind in sorted(_entries(storage), reverse=True):
        storage.delete(_json_path(version) if kind == "json" else _checkpoint_path(version))
    if storage.exists(LAST_CHECKPOINT):
        storage.delete(LAST_CHECKPOINT)
    logger.info("%s: mirror.formats no longer names delta: removed its Delta log", name)


__all__ = [
    "CHECKPOINT_INTERVAL_PROPERTY",
    "DELTA_LOG",
    "FORMATS",
    "MIRROR_PROPERTY",
    "MirrorState",
    "check_mirror",
    "delta_state",
    "mirror_formats",
    "schedule_mirror",
    "sync_delta",
    "trim_delta",
]
