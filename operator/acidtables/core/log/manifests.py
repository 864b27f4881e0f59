"""A checkpoint's file entries as Parquet manifests, each holding the live files of a group of partitions.

A checkpoint used to be one JSON document of every live file: 250 MB and 10 s at a million files,
rewritten whole every time. Manifests make its cost follow what changed (docs/design/snapshots-at-scale.md):

- The live files are split into `buckets` by a hash of their partition (of their path, on an
  unpartitioned table), one immutable Parquet file per bucket, sorted by partition and path. A partition
  is always in one manifest, so a reader of one partition opens one file.
- The next checkpoint rewrites only the buckets the commits since the last one touched, and carries the
  others by reference. The number of buckets is chosen for about `TARGET_ENTRIES` entries each and
  changes (a full rewrite) only when the table has grown or shrunk fourfold.
- Each manifest's summary (in the checkpoint's manifest list) gives, per partition, its first row, files,
  live rows and bytes, so a reader can prune partitions, and count, without opening a manifest.

Entries are columns a reader projects: path, partition (canonical JSON, dictionary-encoded), rows, the
rows a deletion vector hides, bytes, kind, the version that added it, and `detail`, the rest of the entry as
the log spells it (statistics, kind, deletion vector, lineage), decoded only for entries a reader takes.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from acidtables.core.log.records import DataFile

#: entries a manifest is sized for: a rewrite of one costs tens of milliseconds
TARGET_ENTRIES = 50_000
#: rows per Parquet row group: a reader of one partition decodes about this many entries beyond it
ROW_GROUP_ENTRIES = 8192

ENTRY_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("partition", pa.string()),
        ("rows", pa.int64()),
        ("hidden_rows", pa.int64()),
        ("size_bytes", pa.int64()),
        ("kind", pa.string()),
        ("added_version", pa.int64()),
        ("detail", pa.string()),
    ]
)
_OWN_FIELDS = ("path", "partition", "rows", "size_bytes")


def partition_key(partition: Mapping[str, Any]) -> str:
    """A partition's values in one canonical spelling: the manifests' partition column and summary key."""
    return json.dumps(partition, sort_keys=True, separators=(",", ":"), default=str)


def bucket_count(entries: int) -> int:
    """Buckets for a table of `entries` live files: a power of two, about TARGET_ENTRIES each."""
    count = 1
    while count * TARGET_ENTRIES < entries:
        count *= 2
    return count


def needs_new_buckets(entries: int, buckets: int) -> bool:
    """Whether a table of `entries` files has outgrown (or shrunk well below) `buckets`: fourfold either way."""
    return entries > 4 * TARGET_ENTRIES * buckets or (buckets > 1 and entries * 4 < TARGET_ENTRIES * buckets)


def bucket_of(file: DataFile, buckets: int) -> int:
    """The bucket a file's entry lives in: by partition, so one partition is in one manifest."""
    key = partition_key(file.partition) if file.partition else file.path
    return zlib.crc32(key.encode()) % buckets


@dataclass(frozen=True)
class PartitionSummary:
    """One partition within a manifest: where its entries start (rows are sorted by partition) and what
    they add up to."""

    key: str
    first_row: int
    files: int
    live_rows: int
    size_bytes: int

    def partition(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.key)
        return parsed

    def to_json(self) -> list[Any]:
        return [self.key, self.first_row, self.files, self.live_rows, self.size_bytes]

    @staticmethod
    def from_json(raw: Sequence[Any]) -> PartitionSummary:
        key, first_row, files, live_rows, size_bytes = raw
        return PartitionSummary(str(key), int(first_row), int(files), int(live_rows), int(size_bytes))


