"""The change feed: each data commit's row-level changes in Delta Lake's terms, computed from its files.

Every change row is a row of the table with three columns after it: `_change_type` (`insert`,
`delete`, `update_preimage`, `update_postimage`), `_commit_version` and `_commit_timestamp`. No change
data is written at commit time (Delta's `_change_data` files): the changes are worked out from what the
commit removed and added, which the log keeps, so every table has a change feed from its first version.

- **Tables without a primary key** (copy-on-write, or deletion vectors): the rows the commit's removed
  files held as they read before it (their deletion vectors applied) and the rows its added files hold
  as they read after it are compared as multisets. A row in both was carried over unchanged by a
  rewrite and is no change; what remains is labelled by the operation. An UPDATE's old rows are
  `update_preimage` and its new rows `update_postimage`; a MERGE's too when it only updated rows (its
  metrics say so). Otherwise removed rows are `delete` and added rows `insert`: that is exact for
  INSERT, DELETE, an overwrite, TRUNCATE and RESTORE, and a MERGE that updated rows and also inserted
  or deleted some shows each updated row as a `delete` of its old value and an `insert` of its new one,
  the files alone not telling an updated row from an inserted one.
- **Primary-key tables** (merge-on-read) are compared by key: the merged rows of the partitions the
  commit touched, before it (the previous version's files) and after it. A key whose row changed is
  `update_preimage` and `update_postimage`, a key only before is `delete`, a key only after is `insert`;
  a key written again with the same values is no change. This is exact for every operation.

Compaction and clustering change no data and have no changes. The functions here run on executors
with pyarrow (the stream source's tasks); they read files and never talk to etcd.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from acidtables.core import DataFile, Operation, Storage, Table, TableMetadata, in_partitions

from .arrow_files import read_rows, read_schema
from .schema import CHANGE_TIME, CHANGE_TYPE, CHANGE_VERSION

INSERT, DELETE = "insert", "delete"
PREIMAGE, POSTIMAGE = "update_preimage", "update_postimage"
#: the Arrow types of the change columns, as Spark's change_feed_struct declares them
CHANGE_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(CHANGE_VERSION, pa.int64()),
    pa.field(CHANGE_TIME, pa.timestamp("us", tz="UTC")),
)


@dataclass(frozen=True)
class CommitChange:
    """What one data commit's change rows are worked out from; it travels to an executor as JSON."""

    version: int
    #: the commit's time version, microseconds
    time_us: int
    operation: Operation
    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    #: primary-key tables: the previous version's files in the partitions the commit touched
    prior: tuple[DataFile, ...] = ()
    #: the commit's operationMetrics (a MERGE's say whether it only updated rows)
    metrics: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        def entries(files: Sequence[DataFile]) -> list[dict[str, Any]]:
            return [{**f.to_json(), "added_version": f.added_version} for f in files]

        return {
            "version": self.version,
            "time_us": self.time_us,
            "operation": self.operation.value,
            "added": entries(self.added),
            "removed": entries(self.removed),
            "prior": entries(self.prior),
            "metrics": dict(self.metrics),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> CommitChange:
        def files(key: str) -> tuple[DataFile, ...]:
            return tuple(DataFile.from_json(f, f.get("added_version")) for f in data[key])

        return CommitChange(
            version=int(data["version"]),
            time_us=int(data["time_us"]),
            operation=Operation(data["operation"]),
            added=files("added"),
            removed=files("removed"),
            prior=files("prior"),
            metrics={k: int(v) for k, v in data["metrics"].items()},
        )


def commit_change(
    table: Table,
    version: int,
    time_us: int,
    operation: Operation,
    adds: Sequence[DataFile],
    removes: Sequence[DataFile],
    metrics: Mapping[str, int],
) -> CommitChange:
    """What a data commit's changes are worked out from (on the driver, which reads the log): its data
    files, and on a primary-key table the previous version's files of the partitions it touched."""
    added = tuple(f for f in adds if f.data_change)
    removed = tuple(f for f in removes if f.data_change)
    prior: tuple[DataFile, ...] = ()
    if table.metadata.primary_key:
        touched = {repr(sorted(f.partition.items())): dict(f.partition) for f in (*added, *removed)}
        if touched:
            prior = tuple(table.snapshot(version=version - 1).prune(in_partitions(list(touched.values()))))
    return CommitChange(version, time_us, operation, added, removed, prior, dict(metrics))


def labelled(rows: pa.Table, change_type: str, version: int, time_us: int) -> pa.Table:
    """`rows` with the change columns: every row of one type, version and time."""
    n = rows.num_rows
    return (
        rows.append_column(CHANGE_FIELDS[0], pa.array([change_type] * n, pa.string()))
        .append_column(CHANGE_FIELDS[1], pa.array([version] * n, pa.int64()))
        .append_column(CHANGE_FIELDS[2], pa.array([time_us] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")))
    )


def empty_changes(meta: TableMetadata) -> pa.Table:
    return labelled(read_schema(meta).empty_table(), INSERT, 0, 0)


_NAN = ("NaN",)


def _frozen(value: Any) -> Any:
    """A row's value as a dictionary key: lists, maps and structs become tuples, and NaN a marker equal
    to itself (NaN != NaN would make every row holding one look changed). Arrow gives a map as a list of
    (key, value) tuples, whose values need freezing too."""
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _row_keys(rows: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(_frozen(v) for v in row.values()) for row in rows.to_pylist()]


def _read(meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> pa.Table:
    """The rows of each file as they read on their own (deletion vectors applied, no merge)."""
    if not files:
        return read_schema(meta).empty_table()
    return pa.concat_tables([read_rows(meta, storage, [f]) for f in files])


def _unmatched(rows: pa.Table, keys: list[tuple[Any, ...]], others: Counter[tuple[Any, ...]]) -> pa.Table:
    """The rows of `rows` left once each row of `others` cancels one equal row (a multiset difference)."""
    left = Counter(others)
    kept = []
    for i, key in enumerate(keys):
        if left[key]:
            left[key] -= 1
        else:
            kept.append(i)
    return rows.take(pa.array(kept, pa.int64()))


def _only_updates(change: CommitChange) -> bool:
    """Whether every changed row is an update: an UPDATE, or a MERGE whose metrics say it only updated."""
    if change.operation is Operation.UPDATE:
        return True
    if change.operation is not Operation.MERGE:
        return False
    metrics = change.metrics
    updated = metrics.get("numTargetRowsUpdated", 0)
    others = metrics.get("numTargetRowsInserted", 0) + metrics.get("numTargetRowsDeleted", 0)
    return updated > 0 and others == 0


def _without_key(meta: TableMetadata, storage: Storage, change: CommitChange) -> tuple[pa.Table, pa.Table]:
    before = _read(meta, storage, change.removed)
    after = _read(meta, storage, change.added)
    before_keys, after_keys = _row_keys(before), _row_keys(after)
    gone = _unmatched(before, before_keys, Counter(after_keys))
    new = _unmatched(after, after_keys, Counter(before_keys))
    return gone, new


def _partition_key(file: DataFile) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(file.partition.items()))


def _merged(meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> pa.Table:
    """The rows a reader sees of `files`, merged per table partition."""
    groups: dict[tuple[tuple[str, Any], ...], list[DataFile]] = {}
    for f in files:
        groups.setdefault(_partition_key(f), []).append(f)
    tables = [read_rows(meta, storage, group) for group in groups.values()]
    return pa.concat_tables(tables) if tables else read_schema(meta).empty_table()


def _by_key(meta: TableMetadata, rows: pa.Table) -> dict[tuple[Any, ...], int]:
    keys = rows.select([*meta.partition_by, *meta.primary_key]).to_pylist()
    return {tuple(_frozen(v) for v in key.values()): i for i, key in enumerate(keys)}


def _with_key(meta: TableMetadata, storage: Storage, change: CommitChange) -> list[tuple[str, pa.Table]]:
    gone_paths = {f.path for f in change.removed}
    before = _merged(meta, storage, change.prior)
    after = _merged(meta, storage, [f for f in change.prior if f.path not in gone_paths] + list(change.added))
    before_at, after_at = _by_key(meta, before), _by_key(meta, after)
    before_rows, after_rows = _row_keys(before), _row_keys(after)
    deleted = [i for key, i in before_at.items() if key not in after_at]
    inserted = [i for key, i in after_at.items() if key not in before_at]
    updated = [(i, after_at[key]) for key, i in before_at.items() if key in after_at]
    changed = [(i, j) for i, j in updated if before_rows[i] != after_rows[j]]
    take = pa.array
    return [
        (DELETE, before.take(take(deleted, pa.int64()))),
        (PREIMAGE, before.take(take([i for i, _ in changed], pa.int64()))),
        (POSTIMAGE, after.take(take([j for _, j in changed], pa.int64()))),
        (INSERT, after.take(take(inserted, pa.int64()))),
    ]


def change_rows(meta: TableMetadata, storage: Storage, change: CommitChange) -> pa.Table:
    """The change rows of one data commit (see the module docstring), in the read schema plus the change
    columns: old rows (deletes, preimages) before new ones (postimages, inserts)."""
    if meta.primary_key:
        parts = _with_key(meta, storage, change)
    else:
        gone, new = _without_key(meta, storage, change)
        if _only_updates(change) and gone.num_rows == new.num_rows:
            parts = [(PREIMAGE, gone), (POSTIMAGE, new)]
        else:
            parts = [(DELETE, gone), (INSERT, new)]
    tables = [labelled(rows, kind, change.version, change.time_us) for kind, rows in parts if rows.num_rows]
    if not tables:
        return empty_changes(meta)
    return pa.concat_tables(tables)


__all__ = [
    "CHANGE_FIELDS",
    "DELETE",
    "INSERT",
    "POSTIMAGE",
    "PREIMAGE",
    "CommitChange",
    "change_rows",
    "commit_change",
    "empty_changes",
    "labelled",
]
