"""A checkpoint's file entries as a map that reads only what is asked of it.

A snapshot of a million files used to be a million Python objects, built before the first question
(13 s, 2 GiB). `ManifestFiles` holds the checkpoint's manifests as the Parquet bytes it proved at load
(tens of megabytes at a million files) and answers from them:

- its size from the manifest list, without decoding anything;
- a batch of paths (`find`) from an index of the path columns built on the first lookup, so a commit
  pays for the paths it checks, decoding only the entries found;
- the files of some partitions (`in_partitions`) from the row groups of those partitions alone, chosen
  by the list's per-partition summaries: a read of one partition of a thousand decodes about one
  partition's entries;
- everything, built once and kept, only for a caller that walks every file.

Entries become `DataFile`s only when a caller takes them. Immutable, like the checkpoint it reads.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from acidtables.core.log import manifests
from acidtables.core.log.file_totals import FileTotals, PartitionTotals
from acidtables.core.log.manifests import Manifest
from acidtables.core.log.records import DataFile, FileKind


class ManifestFiles(Mapping[str, DataFile]):
    """Path -> DataFile over a checkpoint's manifests, `contents` being each one's proven bytes."""

    def __init__(self, listed: Sequence[Manifest], contents: Sequence[bytes]) -> None:
        self._manifests = tuple(listed)
        self._contents = tuple(contents)
        self._count = sum(m.entries for m in listed)
        self._tables: dict[int, pa.Table] = {}
        self._all: dict[str, DataFile] | None = None
        self._index: dict[str, tuple[int, int]] | None = None
        #: a lookup has scanned the path columns once: the next builds the index
        self._scanned = False
        #: decodes happen once however many threads ask (reentrant: `everything` decodes manifests)
        self._lock = threading.RLock()
        #: entries decoded into DataFiles so far: what readers paid (tests and benchmarks read it)
        self.decoded = 0

    @property
    def manifests(self) -> tuple[Manifest, ...]:
        return self._manifests

    # --- what needs nothing decoded, or a part ---------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def find(self, paths: Collection[str]) -> dict[str, DataFile]:
        """The entries of those of `paths` that are here, decoding only them (see `_rows_of` for how
        they are located)."""
        if not paths:
            return {}
        if self._all is not None:
            return {p: self._all[p] for p in paths if p in self._all}
        found: dict[str, DataFile] = {}
        for number, taken in self._rows_of(paths).items():
            found.update((f.path, f) for f in self._decode(self._take(number, taken)))
        return found

    def present(self, paths: Collection[str]) -> set[str]:
        """Those of `paths` that are here, decoding no entry."""
        if not paths:
            return set()
        if self._all is not None:
            return {p for p in paths if p in self._all}
        if self._scan_first():
            rows = self._scan(paths)
            return {path for number, taken in rows.items() for path in self._paths(number).take(taken).to_pylist()}
        index = self._path_index()
        return {p for p in paths if p in index}

    def _scan_first(self) -> bool:
        """Whether this lookup scans the path columns. The first does, keeping nothing: a process that
        looks paths up once (vacuum, a job's one commit, the operator) pays a pass and no memory. The
        second builds an index of every path, which later lookups reuse: a process that commits again
        and again (a streaming writer) then pays what it asks, not a pass over the table (a few tenths
        of a second and about 150 MB at a million files)."""
        first = self._index is None and not self._scanned
        self._scanned = True
        return first

    def _scan(self, paths: Collection[str]) -> dict[int, list[int]]:
        """manifest -> the rows holding `paths` (ascending), from the path columns, nothing kept."""
        rows: dict[int, list[int]] = {}
        wanted = pa.array(sorted(set(paths)), pa.string())
        for number in range(len(self._manifests)):
            hits = pc.indices_nonzero(pc.is_in(self._paths(number), value_set=wanted)).to_pylist()
            if hits:
                rows[number] = hits
        return rows

    def _rows_of(self, paths: Collection[str]) -> dict[int, list[int]]:
        """manifest -> the sorted rows holding `paths`: scanned the first time, then from the index."""
        if self._scan_first():
            return self._scan(paths)
        rows: dict[int, list[int]] = {}
        index = self._path_index()
        for path in set(paths):
            at = index.get(path)
            if at is not None:
                rows.setdefault(at[0], []).append(at[1])
        return {number: sorted(taken) for number, taken in rows.items()}

    def _paths(self, number: int) -> pa.ChunkedArray:
        return self._columns(number, ("path",)).column("path")

    def _path_index(self) -> Mapping[str, tuple[int, int]]:
        """path -> (manifest, row), built once from the path columns alone."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    index: dict[str, tuple[int, int]] = {}
                    for number in range(len(self._manifests)):
                        index.update((path, (number, row)) for row, path in enumerate(self._paths(number).to_pylist()))
                    self._index = index
        return self._index

    def totals(self, small_file_bytes: int = 0) -> FileTotals:
        """What every entry adds up to, from four projected columns: no entry decoded."""
        totals = FileTotals()
        for index in range(len(self._manifests)):
            table = self._columns(index, _TOTALLED)
            sizes = table.column("size_bytes")
            totals += FileTotals(
                files=table.num_rows,
                small_files=_sum(pc.less(sizes, small_file_bytes)),
                change_files=_sum(pc.equal(table.column("kind"), FileKind.CHANGES.value)),
                size_bytes=_sum(sizes),
                live_rows=_sum(table.column("rows")) - _sum(table.column("hidden_rows")),
            )
        return totals

    def partition_totals(self, small_file_bytes: int, skip: Collection[str] = ()) -> dict[str, PartitionTotals]:
        """Per partition (its canonical key) but those in `skip`: totals and the newest version that
        added a file, from projected columns, no entry decoded."""
        found: dict[str, PartitionTotals] = {}
        for index in range(len(self._manifests)):
            table = self._columns(index, _GROUPED)
            sizes = table.column("size_bytes")
            flags = pa.table(
                {
                    "partition": table.column("partition"),
                    "small": pc.less(sizes, small_file_bytes).cast(pa.int64()),
                    "change": pc.equal(table.column("kind"), FileKind.CHANGES.value).cast(pa.int64()),
                    "size_bytes": sizes,
                    "live": pc.subtract(table.column("rows"), table.column("hidden_rows")),
                    "added_version": table.column("added_version"),
                }
            )
            grouped = flags.group_by("partition").aggregate(
                [
                    ("size_bytes", "count"),
                    ("small", "sum"),
                    ("change", "sum"),
                    ("size_bytes", "sum"),
                    ("live", "sum"),
                    ("added_version", "max"),
                ]
            )
            for row in grouped.to_pylist():
                key = row["partition"]
                if key in skip:
                    continue
                totals = FileTotals(
                    row["size_bytes_count"],
                    row["small_sum"],
                    row["change_sum"],
                    row["size_bytes_sum"],
                    row["live_sum"],
                )
                found[key] = PartitionTotals(totals, int(row["added_version_max"] or 0))
        return found

    def in_partitions(self, keep: Callable[[Mapping[str, Any]], bool]) -> list[DataFile]:
        """The files of every partition `keep` accepts (given its values), decoding only the row groups
        that hold them."""
        files: list[DataFile] = []
        for index, manifest in enumerate(self._manifests):
            ranges = [(p.first_row, p.files) for p in manifest.partitions if keep(p.partition())]
            if ranges:
                files.extend(self._decode(self._rows(index, ranges)))
        return files

    # --- Mapping ---------------------------------------------------------------------------------------

    def __getitem__(self, path: str) -> DataFile:
        found = self.find((path,))
        if path not in found:
            raise KeyError(path)
        return found[path]

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and bool(self.find((path,)))

    def __iter__(self) -> Iterator[str]:
        return iter(self.everything())

    def everything(self) -> Mapping[str, DataFile]:
        """Every entry as a DataFile, built once: for callers that walk the whole table."""
        if self._all is None:
            with self._lock:
                if self._all is None:
                    built: dict[str, DataFile] = {}
                    for index in range(len(self._manifests)):
                        built.update((f.path, f) for f in self._decode(self._table(index)))
                    self._all = built
        return self._all

    # --- decoding --------------------------------------------------------------------------------------

    def _table(self, index: int) -> pa.Table:
        """A whole manifest, decoded once and kept (Arrow, a fraction of its entries as objects)."""
        with self._lock:
            table = self._tables.get(index)
            if table is None:
                table = pq.read_table(pa.BufferReader(self._contents[index]), schema=manifests.ENTRY_SCHEMA)
                self._tables[index] = table
            return table

    def _columns(self, index: int, names: Sequence[str]) -> pa.Table:
        """Some columns of one manifest: from its decoded table when kept, else read alone (not kept)."""
        table = self._tables.get(index)
        if table is not None:
            return table.select(list(names))
        return pq.read_table(pa.BufferReader(self._contents[index]), columns=list(names))

    def _decode(self, entries: pa.Table) -> list[DataFile]:
        self.decoded += entries.num_rows
        return list(manifests.data_files(entries))

    def _take(self, index: int, rows: Sequence[int]) -> pa.Table:
        """Some rows (sorted) of one manifest, from the row groups holding them (nothing kept)."""
        table = self._tables.get(index)
        if table is not None:
            return table.take(rows)
        reader = pq.ParquetFile(pa.BufferReader(self._contents[index]))
        starts = [begin for begin, _ in _spans(reader)]
        group_of = [bisect.bisect_right(starts, row) - 1 for row in rows]
        groups = sorted(set(group_of))
        read = reader.read_row_groups(groups, columns=manifests.ENTRY_SCHEMA.names)
        offset, read_at = 0, {}  # where each group read starts within `read`
        for group in groups:
            read_at[group] = offset
            offset += reader.metadata.row_group(group).num_rows
        local = [read_at[group] + row - starts[group] for row, group in zip(rows, group_of, strict=True)]
        return read.take(local).cast(manifests.ENTRY_SCHEMA)

    def _rows(self, index: int, ranges: Sequence[tuple[int, int]]) -> pa.Table:
        """The rows of `ranges` (first row, count) of one manifest, from the row groups holding them."""
        table = self._tables.get(index)
        if table is not None:
            return pa.concat_tables([table.slice(first, count) for first, count in ranges])
        reader = pq.ParquetFile(pa.BufferReader(self._contents[index]))
        spans = _spans(reader)
        parts = []
        for first, count in ranges:
            groups = [g for g, (begin, end) in enumerate(spans) if begin < first + count and end > first]
            read = reader.read_row_groups(groups, columns=manifests.ENTRY_SCHEMA.names)
            parts.append(read.slice(first - spans[groups[0]][0], count))
        return pa.concat_tables(parts).cast(manifests.ENTRY_SCHEMA)


def _spans(reader: pq.ParquetFile) -> list[tuple[int, int]]:
    """Each row group's first row and the row after its last."""
    spans, start = [], 0
    for group in range(reader.metadata.num_row_groups):
        end = start + reader.metadata.row_group(group).num_rows
        spans.append((start, end))
        start = end
    return spans


_TOTALLED = ("size_bytes", "kind", "rows", "hidden_rows")
_GROUPED = ("partition", *_TOTALLED, "added_version")


def _sum(values: pa.ChunkedArray) -> int:
    total = pc.sum(values.cast(pa.int64()) if values.type == pa.bool_() else values).as_py()
    return int(total or 0)


__all__ = ["ManifestFiles"]