@dataclass(frozen=True)
class Manifest:
    """One manifest as the checkpoint's list names it: file, checksum, bucket and partition summaries."""

    path: str
    sha256: str
    bucket: int
    entries: int
    partitions: tuple[PartitionSummary, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "bucket": self.bucket,
            "entries": self.entries,
            "partitions": [p.to_json() for p in self.partitions],
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Manifest:
        return Manifest(
            path=str(raw["path"]),
            sha256=str(raw["sha256"]),
            bucket=int(raw["bucket"]),
            entries=int(raw["entries"]),
            partitions=tuple(PartitionSummary.from_json(p) for p in raw["partitions"]),
        )


# --- entries: DataFile <-> Arrow ---------------------------------------------------------------------


def entries_table(files: Iterable[DataFile]) -> pa.Table:
    """Manifest entries of `files` (unsorted)."""
    columns: dict[str, list[Any]] = {name: [] for name in ENTRY_SCHEMA.names}
    for f in files:
        raw = f.to_json()
        columns["path"].append(f.path)
        columns["partition"].append(partition_key(f.partition))
        columns["rows"].append(f.rows)
        columns["hidden_rows"].append(len(f.deletion_vector or ()))
        columns["size_bytes"].append(f.size_bytes)
        columns["kind"].append(f.kind.value)
        columns["added_version"].append(f.added_version)
        rest = {k: v for k, v in raw.items() if k not in _OWN_FIELDS}
        columns["detail"].append(json.dumps(rest, separators=(",", ":")) if rest else None)
    return pa.table(columns, schema=ENTRY_SCHEMA)


def data_files(entries: pa.Table) -> Iterator[DataFile]:
    """The DataFiles of manifest entries: what a reader takes, decoded only now."""
    partitions: dict[str, dict[str, Any]] = {}
    columns = [entries.column(name).to_pylist() for name in ("path", "partition", "rows", "size_bytes")]
    added = entries.column("added_version").to_pylist()
    details = entries.column("detail").to_pylist()
    for (path, key, rows, size), added_version, detail in zip(zip(*columns, strict=True), added, details, strict=True):
        partition = partitions.get(key)
        if partition is None:
            partition = partitions[key] = json.loads(key)
        raw = json.loads(detail) if detail else {}
        raw.update(path=path, partition=partition, rows=rows, size_bytes=size)
        yield DataFile.from_json(raw, added_version)


# --- one manifest's file -----------------------------------------------------------------------------


def sorted_entries(entries: pa.Table) -> pa.Table:
    return entries.sort_by([("partition", "ascending"), ("path", "ascending")])


def summarise(entries: pa.Table) -> tuple[PartitionSummary, ...]:
    """Per partition of sorted entries: first row, files, live rows, bytes."""
    if entries.num_rows == 0:
        return ()
    grouped = entries.group_by("partition").aggregate(
        [("path", "count"), ("rows", "sum"), ("hidden_rows", "sum"), ("size_bytes", "sum")]
    )
    order = pc.sort_indices(grouped, [("partition", "ascending")])
    grouped = grouped.take(order)
    summaries, first = [], 0
    for key, files, rows, hidden, size in zip(
        grouped.column("partition").to_pylist(),
        grouped.column("path_count").to_pylist(),
        grouped.column("rows_sum").to_pylist(),
        grouped.column("hidden_rows_sum").to_pylist(),
        grouped.column("size_bytes_sum").to_pylist(),
        strict=True,
    ):
        summaries.append(PartitionSummary(key, first, files, rows - hidden, size))
        first += files
    return tuple(summaries)


def encode(entries: pa.Table) -> bytes:
    """Sorted entries as a Parquet file: zstd, dictionary encoding for all but the (unique) paths."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        entries,
        sink,
        compression="zstd",
        use_dictionary=["partition", "kind", "detail"],
        row_group_size=ROW_GROUP_ENTRIES,
        write_statistics=["partition"],
    )
    return bytes(sink.getvalue().to_pybytes())


def prove(data: bytes, manifest: Manifest) -> bytes:
    """A manifest file's bytes, once they prove themselves against the list: its SHA-256, and as many
    entries as the list says (ValueError if not). Nothing is decoded but the Parquet footer."""
    if sha256(data) != manifest.sha256:
        raise ValueError(f"manifest {manifest.path} does not match its checksum")
    rows = pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows
    if rows != manifest.entries:
        raise ValueError(f"manifest {manifest.path} holds {rows} entries, not {manifest.entries}")
    return data


def decode(data: bytes, manifest: Manifest) -> pa.Table:
    """A manifest file's entries, once its bytes prove themselves against the list (ValueError if not)."""
    return pq.read_table(pa.BufferReader(prove(data, manifest)), schema=ENTRY_SCHEMA)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = [
    "ENTRY_SCHEMA",
    "Manifest",
    "PartitionSummary",
    "bucket_count",
    "bucket_of",
    "data_files",
    "decode",
    "encode",
    "entries_table",
    "needs_new_buckets",
    "partition_key",
    "prove",
    "sorted_entries",
    "summarise",
]
