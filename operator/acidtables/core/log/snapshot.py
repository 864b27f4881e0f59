"""A table as of one ID version: its metadata, protocol and active files (MVCC).

A snapshot is never changed after it is handed out, so a reader that pinned one keeps seeing exactly
that version however many commits land after it (invariant G3). It is built by applying commit records
in order to an earlier snapshot or a checkpoint. Its file map is a FileSet, which each commit extends
without copying what it does not change: building the next version from the last costs what the commit
changed, not what the table holds (issue 32).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acidtables.core.expressions import ColumnBounds, Expr, might_match, restrict_to_columns
from acidtables.core.log.file_set import FileSet
from acidtables.core.log.file_totals import FileTotals, PartitionTotals
from acidtables.core.log.records import CommitRecord, DataFile, Protocol, TableMetadata, evolve


@dataclass(frozen=True)
class Snapshot:
    metadata: TableMetadata
    version: int
    #: time version (µs) of the newest data commit at or before this version; None before any
    time_version: int | None
    #: wall-clock µs of the commit that made this version
    committed_at: int
    protocol: Protocol
    files_by_path: FileSet = field(repr=False)
    #: idempotent writers: application id -> (version written, ID version that wrote it)
    app_ids: Mapping[str, tuple[int, int]] = field(default_factory=dict, repr=False)

    @property
    def files(self) -> list[DataFile]:
        """Active files, oldest first, so a merge-on-read reader sees delta files in commit order."""
        return sorted(self.files_by_path.values(), key=lambda f: (f.added_version or 0, f.path))

    @property
    def row_count(self) -> int:
        return self.totals().live_rows

    @property
    def size_bytes(self) -> int:
        return self.totals().size_bytes

    def totals(self, small_file_bytes: int = 0) -> FileTotals:
        """Files, small files (under `small_file_bytes`), change files, bytes and live rows: from a
        checkpoint's manifests without decoding their entries."""
        return self.files_by_path.totals(small_file_bytes)

    def partition_totals(self, small_file_bytes: int = 0) -> list[tuple[dict[str, Any], PartitionTotals]]:
        """Per partition, in a stable order: its values, totals and newest adding version. From a
        checkpoint's manifests without decoding the entries of partitions unchanged since."""
        by_key = self.files_by_path.partition_totals(small_file_bytes)
        found = [(json.loads(key), totals) for key, totals in by_key.items()]
        return sorted(found, key=lambda item: repr(tuple(sorted(item[0].items()))))

    def partitions(self) -> list[dict[str, Any]]:
        """The partitions holding a live file, in partition_totals' order (no entry decoded for them)."""
        return [values for values, _ in self.partition_totals()]

    def find(self, paths: Iterable[str]) -> dict[str, DataFile]:
        """The live entries of those of `paths` that are live, looked up as one batch: a snapshot read from
        a checkpoint's manifests answers a batch in one pass over them, a single lookup in one too."""
        return self.files_by_path.find(list(paths))

    def prune(self, predicate: Expr | None, *, partitions_only: bool = False) -> list[DataFile]:
        """Files that might hold rows matching `predicate` (partition values, then min/max statistics),
        oldest first. Partitions are pruned before any file is looked at: from a checkpoint's manifests
        only the matching partitions' entries are decoded.

        On a primary-key table only partition and key columns prune by statistics: a row's newest
        version (an update, or a tombstone with its other columns null) may sit in a file whose other
        columns' statistics miss the predicate, and leaving that file out would bring back the older
        version. Every version of a key shares its key and partition values, so those prune soundly."""
        if predicate is None:
            return self.files
        meta = self.metadata
        narrowed = restrict_to_columns(predicate, frozenset(meta.partition_by))

        def keep(partition: Mapping[str, Any]) -> bool:
            return might_match(narrowed, {k: ColumnBounds.exact(v) for k, v in partition.items()})

        candidates = self.files_by_path.in_partitions(keep)
        if not partitions_only:
            by_stats = predicate
            if meta.primary_key:
                by_stats = restrict_to_columns(predicate, frozenset((*meta.partition_by, *meta.primary_key)))
            candidates = [f for f in candidates if might_match(by_stats, f.bounds())]
        return sorted(candidates, key=lambda f: (f.added_version or 0, f.path))

    def to_json(self) -> dict[str, Any]:
        """The first checkpoint form: everything needed to continue from this version without the log."""
        files = [{**f.to_json(), "added_version": f.added_version} for f in self.files]
        return {**self.header_json(), "files": files}

    def header_json(self) -> dict[str, Any]:
        """Everything but the files: what a checkpoint's manifest list carries beside its manifests."""
        return {
            "version": self.version,
            "time_version": self.time_version,
            "committed_at": self.committed_at,
            "metadata": self.metadata.to_json(),
            "protocol": self.protocol.to_json(),
            "app_ids": {k: list(v) for k, v in self.app_ids.items()},
        }

    @staticmethod
    def from_json(data: Mapping[str, Any], files: FileSet | None = None) -> Snapshot:
        """The snapshot `to_json` wrote; or, given `files`, the one whose header `header_json` wrote."""
        if files is None:
            parsed = (DataFile.from_json(raw, raw.get("added_version")) for raw in data["files"])
            files = FileSet({f.path: f for f in parsed})
        return Snapshot(
            metadata=TableMetadata.from_json(data["metadata"]),
            version=int(data["version"]),
            time_version=data.get("time_version"),
            committed_at=int(data.get("committed_at", 0)),
            protocol=Protocol.from_json(data["protocol"]),
            files_by_path=files,
            app_ids={k: (int(v[0]), int(v[1])) for k, v in (data.get("app_ids") or {}).items()},
        )


