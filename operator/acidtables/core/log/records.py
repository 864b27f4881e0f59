"""The persisted records: data files, table metadata, commit records, the head.

A commit record holds everything the conflict policies need to judge it as a winning commit without
re-reading data (conflict-rules §17), so rebasing stays a metadata-level operation. Records are immutable
dataclasses; a rebase makes a new one with `dataclasses.replace`. The JSON form is the wire format in
etcd, commit files and checkpoints; `from_json(to_json(x)) == x` for every record, with one exception
by design: a DataFile's `added_version` is not stored with the file but is the version of the record
or checkpoint entry that holds it, which the reader passes to `DataFile.from_json`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from acidtables.core.canonical import canonical_json
from acidtables.core.expressions import ColumnBounds, Expr, Literal, expr_from_json
from acidtables.core.log.operations import IsolationLevel, OpClass, Operation, Policy
from acidtables.core.storage.storage import content_checksum

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ColumnStats:
    """Min/max of a column's non-null values in one file, and its null count (None: unknown)."""

    min: Literal = None
    max: Literal = None
    null_count: int | None = None

    def bounds(self, rows: int) -> ColumnBounds:
        has_nulls = self.null_count is None or self.null_count > 0
        only_nulls = self.null_count is not None and rows > 0 and self.null_count >= rows
        # NaN sorts above every number in Spark, and Spark's Parquet writer makes it the max of a column
        # that holds one: a NaN bound is no bound (a comparison with it is always false, and would prune
        # the file of every row Spark's `amount > 3` keeps)
        lower = None if isinstance(self.min, float) and math.isnan(self.min) else self.min
        upper = None if isinstance(self.max, float) and math.isnan(self.max) else self.max
        return ColumnBounds(lower, upper, has_nulls, only_nulls)


def partition_spec(partition: Mapping[str, Literal]) -> str | None:
    """`{"dt": "a", "p": 1}` as `dt=a,p=1`, the way conflict messages and partition hints spell it."""
    return ",".join(f"{k}={v}" for k, v in partition.items()) or None


class FileKind(StrEnum):
    """What a data file holds (design §4); stored in the log by value."""

    #: rows of a table without a primary key
    DATA = "data"
    #: a primary-key table's changed rows, upserts and tombstones, merged on read by key (MaxCompute's
    #: "delta files"; not to be confused with the delta conflict policy)
    CHANGES = "changes"
    #: a primary-key table's rows, one per key: what an overwrite or a major compaction writes
    BASE = "base"


@dataclass(frozen=True)
class DataFile:
    """One immutable data file as the log sees it."""

    #: path relative to the table location, or an absolute URI when outside it
    path: str
    #: partition column -> value; empty for an unpartitioned table
    partition: Mapping[str, Literal] = field(default_factory=dict)
    #: rows in the file, including rows its deletion vector hides
    rows: int = 0
    size_bytes: int = 0
    #: per-column statistics, for pruning and row-level conflict checks
    stats: Mapping[str, ColumnStats] = field(default_factory=dict)
    #: False for files a compaction or clustering wrote: same data, new layout (R5, D-15)
    data_change: bool = True
    kind: FileKind = FileKind.DATA
    #: sorted row positions hidden by a deletion vector; None when the file has none
    deletion_vector: tuple[int, ...] | None = None
    #: for compaction outputs: the input paths it was written from (D-06)
    lineage: tuple[str, ...] = ()
    #: True when the output's rows are exactly its inputs' live rows, in lineage order; this is what
    #: lets a deletion vector on an input be moved onto the output without reading data (D-25 row ids)
    ordered_lineage: bool = False
    #: the ID version that added this entry; set when the file is read from the log, None when staged
    added_version: int | None = None
    #: anything a layer above core keeps with the file, stored and never interpreted by core (the test
    #: suite's row tokens live here: tests/jobs.py)
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: a digest of the columns the file stores, names and Arrow types (`stored_columns_digest`), taken
    #: from its footer when its commit proved it; a reader whose table's columns have the same digest
    #: knows the file fits without reading its footer first. None for entries written before
    schema_digest: str | None = None

    @property
    def partition_spec(self) -> str | None:
        """The partition as conflict messages name it (`dt=2026-11-01`); None when unpartitioned."""
        return partition_spec(self.partition)

    @property
    def live_rows(self) -> int:
        return self.rows - len(self.deletion_vector or ())

    def partition_bounds(self) -> dict[str, ColumnBounds]:
        return {k: ColumnBounds.exact(v) for k, v in self.partition.items()}

    def bounds(self) -> dict[str, ColumnBounds]:
        """Partition values and column statistics, as `might_match` consumes them."""
        result = {k: s.bounds(self.rows) for k, s in self.stats.items()}
        result.update(self.partition_bounds())
        return result

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "partition": dict(self.partition),
            "rows": self.rows,
            "size_bytes": self.size_bytes,
        }
        if self.stats:
            out["stats"] = {k: [s.min, s.max, s.null_count] for k, s in self.stats.items()}
        if not self.data_change:
            out["data_change"] = False
        if self.kind is not FileKind.DATA:
            out["kind"] = self.kind.value
        if self.deletion_vector is not None:
            out["deletion_vector"] = list(self.deletion_vector)
        if self.lineage:
            out["lineage"] = list(self.lineage)
        if self.ordered_lineage:
            out["ordered_lineage"] = True
        if self.extra:
            out["extra"] = dict(self.extra)
        if self.schema_digest is not None:
            out["schema_digest"] = self.schema_digest
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any], added_version: int | None = None) -> DataFile:
        dv = data.get("deletion_vector")
        return DataFile(
            path=data["path"],
            partition=dict(data.get("partition") or {}),
            rows=int(data.get("rows", 0)),
            size_bytes=int(data.get("size_bytes", 0)),
            stats={k: ColumnStats(*v) for k, v in (data.get("stats") or {}).items()},
            data_change=bool(data.get("data_change", True)),
            kind=FileKind(data.get("kind", FileKind.DATA.value)),
            deletion_vector=tuple(dv) if dv is not None else None,
            lineage=tuple(data.get("lineage") or ()),
            ordered_lineage=bool(data.get("ordered_lineage", False)),
            added_version=added_version,
            extra=dict(data.get("extra") or {}),
            schema_digest=data.get("schema_digest"),
        )


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True


