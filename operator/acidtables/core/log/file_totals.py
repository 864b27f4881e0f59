"""What a set of files adds up to: the figures status and maintenance show, without the files themselves."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from acidtables.core.log.records import DataFile, FileKind


@dataclass(frozen=True)
class FileTotals:
    files: int = 0
    #: files smaller than the threshold they were counted with
    small_files: int = 0
    #: a primary-key table's change ("delta") files
    change_files: int = 0
    size_bytes: int = 0
    #: rows the files hold, deletion vectors applied
    live_rows: int = 0

    @staticmethod
    def of(files: Iterable[DataFile], small_file_bytes: int = 0) -> FileTotals:
        count = small = changes = size = rows = 0
        for f in files:
            count += 1
            small += f.size_bytes < small_file_bytes
            changes += f.kind is FileKind.CHANGES
            size += f.size_bytes
            rows += f.live_rows
        return FileTotals(count, small, changes, size, rows)

    def __add__(self, other: FileTotals) -> FileTotals:
        return FileTotals(
            self.files + other.files,
            self.small_files + other.small_files,
            self.change_files + other.change_files,
            self.size_bytes + other.size_bytes,
            self.live_rows + other.live_rows,
        )

    def __sub__(self, other: FileTotals) -> FileTotals:
        return self + FileTotals(
            -other.files, -other.small_files, -other.change_files, -other.size_bytes, -other.live_rows
        )


@dataclass(frozen=True)
class PartitionTotals:
    """One partition's totals, and the newest version that added a file to it (a partition written
    recently is not quiet: automatic compaction waits)."""

    totals: FileTotals
    newest_version: int

    @staticmethod
    def of(files: Iterable[DataFile], small_file_bytes: int = 0) -> PartitionTotals:
        members = list(files)
        newest = max(((f.added_version or 0) for f in members), default=0)
        return PartitionTotals(FileTotals.of(members, small_file_bytes), newest)


__all__ = ["FileTotals", "PartitionTotals"]