class SnapshotBuilder:
    """Applies commit records in log order, starting from a snapshot or from nothing (before version 0)."""

    def __init__(self, base: Snapshot | None = None) -> None:
        self.metadata = base.metadata if base else None
        self.version = base.version if base else -1
        self.time_version = base.time_version if base else None
        self.committed_at = base.committed_at if base else 0
        self.protocol = base.protocol if base else Protocol()
        self.files = base.files_by_path if base else FileSet()
        #: never changed in place, only replaced: a snapshot made from the builder shares it, and a
        #: commit that records no application id (most) copies nothing
        self.app_ids: Mapping[str, tuple[int, int]] = base.app_ids if base else {}

    def apply(self, record: CommitRecord) -> None:
        if record.version != self.version + 1:
            raise ValueError(f"log entry {record.version} does not follow version {self.version}: the log has a gap")
        # the version that added a file orders merge-on-read rows; a staged record has none yet
        version = record.version
        adds = (f if f.added_version == version else evolve(f, added_version=version) for f in record.adds)
        self.files = self.files.changed(adds, (f.path for f in record.removes))
        if record.metadata is not None:
            self.metadata = record.metadata
        if record.protocol is not None:
            self.protocol = record.protocol
        if record.time_version is not None:
            self.time_version = record.time_version
        if record.app_ids:
            updated = {app_id: (app_version, record.version) for app_id, app_version in record.app_ids.items()}
            self.app_ids = {**self.app_ids, **updated}
        self.version = record.version
        self.committed_at = record.committed_at

    def apply_all(self, records: Iterable[CommitRecord]) -> SnapshotBuilder:
        for record in records:
            self.apply(record)
        return self

    def peek(self) -> Snapshot:
        """The snapshot so far; the builder can go on applying (a FileSet never changes once made, and
        the app-id map is replaced, never changed)."""
        return self.build()

    def build(self) -> Snapshot:
        if self.metadata is None:
            raise ValueError("no metadata: the log does not start with the table's creation")
        return Snapshot(
            metadata=self.metadata,
            version=self.version,
            time_version=self.time_version,
            committed_at=self.committed_at,
            protocol=self.protocol,
            files_by_path=self.files,
            app_ids=self.app_ids,
        )