#: The table property that chooses how §13.1 rule 4 narrows a read set without row-level concurrency:
#: "partitions" (the rules' default: partition values only, D-22) or "statistics" (also the appended files'
#: min/max and null counts on data columns, which can only prove that no row matches, never miss one).
CONFLICT_DETECTION_PROPERTY = "acidtables.conflictDetection"
CONFLICT_DETECTION_MODES = ("partitions", "statistics")


@dataclass(frozen=True)
class TableMetadata:
    """A table's definition at some version; changed only by metadata commits (ALTER)."""

    table_id: str
    #: "namespace.name"
    name: str
    location: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()
    primary_key: tuple[str, ...] = ()
    conflict_policy: Policy = Policy.DELTA
    #: Delta only; None for the MaxCompute policies
    isolation_level: IsolationLevel | None = IsolationLevel.WRITE_SERIALIZABLE
    #: deletion vectors on; row-level concurrency is in effect when also unpartitioned (§1.2)
    row_level_concurrency: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    #: microseconds since the epoch
    created_at: int = 0

    @property
    def schema_ddl(self) -> str:
        return ", ".join(f"{c.name} {c.type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def column_types(self) -> dict[str, str]:
        """{name: type}: what the predicate parser needs to tell a literal Spark compares after a cast."""
        return {c.name: c.type for c in self.columns}

    @property
    def deletion_vectors(self) -> bool:
        return self.row_level_concurrency

    @property
    def rlc_in_effect(self) -> bool:
        """Row-level concurrency: deletion vectors on AND unpartitioned (conflict-rules §1.2, R2)."""
        return self.row_level_concurrency and not self.partition_by

    @property
    def conflict_detection(self) -> str:
        """ "partitions" or "statistics": see CONFLICT_DETECTION_PROPERTY."""
        return self.properties.get(CONFLICT_DETECTION_PROPERTY, "partitions")

    def to_json(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "name": self.name,
            "location": self.location,
            "columns": [[c.name, c.type, c.nullable] for c in self.columns],
            "partition_by": list(self.partition_by),
            "primary_key": list(self.primary_key),
            "conflict_policy": self.conflict_policy.value,
            "isolation_level": self.isolation_level.value if self.isolation_level else None,
            "row_level_concurrency": self.row_level_concurrency,
            "properties": dict(self.properties),
            "created_at": self.created_at,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> TableMetadata:
        level = data.get("isolation_level")
        return TableMetadata(
            table_id=data["table_id"],
            name=data["name"],
            location=data["location"],
            columns=tuple(Column(n, t, bool(nullable)) for n, t, nullable in data["columns"]),
            partition_by=tuple(data.get("partition_by") or ()),
            primary_key=tuple(data.get("primary_key") or ()),
            conflict_policy=Policy(data["conflict_policy"]),
            isolation_level=IsolationLevel(level) if level else None,
            row_level_concurrency=bool(data.get("row_level_concurrency", False)),
            properties=dict(data.get("properties") or {}),
            created_at=int(data.get("created_at", 0)),
        )


@dataclass(frozen=True)
class Protocol:
    """Reader/writer protocol versions; a change fails every concurrent writer (§13.1 rule 1)."""

    reader_version: int = 1
    writer_version: int = 1
    features: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "reader_version": self.reader_version,
            "writer_version": self.writer_version,
            "features": list(self.features),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Protocol:
        return Protocol(int(data["reader_version"]), int(data["writer_version"]), tuple(data.get("features", ())))


@dataclass(frozen=True)
class Scope:
    """The partitions a job targets (conflict-rules D-09). `partitions=None` means the whole table.

    `predicate` covers partitions the job's condition selects that did not exist when it read, so a
    concurrent commit creating such a partition still meets the job.
    """

    partitions: tuple[Mapping[str, Literal], ...] | None = None
    predicate: Expr | None = None

    @property
    def whole_table(self) -> bool:
        return self.partitions is None

    def contains(self, partition: Mapping[str, Literal]) -> bool:
        from acidtables.core.expressions import might_match

        if self.partitions is None:
            return True
        if any(dict(p) == dict(partition) for p in self.partitions):
            return True
        if self.predicate is not None:
            return might_match(self.predicate, {k: ColumnBounds.exact(v) for k, v in partition.items()})
        return False

    def describe(self) -> str | None:
        """The partition hint conflict messages print, e.g. `dt=2026-11-01`."""
        if self.partitions is None:
            return None
        names = [spec for p in self.partitions if (spec := partition_spec(p))]
        if not names:
            return None
        return "; ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
            "predicate": self.predicate.to_json() if self.predicate else None,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Scope:
        parts = data.get("partitions")
        pred = data.get("predicate")
        return Scope(
            partitions=None if parts is None else tuple(dict(p) for p in parts),
            predicate=expr_from_json(pred) if pred else None,
        )


@dataclass(frozen=True)
class CommitRecord:
    """One committed version, or a transaction's intent to become one (conflict-rules §17)."""

    txn_id: str
    #: ID version; for an intent, the version it will try to take next
    version: int
    #: the version the transaction pinned when it began
    read_version: int
    operation: Operation
    op_class: OpClass
    policy: Policy
    isolation_level: IsolationLevel | None
    #: wall-clock microseconds of the commit attempt that landed
    committed_at: int = 0
    #: microseconds; only for logical data changes, strictly increasing across the table (D-19, D-20)
    time_version: int | None = None
    scope: Scope = field(default_factory=Scope)
    #: predicates the transaction read the table with (full predicates; policies narrow them)
    read_predicates: tuple[Expr, ...] = ()
    #: paths of files the transaction read
    read_files: tuple[str, ...] = ()
    reads_whole_table: bool = False
    adds: tuple[DataFile, ...] = ()
    removes: tuple[DataFile, ...] = ()
    #: an append that read nothing from the table (seed 004 "commit without reading the table")
    blind_append: bool = False
    #: idempotent writers: application id -> version written (D-27)
    app_ids: Mapping[str, int] = field(default_factory=dict)
    metadata: TableMetadata | None = None
    protocol: Protocol | None = None
    #: free-form labels from the job (job name, user); shown in history
    user_metadata: Mapping[str, str] = field(default_factory=dict)
    #: what the job counted, in Delta's operationMetrics names (numUpdatedRows, ...); history shows them
    metrics: Mapping[str, int] = field(default_factory=dict)
    #: how many times the commit was rebased before it landed
    retries: int = 0
    #: the multi-table transaction this commit is one part of (Catalog.transaction()): an id its parts
    #: share, and the names of every table it committed, this one included; None and () for a commit of
    #: one table alone
    multi_txn_id: str | None = None
    multi_txn_tables: tuple[str, ...] = ()
    #: microseconds from the writer's commit() to sending the compare-and-swap that landed (its rebases
    #: and backoffs included; that last round trip cannot be, the record being what it writes). The
    #: commit's whole duration is the writer's `committed` event record (Services.report)
    commit_micros: int = 0

    @property
    def changes_data(self) -> bool:
        return any(f.data_change for f in self.adds) or any(f.data_change for f in self.removes)

    def removed_paths(self) -> frozenset[str]:
        return frozenset(f.path for f in self.removes)

    def to_json(self) -> dict[str, Any]:
        """The log entry. Fields at their default are left out (`from_json` restores them): etcd keeps a
        window of these per table, and a one-file append is a third smaller without its empty lists.
        Each optional field is looked at once and only a present one is converted: every commit encodes
        its record, and most records leave most of these fields at their default."""
        out: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "txn_id": self.txn_id,
            "version": self.version,
            "read_version": self.read_version,
            "operation": self.operation.value,
            "op_class": self.op_class.value,
            "policy": self.policy.value,
            "committed_at": self.committed_at,
            "adds": [f.to_json() for f in self.adds],
        }
        if self.isolation_level:
            out["isolation_level"] = self.isolation_level.value
        if self.time_version:
            out["time_version"] = self.time_version
        if self.scope.partitions is not None or self.scope.predicate is not None:  # not the default Scope()
            out["scope"] = self.scope.to_json()
        if self.read_predicates:
            out["read_predicates"] = [p.to_json() for p in self.read_predicates]
        if self.read_files:
            out["read_files"] = list(self.read_files)
        if self.reads_whole_table:
            out["reads_whole_table"] = True
        if self.removes:
            out["removes"] = [f.to_json() for f in self.removes]
        if self.blind_append:
            out["blind_append"] = True
        if self.app_ids:
            out["app_ids"] = dict(self.app_ids)
        if self.retries:
            out["retries"] = self.retries
        if self.commit_micros:
            out["commit_micros"] = self.commit_micros
        if self.metadata is not None:
            out["metadata"] = self.metadata.to_json()
        if self.protocol is not None:
            out["protocol"] = self.protocol.to_json()
        if self.user_metadata:
            out["user_metadata"] = dict(self.user_metadata)
        if self.metrics:
            out["metrics"] = dict(self.metrics)
        if self.multi_txn_id:
            out["multi_txn_id"] = self.multi_txn_id
        if self.multi_txn_tables:
            out["multi_txn_tables"] = list(self.multi_txn_tables)
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> CommitRecord:
        version = int(data["version"])
        level = data.get("isolation_level")
        return CommitRecord(
            txn_id=data["txn_id"],
            version=version,
            read_version=int(data["read_version"]),
            operation=Operation(data["operation"]),
            op_class=OpClass(data["op_class"]),
            policy=Policy(data["policy"]),
            isolation_level=IsolationLevel(level) if level else None,
            committed_at=int(data.get("committed_at", 0)),
            time_version=data.get("time_version"),
            scope=Scope.from_json(data.get("scope") or {}),
            read_predicates=tuple(expr_from_json(p) for p in data.get("read_predicates", ())),
            read_files=tuple(data.get("read_files", ())),
            reads_whole_table=bool(data.get("reads_whole_table", False)),
            adds=tuple(DataFile.from_json(f, version) for f in data.get("adds", ())),
            removes=tuple(DataFile.from_json(f) for f in data.get("removes", ())),
            blind_append=bool(data.get("blind_append", False)),
            app_ids={k: int(v) for k, v in (data.get("app_ids") or {}).items()},
            metadata=TableMetadata.from_json(data["metadata"]) if data.get("metadata") else None,
            protocol=Protocol.from_json(data["protocol"]) if data.get("protocol") else None,
            user_metadata=dict(data.get("user_metadata") or {}),
            metrics={k: int(v) for k, v in (data.get("metrics") or {}).items()},
            retries=int(data.get("retries", 0)),
            commit_micros=int(data.get("commit_micros", 0)),
            multi_txn_id=data.get("multi_txn_id"),
            multi_txn_tables=tuple(data.get("multi_txn_tables", ())),
        )


_Record = TypeVar("_Record", CommitRecord, DataFile)
#: the fields `evolve` may change, per record class
_FIELD_NAMES: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in fields(cls)) for cls in (CommitRecord, DataFile)
}


