"""A checkpoint's file entries as a map that reads only what is asked of it.

A snapshot of a million files used to be a million Python objects, built before the first question
(13 s, 2 GiB). `ManifestFiles` holds the checkpoint's manifests as the Parquet bytes it proved at load
(tens of megabytes at a million files) and answers from them:

- its size from the manifest list, without decoding anything;
- a batch of paths (`find`) with one vectorised membership test per manifest, so a commit that checks
  10,000 paths pays one pass in C, not 10,000 lookups;
- the files of some partitions (`in_partitions`) from the row groups of those partitions alone, chosen
  by the list's per-partition summaries: a read of one partition of a thousand decodes about one
  partition's entries;
- everything, built once and kept, only for a caller that walks every file.

Entries become `DataFile`s only when a caller takes them. Immutable, like the checkpoint it reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from acidtables.core.log import manifests
from acidtables.core.log.manifests import Manifest
from acidtables.core.log.records import DataFile


class ManifestFiles(Mapping[str, DataFile]):
    """Path -> DataFile over a checkpoint's manifests, `contents` being each one's proven bytes."""

    def __init__(self, listed: Sequence[Manifest], contents: Sequence[bytes]) -> None:
        self._manifests = tuple(listed)
        self._contents = tuple(contents)
        self._count = sum(m.entries for m in listed)
        self._tables: dict[int, pa.Table] = {}
        self._all: dict[str, DataFile] | None = None
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
        """The entries of those of `paths` that are here: one vectorised pass per manifest."""
        if not paths:
            return {}
        if self._all is not None:
            return {p: self._all[p] for p in paths if p in self._all}
        wanted = pa.array(list(set(paths)), pa.string())
        found: dict[str, DataFile] = {}
        for index in range(len(self._manifests)):
            table = self._table(index)
            rows = pc.indices_nonzero(pc.is_in(table.column("path"), value_set=wanted))
            if len(rows):
                found.update((f.path, f) for f in self._decode(table.take(rows)))
                if len(found) == len(wanted):
                    break
        return found

    def present(self, paths: Collection[str]) -> set[str]:
        """Those of `paths` that are here, decoding no entry."""
        if not paths:
            return set()
        if self._all is not None:
            return {p for p in paths if p in self._all}
        wanted = pa.array(list(set(paths)), pa.string())
        found: set[str] = set()
        for index in range(len(self._manifests)):
            column = self._table(index).column("path")
            found.update(column.filter(pc.is_in(column, value_set=wanted)).to_pylist())
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

    def _decode(self, entries: pa.Table) -> list[DataFile]:
        self.decoded += entries.num_rows
        return list(manifests.data_files(entries))

    def _rows(self, index: int, ranges: Sequence[tuple[int, int]]) -> pa.Table:
        """The rows of `ranges` (first row, count) of one manifest, from the row groups holding them."""
        table = self._tables.get(index)
        if table is not None:
            return pa.concat_tables([table.slice(first, count) for first, count in ranges])
        reader = pq.ParquetFile(pa.BufferReader(self._contents[index]))
        starts, start = [], 0
        for group in range(reader.metadata.num_row_groups):
            starts.append(start)
            start += reader.metadata.row_group(group).num_rows
        parts = []
        for first, count in ranges:
            groups = [g for g, s in enumerate(starts) if s < first + count and s + _rows_in(reader, g) > first]
            read = reader.read_row_groups(groups, columns=manifests.ENTRY_SCHEMA.names)
            parts.append(read.slice(first - starts[groups[0]], count))
        return pa.concat_tables(parts).cast(manifests.ENTRY_SCHEMA)


def _rows_in(reader: pq.ParquetFile, group: int) -> int:
    return int(reader.metadata.row_group(group).num_rows)


__all__ = ["ManifestFiles"]
