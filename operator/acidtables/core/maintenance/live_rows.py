"""How many rows a read of a snapshot returns (its live rows), beside how many rows its files hold.

The log knows each file's row count and deletion vector, so for a table without a primary key, and
for a primary-key partition holding only base files (one row per key: what an overwrite or a MAJOR
compaction writes), the live rows are known from the log alone. A primary-key partition with change
files (merge-on-read, design §4) holds several rows per key and tombstones: what a read returns there
is the keys whose newest row is not a tombstone, which only the files can say. So those partitions are
counted by reading their key, `_acid_op` and `_acid_seq` columns (never the other columns), ordering as
readers order (spark/scan.py `newest_per_key`: newest sequence, then greatest file, then last row).

The count is exact: the same rule as a read, on the same files. It costs a read of the key columns of
every partition that has change files, so `LiveRowCounter` remembers each partition's count by its file
set: after a commit only the partitions it touched are read again. The operator (AcidTable status) and
the CLI (`acidtables tables`) call it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from acidtables.core.log.manifests import partition_key
from acidtables.core.log.records import DataFile, TableMetadata
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.schema.file_schema import OP_COLUMN, SEQ_COLUMN
from acidtables.core.storage.storage import Storage

logger = logging.getLogger(__name__)

_DELETE = "D"


@dataclass(frozen=True)
class RowCounts:
    #: rows a read of the snapshot returns
    live: int
    #: rows the active files hold, deletion vectors applied (merge-on-read duplicates and tombstones in)
    physical: int


def _partition_key(file: DataFile) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, repr(v)) for k, v in file.partition.items()))


def _fingerprint(files: Iterable[DataFile]) -> frozenset[tuple[str, int]]:
    return frozenset((f.path, len(f.deletion_vector or ())) for f in files)


class LiveRowCounter:
    """Counts a snapshot's live rows, remembering per (table, partition) the count of a file set."""

    def __init__(self, max_partitions: int = 10_000) -> None:
        self._known: dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[frozenset[tuple[str, int]], int]] = {}
        self._max = max_partitions

    def count(self, snapshot: Snapshot, storage: Storage) -> RowCounts:
        meta = snapshot.metadata
        if not meta.primary_key:  # no merge on read: the files' totals, which need no entry decoded
            physical = snapshot.totals().live_rows
            return RowCounts(physical, physical)
        # per-partition totals come from a checkpoint's columns; only partitions holding change files
        # need their entries, and their key columns read
        totals = snapshot.files_by_path.partition_totals()  # by each partition's canonical key
        physical = sum(t.totals.live_rows for t in totals.values())
        merging = {key for key, t in totals.items() if t.totals.change_files}
        live = sum(t.totals.live_rows for key, t in totals.items() if key not in merging)
        partitions: dict[tuple[tuple[str, Any], ...], list[DataFile]] = {}
        for f in snapshot.files_by_path.in_partitions(lambda values: partition_key(values) in merging):
            partitions.setdefault(_partition_key(f), []).append(f)
        for key, members in partitions.items():
            cache_key = (meta.table_id, key)
            fingerprint = _fingerprint(members)
            known = self._known.get(cache_key)
            if known is not None and known[0] == fingerprint:
                live += known[1]
                continue
            counted = merged_rows(meta, storage, members)
            if len(self._known) >= self._max:
                self._known.clear()  # a crude bound: recounting is correct, only slower
            self._known[cache_key] = (fingerprint, counted)
            live += counted
        return RowCounts(live, physical)


def merged_rows(meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> int:
    """The rows a read returns of one primary-key partition's files: keys whose newest row is an upsert."""
    stored_keys = [k for k in meta.primary_key if k not in meta.partition_by]
    parts = []
    for number, f in enumerate(files):
        with storage.open_input(f.path) as handle:
            parquet = pq.ParquetFile(handle)
            names = {n.lower(): n for n in parquet.schema_arrow.names}
            wanted = [names[k.lower()] for k in stored_keys if k.lower() in names]
            wanted += [names[c] for c in (OP_COLUMN, SEQ_COLUMN) if c in names]
            data = parquet.read(columns=wanted)
        rows = data.num_rows
        key_columns = {f"k{i}": data[names[k.lower()]] for i, k in enumerate(stored_keys)}
        op = data[OP_COLUMN] if OP_COLUMN in names else pa.nulls(rows, pa.string())
        seq = data[SEQ_COLUMN] if SEQ_COLUMN in names else pa.nulls(rows, pa.int64())
        part = pa.table(
            {
                **key_columns,
                # a missing `_acid_op` is an upsert (file_schema: plain Parquet files hold upserts)
                "op": pc.fill_null(op, "U"),
                "seq": pc.coalesce(seq.cast(pa.int64()), pa.scalar(f.added_version or 0, pa.int64())),
                # the greater file path wins a tie of sequences, as readers order
                "file": pa.array([f.path] * rows, pa.string()),
                "row": pa.array(range(rows), pa.int64()),
                "n": pa.array([number] * rows, pa.int64()),
            }
        )
        if f.deletion_vector:
            part = part.filter(pc.invert(pc.is_in(part["row"], value_set=pa.array(f.deletion_vector, pa.int64()))))
        parts.append(part)
    data = pa.concat_tables(parts)
    keys = [f"k{i}" for i in range(len(stored_keys))]
    ordered = data.sort_by(
        [*[(k, "ascending") for k in keys], ("seq", "descending"), ("file", "descending"), ("row", "descending")]
    )
    key_rows = ordered.select(keys).to_pylist()
    ops = ordered["op"].to_pylist()
    live = 0
    for i, key in enumerate(key_rows):
        if (i == 0 or key != key_rows[i - 1]) and ops[i] != _DELETE:
            live += 1
    return live


__all__ = ["LiveRowCounter", "RowCounts", "merged_rows"]