def evolve(record: _Record, **changes: Any) -> _Record:
    """`dataclasses.replace(record, **changes)` for a CommitRecord or a DataFile, at a fraction of its cost:
    a copy of the record's fields with `changes` over them. Both are frozen, every field is an init field
    and neither checks anything in `__init__` (no `__post_init__`), so the copy is the record `replace`
    makes; `replace` instead walks every field in Python and sets each again through
    `object.__setattr__`, which for the 27 fields of a CommitRecord is a large share of a commit's
    Python (each attempt's record, each part of a multi-table commit, each file a new snapshot holds:
    83,000 instructions against 16,000 for two fields, measured with callgrind)."""
    cls = type(record)
    if not _FIELD_NAMES[cls].issuperset(changes):
        unknown = sorted(set(changes) - _FIELD_NAMES[cls])
        raise TypeError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
    copy: _Record = cls.__new__(cls)
    copy.__dict__.update(record.__dict__, **changes)
    return copy


@dataclass(frozen=True)
class Head:
    """The table's newest version; the key every commit compares and swaps."""

    version: int
    #: time version of the newest data-changing commit (microseconds), None before the first one
    time_version: int | None
    txn_id: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "time_version": self.time_version, "txn_id": self.txn_id}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Head:
        return Head(int(data["version"]), data.get("time_version"), data["txn_id"])


