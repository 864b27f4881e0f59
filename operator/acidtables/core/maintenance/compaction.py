"""Compaction planning: which files to rewrite together, and whether a table needs it at all.

Core plans and Spark executes (`acidtables.spark.compaction`), so the operator deciding whether to
launch a job, and the job pod doing it, use the same rules. A plan is groups of files inside one
partition that commit one by one (partial progress, a losing group is skipped); each group has a
stable identity from its input files, which is its application id within a job (`group_app_id`), so a
retried or duplicated pod that plans the same group again can never commit it twice (D-27), while the
groups after it still commit.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.expressions import Literal, read_predicate
from acidtables.core.log.records import DataFile, FileKind, TableMetadata
from acidtables.core.log.snapshot import Snapshot

#: a group holds at most this many files, so one commit stays small and quick
MAX_GROUP_FILES = 64
KINDS = ("minor", "major")


@dataclass(frozen=True)
class CompactionGroup:
    """Files of one partition rewritten into new files by one commit."""

    partition: Mapping[str, Literal]
    files: tuple[DataFile, ...]

    @property
    def key(self) -> str:
        """Stable identity: the same input files give the same key, in any process."""
        digest = hashlib.sha256("\n".join(sorted(f.path for f in self.files)).encode())
        return digest.hexdigest()[:24]

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)


@dataclass(frozen=True)
class CompactionPlan:
    kind: str
    #: the snapshot version the plan was made at
    version: int
    target_file_bytes: int
    groups: tuple[CompactionGroup, ...]

    @property
    def files(self) -> int:
        return sum(len(g.files) for g in self.groups)


def group_app_id(job_id: str, group: CompactionGroup) -> str:
    """The application id a job commits a group under (with version 1): one per group, so idempotency
    skips exactly the groups that already landed."""
    return f"compaction/{job_id}/{group.key}"


def _by_partition(files: Sequence[DataFile]) -> list[list[DataFile]]:
    """`files` grouped by partition, partitions in a stable order, files oldest first within each."""
    groups: dict[tuple[tuple[str, Literal], ...], list[DataFile]] = defaultdict(list)
    for f in files:
        groups[tuple(sorted(f.partition.items(), key=lambda kv: kv[0]))].append(f)
    ordered = [members for _, members in sorted(groups.items(), key=lambda kv: repr(kv[0]))]
    for members in ordered:
        members.sort(key=lambda f: (f.added_version or 0, f.path))
    return ordered


def files_in_scope(snapshot: Snapshot, where: str | None, method: str) -> list[DataFile]:
    """The snapshot's files in the partitions `where` selects (a condition on partition columns only)."""
    if where is None:
        return snapshot.files
    # read whole or refused: a part left out would widen the files this rewrites and removes
    reading = read_predicate(where, snapshot.metadata.column_types)
    expr = reading.expr
    if expr is None or not reading.complete or not expr.columns() <= set(snapshot.metadata.partition_by):
        why = f" (core cannot read {reading.describe_left_out()})" if not reading.complete else ""
        raise InvalidArgumentError(
            f"{method}(): where={where!r} must be a simple condition on partition columns "
            f"{list(snapshot.metadata.partition_by)}, e.g. \"dt = '2026-11-01'\"{why}"
        )
    return snapshot.prune(expr, partitions_only=True)


def check_arguments(kind: str, target_file_bytes: int, method: str = "compact") -> None:
    if kind not in KINDS:
        raise InvalidArgumentError(f"{method}(): kind={kind!r}; use 'minor' or 'major'")
    if isinstance(target_file_bytes, bool) or not isinstance(target_file_bytes, int) or target_file_bytes < 1024:
        raise InvalidArgumentError(f"{method}(): target_file_bytes must be an int >= 1024, found {target_file_bytes!r}")


def plan_compaction(
    snapshot: Snapshot, kind: str, *, where: str | None = None, target_file_bytes: int = 128 << 20
) -> CompactionPlan:
    """The groups a `kind` compaction of `snapshot` (optionally only where `where` selects) rewrites."""
    check_arguments(kind, target_file_bytes)
    files = files_in_scope(snapshot, where, "compact")
    groups = plan_groups(snapshot.metadata, files, kind, target_file_bytes)
    return CompactionPlan(
        kind,
        snapshot.version,
        target_file_bytes,
        tuple(CompactionGroup(dict(g[0].partition), tuple(g)) for g in groups),
    )


def plan_groups(
    meta: TableMetadata, files: Sequence[DataFile], kind: str, target_file_bytes: int
) -> list[list[DataFile]]:
    """Groups of files to rewrite together; each group stays inside one partition.

    * Tables without a primary key: small files (under 3/4 of the target) and files with deletion
      vectors are bin-packed up to the target size; MAJOR takes every file of the partition.
    * Primary-key tables: MINOR bin-packs small change (delta) files; MAJOR takes every file of a
      partition that is not already a single base file (merge-on-read needs all of them at once).
    """
    groups: list[list[DataFile]] = []
    for members in _by_partition(files):
        if meta.primary_key and kind == "major":
            if len(members) > 1 or any(f.kind is not FileKind.BASE for f in members):
                groups.append(members)
            continue
        if meta.primary_key:
            candidates = [f for f in members if f.kind is FileKind.CHANGES and f.size_bytes < target_file_bytes]
        elif kind == "major":
            candidates = members
        else:
            candidates = [f for f in members if f.size_bytes < target_file_bytes * 3 // 4 or f.deletion_vector]
        bin_: list[DataFile] = []
        size = 0
        for f in candidates:
            if bin_ and (size + f.size_bytes > target_file_bytes or len(bin_) >= MAX_GROUP_FILES):
                groups.append(bin_)
                bin_, size = [], 0
            bin_.append(f)
            size += f.size_bytes
        if bin_:
            groups.append(bin_)
    # a single clean file is already compact; one with a deletion vector is rewritten to apply it
    return [g for g in groups if len(g) > 1 or g[0].deletion_vector or (meta.primary_key and kind == "major")]


@dataclass(frozen=True)
class PartitionFiles:
    """What compaction thresholds look at, per partition."""

    partition: Mapping[str, Literal]
    files: int
    small_files: int
    #: primary-key tables: change (delta) files not yet merged into a base
    change_files: int
    size_bytes: int
    #: the newest version that added a file here (a partition written recently is not quiet)
    newest_version: int


def partition_files(snapshot: Snapshot, small_file_bytes: int) -> list[PartitionFiles]:
    """Per partition: files, small files, change files, bytes and the newest adding version; from a
    checkpoint's manifests without decoding the entries of partitions unchanged since (issue 32)."""
    return [
        PartitionFiles(
            partition,
            found.totals.files,
            found.totals.small_files,
            found.totals.change_files,
            found.totals.size_bytes,
            found.newest_version,
        )
        for partition, found in snapshot.partition_totals(small_file_bytes)
    ]


__all__ = [
    "KINDS",
    "MAX_GROUP_FILES",
    "CompactionGroup",
    "CompactionPlan",
    "PartitionFiles",
    "check_arguments",
    "files_in_scope",
    "group_app_id",
    "partition_files",
    "plan_compaction",
    "plan_groups",
]