def to_datetime(time_us: int | None) -> datetime | None:
    return None if time_us is None else datetime.fromtimestamp(time_us / 1_000_000, tz=UTC)


@dataclass(frozen=True)
class CommitInfo:
    """What a commit achieved."""

    #: the ID version the commit took; for a skipped commit, the version that already has its effect
    version: int
    #: commit time of a data change; None for compaction, clustering and metadata commits
    time_version: datetime | None
    #: how many times the commit was rebased onto concurrent commits before it landed
    retries: int
    txn_id: str
    #: what ran; `operation.display` spells it as history does ("INSERT INTO")
    operation: Operation
    #: True when no version was added: an idempotent write (app id, version) had already been applied,
    #: or an UPDATE, DELETE or MERGE at Serializable changed nothing (committer.records_nothing)
    skipped: bool = False
    files_added: int = 0
    files_removed: int = 0
    #: True for an append that read nothing of the table (Delta's isBlindAppend, conflict-rules §1.3 INS)
    is_blind_append: bool = False
    #: what the job did, in Delta's operationMetrics names (numUpdatedRows, numDeletedRows,
    #: numTargetRowsInserted, ...): set by the Spark operations, which counted them; kept on a skipped
    #: commit (an UPDATE that matched nothing says numUpdatedRows 0)
    metrics: Mapping[str, int] = field(default_factory=dict)
    #: the multi-table transaction this commit was one part of (Catalog.transaction()), else None
    multi_txn_id: str | None = None


#: a log entry's (and a commit file's) checksum of the rest of it: a digit flipped in etcd or on disk
#: would otherwise read back as another, well-formed record
CHECKSUM_FIELD = "checksum"
#: hex digits of the SHA-256 (`storage.content_checksum`) an entry keeps: 64 bits tell damage from
#: content with certainty to spare (it guards against accidents, not against whoever can write etcd),
#: and every entry in etcd's window is 48 bytes shorter than with all 64 digits
_CHECKSUM_DIGITS = 16
#: the fields an entry written before checksums may hold: the record's own, and a commit file's pointer
_UNSEALED_FIELDS = frozenset(f.name for f in fields(CommitRecord)) | {"format", "commit_file"}


def seal_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """`entry` with its checksum, as the committer writes it to etcd or to a commit file."""
    return {**entry, CHECKSUM_FIELD: content_checksum(entry)[:_CHECKSUM_DIGITS]}


def sealed_bytes(entry: Mapping[str, Any]) -> bytes:
    """`seal_entry(entry)` encoded, with `entry` encoded once instead of twice: the checksum is taken over
    the canonical spelling (`canonical_json`), and that same spelling is written, the checksum added as its
    last field. A reader checks the checksum over the entry it parsed (`unseal_entry`), so the order of
    the keys in the bytes means nothing to it. The commit path encodes every record this way: encoding
    is most of the Python a commit spends on its record (bench/README.md, multi-table commits)."""
    if CHECKSUM_FIELD in entry:
        raise ValueError(f"an entry to seal already has a {CHECKSUM_FIELD!r} field")
    body = canonical_json(entry)
    digest = hashlib.sha256(body).hexdigest()[:_CHECKSUM_DIGITS]
    separator = b"," if len(body) > 2 else b""  # "{}": nothing before the checksum
    return b'%s%s"%s":"%s"}' % (body[:-1], separator, CHECKSUM_FIELD.encode(), digest.encode())


def unseal_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """`entry` without its checksum, once the checksum proves the rest; ValueError saying why not. An
    entry without a checksum was written before there were checksums, so it can hold only the fields
    those versions wrote (a damaged key name, the checksum's own included, is found that way)."""
    rest = {k: v for k, v in entry.items() if k != CHECKSUM_FIELD}
    if CHECKSUM_FIELD in entry:
        if entry[CHECKSUM_FIELD] != content_checksum(rest)[:_CHECKSUM_DIGITS]:
            raise ValueError("its checksum does not match its content")
        return rest
    unknown = sorted(set(rest) - _UNSEALED_FIELDS)
    if unknown:
        raise ValueError(f"it has no checksum and fields acidtables never writes: {', '.join(map(repr, unknown[:5]))}")
    return rest
