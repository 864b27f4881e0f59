"""A transaction: pin a snapshot, stage files, record what was read, then commit or abort (design §3, §5).

This is the two-phase API every operation goes through: the Spark layer (or a test) begins a
transaction, writes its files under `staging_dir`, tells the transaction what it read and wrote, and
only then commits. Nothing is visible before the commit; `abort()` deletes the staged files. Tests
interleave two transactions exactly as the seeds' tables describe by ordering these calls.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from typing import Protocol as TypingProtocol

from acidtables.core import events
from acidtables.core.commit.committer import commit
from acidtables.core.commit.file_checks import prove_new_file, prove_re_added_file
from acidtables.core.commit.multi_commit import PendingCommit
from acidtables.core.commit.presence import find_missing, listed
from acidtables.core.errors import (
    AcidTablesError,
    CorruptMetadataError,
    DataFilesMissingError,
    InvalidArgumentError,
    StorageUnavailableError,
    TableNotFoundError,
    TransactionClosedError,
)
from acidtables.core.expressions import SUBSET, Expr, Literal, Or, read_predicate, restrict_to_columns
from acidtables.core.log.operations import REWRITES, OpClass, Operation, classify
from acidtables.core.log.records import (
    Column,
    CommitInfo,
    CommitRecord,
    DataFile,
    FileKind,
    Protocol,
    Scope,
    TableMetadata,
)
from acidtables.core.log.services import Services
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.mirror import check_mirror
from acidtables.core.schema.ddl import check_properties, parse_schema
from acidtables.core.schema.partition_values import log_partition_value
from acidtables.core.storage.storage import Storage

logger = logging.getLogger(__name__)

#: operations whose jobs add files and remove none: their scan() is a read only, so a predicate read in
#: part widens it; every other operation's scan() chooses files to remove, and refuses one (issue 41)
_KEEPS_FILES = frozenset({Operation.INSERT_INTO, Operation.ALTER, Operation.UPGRADE_PROTOCOL})


@dataclass
class _Reads:
    predicates: list[Expr] = field(default_factory=list)
    files: dict[str, None] = field(default_factory=dict)  # ordered set
    whole_table: bool = False
    #: the oldest version a recorded read saw, when older than the transaction's (record_read)
    as_of: int | None = None


class Group(TypingProtocol):
    """The multi-table transaction a Transaction may be part of, as the part sees it."""

    @property
    def id(self) -> str: ...

    def abort(self) -> None: ...


class _Staged:
    """The transaction's staged files, as the committer sees them (committer.Staged)."""

    def __init__(self, transaction: Transaction) -> None:
        self._transaction = transaction

    def discard(self, keep: Iterable[str]) -> None:
        self._transaction.discard_staged(keep)

    def release(self) -> None:
        self._transaction._forget_inflight()

    def stop_registering(self) -> bool:
        return self._transaction._stop_registering()


class Transaction:
    """One job on one table. Create it with `Table.begin(operation)`."""

    def __init__(
        self,
        services: Services,
        snapshot: Snapshot,
        operation: Operation,
        *,
        txn_id: str,
        head_revision: int,
        user_metadata: Mapping[str, str] | None = None,
        registered: Mapping[str, Any] | None = None,
    ) -> None:
        self._services = services
        #: what this transaction registers as its in-flight key once it has run for a while (None: it
        #: was begun in another process, which registers it)
        self._registered = dict(registered) if registered is not None else None
        #: "pending" until the registrar registers it, then "registered"; "closed" once it ended
        self._in_flight = "pending" if registered is not None else "closed"
        self._in_flight_lock = threading.Lock()
        self.snapshot = snapshot
        #: etcd mod revision of the head at the read version: what the first compare-and-swap compares
        self.head_revision = head_revision
        self.operation = operation
        self.txn_id = txn_id
        self.started_at = time.monotonic()
        self._storage = services.storage(snapshot.metadata.location)
        self._user_metadata = dict(user_metadata or {})
        self._adds: dict[str, DataFile] = {}
        self._removes: dict[str, DataFile] = {}
        self._reads = _Reads()
        self._scope: Scope | None = None
        self._app_ids: dict[str, int] = {}
        self._metrics: dict[str, int] = {}
        self._new_metadata: TableMetadata | None = None
        self._new_protocol: Protocol | None = None
        self._closed = False
        self._committed: CommitInfo | None = None
        #: the multi-table transaction this one is a part of (join_group), which commits and aborts it
        self._group: Group | None = None
        logger.debug(
            "%s: began %s, txn %s, read version %d", self.table_name, operation.display, self.txn_id, snapshot.version
        )

    # --- what the transaction is ---------------------------------------------------------------------

    @property
    def table_name(self) -> str:
        return self.snapshot.metadata.name

    @property
    def metadata(self) -> TableMetadata:
        return self.snapshot.metadata

    @property
    def target_metadata(self) -> TableMetadata:
        """The metadata this transaction will commit: the pinned one, or its pending change."""
        return self._new_metadata or self.snapshot.metadata

    @property
    def read_version(self) -> int:
        return self.snapshot.version

    @property
    def staging_dir(self) -> str:
        """Absolute path or URI where this transaction writes its data files; nobody else writes there."""
        return self._storage.absolute(self._storage.staging_dir(self.txn_id))

    @property
    def services(self) -> Services:
        """The catalog's services this transaction commits through."""
        return self._services

    @property
    def storage(self) -> Storage:
        """The table location, for layers that write data files (they write only under `staging_dir`)."""
        return self._storage

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self, method: str) -> None:
        if self._closed:
            state = "committed" if self._committed else "aborted"
            raise TransactionClosedError(
                f"{method}(): transaction {self.txn_id} on {self.table_name} is already {state}"
            )

    # --- staging -------------------------------------------------------------------------------------

    def _coerce_file(self, file: DataFile | Mapping[str, Any], method: str) -> DataFile:
        if isinstance(file, Mapping):
            try:
                file = DataFile.from_json(file)
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidArgumentError(f"{method}(): {file!r} is not a data file description ({exc})") from None
        if not isinstance(file, DataFile):
            raise InvalidArgumentError(f"{method}(): expected DataFile or a mapping, found {type(file).__name__}")
        if not file.path:
            raise InvalidArgumentError(f"{method}(): a data file needs a path")
        if file.rows < 0 or file.size_bytes < 0:
            raise InvalidArgumentError(f"{method}(): {file.path} has a negative row count or size")
        partition_by = set(self.metadata.partition_by)
        if set(file.partition) != partition_by:
            raise InvalidArgumentError(
                f"{method}(): {file.path} has partition values for {sorted(file.partition)} but "
                f"{self.table_name} is partitioned by {sorted(partition_by)}"
            )
        # one spelling per value (2026 and "2026" of an INT column are one partition): conflict detection
        # and a primary-key table's merge compare partitions as the log spells them
        try:
            spelled = {c: log_partition_value(self.metadata, c, v) for c, v in file.partition.items()}
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{method}(): {file.path}: {exc}") from None
        if any(type(spelled[c]) is not type(v) or spelled[c] != v for c, v in file.partition.items()):
            file = replace(file, partition=spelled)
        if self.metadata.primary_key and file.kind is FileKind.DATA:
            # a plain file given to a primary-key table holds changed rows (upserts unless it says otherwise)
            file = replace(file, kind=FileKind.CHANGES)
        elif not self.metadata.primary_key and file.kind is FileKind.CHANGES:
            raise InvalidArgumentError(
                f"{method}(): {file.path} is a changes file (merge-on-read), which only a primary-key table has; "
                f"{self.table_name} has no primary key (leave kind out)"
            )
        if file.live_rows <= 0:
            raise InvalidArgumentError(
                f"{method}(): {file.path} has no live rows; a job never adds an empty file (to drop every row of "
                "a file, remove it)"
            )
        return replace(file, path=self._storage.relative(file.path), added_version=None)

    def add_files(self, files: Iterable[DataFile | Mapping[str, Any]]) -> None:
        """Stage data files this transaction wrote (under `staging_dir`, or anywhere with unique names)."""
        self._check_open("add_files")
        coerced = [self._coerce_file(raw, "add_files") for raw in files]
        live_entries = self.snapshot.find([f.path for f in coerced])
        for file in coerced:
            live = live_entries.get(file.path)
            if file.deletion_vector is not None and not self.target_metadata.deletion_vectors:
                raise InvalidArgumentError(
                    f"add_files(): {file.path} has a deletion vector, but {self.table_name} does not use them "
                    "(row_level_concurrency is off): readers of its Delta mirror and other engines would see "
                    "the rows it hides. Write the file without the deleted rows instead"
                )
            if file.path in self._adds or (live is not None and file.path not in self._removes):
                raise InvalidArgumentError(
                    f"add_files(): {file.path} is already in {self.table_name}; files are immutable, so a "
                    "new file needs a new name (a deletion vector change removes the old entry first)"
                )
            if live is not None:
                prove_re_added_file(live, file, "add_files")
                digest = live.schema_digest  # the same bytes
            else:
                # the digest is always the footer's, never what the caller's entry said
                digest = prove_new_file(self._storage, file, self.txn_id, self.target_metadata, "add_files")
            # a rewrite's file holds the same data in a new layout (R5, D-15)
            data_change = file.data_change and self.operation not in REWRITES
            file = replace(file, schema_digest=digest, data_change=data_change)
            self._adds[file.path] = file
        self._publish_scope()

    def record_metrics(self, metrics: Mapping[str, int]) -> None:
        """What the job counted (Delta's operationMetrics names: numUpdatedRows, ...), kept in its
        commit record for history."""
        self._check_open("record_metrics")
        if not isinstance(metrics, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in metrics.items()
        ):
            raise InvalidArgumentError(f"record_metrics(): expected {{name: whole number}}, found {metrics!r}")
        self._metrics.update(metrics)

    def add_earlier_files(self, files: Sequence[DataFile], *, version: int) -> None:
        """Make entries of an earlier `version` of this table live again, as they were (a restore):
        files the table once had, so not new ones to prove, but each must still hold its recorded bytes.
        Raises DataFilesMissingError naming every one that is gone or changed size (vacuum deletes the
        files only old versions need), adding nothing."""
        self._check_open("add_earlier_files")
        entries = [replace(f, path=self._storage.relative(f.path), added_version=None) for f in files]
        live = self.snapshot.find([f.path for f in entries])
        for file in entries:
            if file.path in self._adds or (file.path in live and file.path not in self._removes):
                raise InvalidArgumentError(
                    f"add_earlier_files(): {file.path} is already in {self.table_name} (remove its current entry first)"
                )
        gone = [f.path for f in entries if self._storage.file_size(f.path) != f.size_bytes]
        if gone:
            raise DataFilesMissingError(
                f"{self.operation.display} of {self.table_name} to version {version} needs {len(gone)} data file(s) "
                f"that are gone from its location or changed: {listed(self._storage, gone)}. Nothing was committed; "
                "vacuum deletes the files only versions older than its retention need, so pick a version within it "
                "(history())",
                table=self.table_name,
                version=version,
                paths=tuple(self._storage.absolute(p) for p in gone),
            )
        for file in entries:
            self._adds[file.path] = replace(file, data_change=True)
        self._publish_scope()

    def remove_files(self, files: Iterable[DataFile | str]) -> None:
        """Mark files of the pinned snapshot as removed (rewritten, overwritten, compacted away)."""
        self._check_open("remove_files")
        paths = [self._storage.relative(item.path if isinstance(item, DataFile) else str(item)) for item in files]
        live_entries = self.snapshot.find(paths)
        for path in paths:
            current = live_entries.get(path)
            if current is None:
                raise InvalidArgumentError(
                    f"remove_files(): {path} is not an active file of {self.table_name} at version {self.read_version}"
                )
            if path in self._adds:
                raise InvalidArgumentError(f"remove_files(): {path} was added by this transaction")
            self._removes[path] = replace(current, data_change=self.operation not in REWRITES)
        self._publish_scope()

    # --- what was read (conflict-rules §17) ---------------------------------------------------------

    def _parse(self, predicate: str | Expr | None, method: str, *, exact: bool = False) -> Expr | None:
        """The predicate as a tree. A string core reads only in part widens to what it does read (None:
        the whole table), with a warning; with `exact` it is refused instead (issue 41: a copy-on-write
        job removes what `scan` returns, so a predicate read as the whole table removed every file)."""
        if predicate is None or isinstance(predicate, Expr):
            return predicate
        if not isinstance(predicate, str):
            raise InvalidArgumentError(
                f"{method}(): predicate must be a SQL string or an Expr, found {type(predicate).__name__}"
            )
        reading = read_predicate(predicate, self.metadata.column_types)
        if reading.complete:
            return reading.expr
        if exact:
            raise InvalidArgumentError(
                f"{method}(): cannot read all of the predicate {predicate!r} on {self.table_name}: "
                f"{reading.describe_left_out()}. Core reads {SUBSET}. In a {self.operation.display} "
                "transaction the files it returns are the ones a job removes, so they would be more than the "
                "predicate selects; nothing was read. Pass what core reads and filter the rows yourself, or "
                "scan() with no predicate for every file"
            )
        widened = "the whole table" if reading.expr is None else "only the rest of it"
        logger.warning(
            "%s: txn %s (read version %d): %s() cannot read %s of %r, so it counts as reading %s",
            self.table_name,
            self.txn_id,
            self.read_version,
            method,
            reading.describe_left_out(),
            predicate,
            widened,
        )
        return reading.expr

    def parse(self, predicate: str | Expr | None) -> Expr | None:
        """The predicate as core understands it, or None (read as "the whole table"). Of a string read
        in part, the part it reads (`read_predicate` says what is left out); nothing is read here."""
        if isinstance(predicate, str):
            return read_predicate(predicate, self.metadata.column_types).expr
        return self._parse(predicate, "parse")

    def scan(self, predicate: str | Expr | None = None) -> list[DataFile]:
        """The pinned snapshot's files that might match `predicate`, recorded as read.

        No predicate is a read of the whole table. A SQL string must be read whole (docs/python-api.md
        says which predicates are) in a transaction that can remove files, since a job removes what
        this returns: anything left out raises InvalidArgumentError naming it. In an INSERT INTO (a job
        reading its own table) it only widens the read, with a warning, which is conservative: it can
        only add conflicts, never hide one.
        """
        self._check_open("scan")
        expr = self._parse(predicate, "scan", exact=self.operation not in _KEEPS_FILES)
        files = self.snapshot.prune(expr)
        self.record_read(predicate=expr, files=files, whole_table=expr is None)
        return files

    def record_read(
        self,
        *,
        predicate: str | Expr | None = None,
        files: Iterable[DataFile | str] = (),
        whole_table: bool = False,
        as_of_version: int | None = None,
    ) -> None:
        """Record reads done outside `scan` (e.g. a Spark job that filtered files itself).

        `as_of_version`: the version those reads saw, when older than this transaction's (a DataFrame
        read before the transaction began). The commit then judges the commits since that version
        against the reads too, as it judges concurrent ones: they are already in this transaction's
        base, but the job did not see them."""
        self._check_open("record_read")
        if as_of_version is not None:
            if not isinstance(as_of_version, int) or isinstance(as_of_version, bool) or as_of_version < 0:
                raise InvalidArgumentError(
                    f"record_read(): as_of_version must be a whole number 0 or more, found {as_of_version!r}"
                )
            if as_of_version < self.read_version:
                earliest = self._reads.as_of
                self._reads.as_of = as_of_version if earliest is None else min(earliest, as_of_version)
        if isinstance(predicate, str):
            parsed = self._parse(predicate, "record_read")
            if parsed is None:
                whole_table = True
            predicate = parsed
        if predicate is not None:
            self._reads.predicates.append(predicate)
        self._reads.whole_table = self._reads.whole_table or whole_table
        if self._reads.whole_table:
            # A read of the whole table conflicts with any removal (rule 5) and scopes the whole table, so
            # the files it read add nothing; at a million files they would fill the commit record.
            self._reads.files.clear()
            return
        for f in files:
            self._reads.files[self._storage.relative(f.path if isinstance(f, DataFile) else str(f))] = None

    def set_scope(
        self, partitions: Sequence[Mapping[str, Literal]] | None, predicate: str | Expr | None = None
    ) -> None:
        """The partitions this job targets (conflict-rules D-09); None means the whole table.

        Without a call, the scope is derived at commit: the partitions of the files added, removed and
        read, plus the partition part of the read predicates.
        """
        self._check_open("set_scope")
        partition_by = set(self.metadata.partition_by)
        if partitions is not None:
            for p in partitions:
                if set(p) != partition_by:
                    raise InvalidArgumentError(
                        f"set_scope(): partition {dict(p)} does not name exactly the partition columns "
                        f"{sorted(partition_by)} of {self.table_name}"
                    )
        self._scope = Scope(
            None if partitions is None else tuple(dict(p) for p in partitions), self._parse(predicate, "set_scope")
        )
        self._publish_scope()

    def _publish_scope(self) -> None:
        """Add the partitions this transaction writes to its in-flight registration, once they are known
        or grow, so the operator's automatic compaction can pick what cannot lose to it (design §6).
        Before the registrar has registered the transaction this only updates what it will register.
        Advisory: the conflict rules still decide every commit, so a failure here is only logged."""
        if self._registered is None or not self.metadata.partition_by:
            return  # registered elsewhere, or unpartitioned: the key already means the whole table
        try:
            scope = self._scope if self._scope is not None else self._derived_scope()
            partitions = None
            if scope.partitions is not None:  # values of any type, NULL included: order by their JSON
                partitions = sorted(scope.partitions, key=lambda p: json.dumps(p, sort_keys=True, default=str))
            published = self._registered.get("partitions")
            if partitions == published or (partitions == [] and published is None):
                return
            self._registered["partitions"] = partitions
            with self._in_flight_lock:
                if self._in_flight == "registered":
                    self._put_registration()
        except Exception as exc:  # the operator then treats the transaction as touching any partition
            logger.info("%s: could not publish the scope of txn %s (%s)", self.table_name, self.txn_id, exc)

    def register_in_flight(self) -> None:
        """Register this still running transaction in etcd (the registrar calls this). A transaction that
        ended first is never registered, and the registration is refused once it has committed."""
        with self._in_flight_lock:
            if self._in_flight != "pending":
                return
            self._in_flight = "registered" if self._put_registration() else "closed"

    def _put_registration(self) -> bool:
        assert self._registered is not None
        info = {**self._registered, "read_version": self.read_version}
        return self._services.coordinator.register_inflight(
            self.metadata.table_id, self.txn_id, info, self._services.settings.commit.lease_ttl_seconds
        )

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Make the write idempotent: (app_id, version) is applied at most once (D-27)."""
        self._check_open("set_app_transaction")
        if not app_id or not isinstance(app_id, str):
            raise InvalidArgumentError("set_app_transaction(): app_id must be a non-empty string")
        if not isinstance(version, int) or version < 0:
            raise InvalidArgumentError(f"set_app_transaction(): version must be a non-negative int, found {version!r}")
        self._app_ids[app_id] = version

    def applied_at(self, app_id: str, version: int) -> int | None:
        """The table version that already holds version `version` (or a later one) of application
        `app_id`, as of this transaction's snapshot; None when the write is new. A writer asks before it
        writes anything, so a repeat costs no data written (commit skips it in any case, D-27)."""
        recorded = self.snapshot.app_ids.get(app_id)
        return recorded[1] if recorded is not None and recorded[0] >= version else None

    def update_metadata(
        self,
        *,
        add_columns: str | Sequence[Column] | None = None,
        properties: Mapping[str, str] | None = None,
        isolation_level: str | None = None,
        method: str = "alter_table",
    ) -> None:
        """A metadata change (ALTER, or a write's schema evolution); it fails every overlapping write
        (seed 004, D-13, D-32). `method` is the call errors name (`insert_into` for merge_schema=True)."""
        self._check_open("update_metadata")
        from acidtables.core.log.operations import IsolationLevel, Policy

        current = self._new_metadata or self.metadata
        changes: dict[str, Any] = {}
        if add_columns:
            new = parse_schema(add_columns, method=method)
            existing = {c.name.lower() for c in current.columns}
            clash = [c.name for c in new if c.name.lower() in existing]
            if clash:
                raise InvalidArgumentError(f"{method}(): column(s) {clash} already exist in {self.table_name}")
            changes["columns"] = current.columns + tuple(Column(c.name, c.type, True) for c in new)
        if properties:
            changed = check_properties(properties, current.conflict_policy, method=method)
            changes["properties"] = {**current.properties, **changed}
        if isolation_level is not None:
            if current.conflict_policy is not Policy.DELTA:
                raise InvalidArgumentError(
                    f"{method}(): isolation_level applies to the delta policy only; {self.table_name} uses "
                    f"{current.conflict_policy.value}"
                )
            try:
                changes["isolation_level"] = IsolationLevel(isolation_level)
            except ValueError:
                raise InvalidArgumentError(
                    f"{method}(): isolation_level={isolation_level!r}; use Serializable or WriteSerializable"
                ) from None
        if not changes:
            raise InvalidArgumentError(
                f"{method}(): nothing to change; give add_columns, properties or isolation_level"
            )
        updated = replace(current, **changes)
        if properties:
            check_mirror(updated, self.storage, method=method)
        self._new_metadata = updated

    def upgrade_protocol(
        self, *, reader_version: int | None = None, writer_version: int | None = None, features: Sequence[str] = ()
    ) -> None:
        self._check_open("upgrade_protocol")
        current = self._new_protocol or self.snapshot.protocol
        self._new_protocol = Protocol(
            reader_version or current.reader_version,
            writer_version or current.writer_version,
            tuple(sorted(set(current.features) | set(features))),
        )

    # --- the intent ----------------------------------------------------------------------------------

    @property
    def reads_table(self) -> bool:
        return bool(self._reads.predicates or self._reads.files or self._reads.whole_table)

    def _derived_scope(self) -> Scope:
        meta = self.metadata
        if not meta.partition_by:
            return Scope()
        if self._reads.whole_table:
            return Scope()
        if self.operation in (Operation.TRUNCATE, Operation.INSERT_OVERWRITE) and not (self._adds or self._removes):
            return Scope()
        partitions: dict[tuple[Any, ...], dict[str, Any]] = {}
        for f in [*self._adds.values(), *self._removes.values()]:
            partitions.setdefault(tuple(sorted(f.partition.items())), dict(f.partition))
        if self._reads.files:
            for read in self.snapshot.find(list(self._reads.files)).values():
                if read is not None:
                    partitions.setdefault(tuple(sorted(read.partition.items())), dict(read.partition))
        narrowed = [restrict_to_columns(p, frozenset(meta.partition_by)) for p in self._reads.predicates]
        predicate = None if not narrowed else (narrowed[0] if len(narrowed) == 1 else Or(tuple(narrowed)))
        return Scope(tuple(partitions.values()), predicate)

    def intent(self, *, multi_txn_id: str | None = None, multi_txn_tables: tuple[str, ...] = ()) -> CommitRecord:
        """The commit record this transaction would write now (before any rebase); as one part of the
        multi-table transaction `multi_txn_id` over `multi_txn_tables` when given (pending_commit)."""
        meta = self.metadata
        blind = self.operation is Operation.INSERT_INTO and not self.reads_table and not self._removes
        op_class = classify(self.operation, meta.conflict_policy, read_table=self.reads_table)
        if self._new_protocol is not None:
            op_class = OpClass.PROTO
        return CommitRecord(
            txn_id=self.txn_id,
            version=self.read_version + 1,
            read_version=self.read_version,
            operation=self.operation,
            op_class=op_class,
            policy=meta.conflict_policy,
            isolation_level=meta.isolation_level,
            scope=self._scope if self._scope is not None else self._derived_scope(),
            read_predicates=tuple(self._reads.predicates),
            read_files=tuple(self._reads.files),
            reads_whole_table=self._reads.whole_table,
            adds=tuple(self._adds.values()),
            removes=tuple(self._removes.values()),
            blind_append=blind,
            app_ids=dict(self._app_ids),
            metadata=self._new_metadata,
            protocol=self._new_protocol,
            user_metadata=self._user_metadata,
            metrics=dict(self._metrics),
            multi_txn_id=multi_txn_id,
            multi_txn_tables=multi_txn_tables,
        )

    # --- ending --------------------------------------------------------------------------------------

    def join_group(self, group: Group) -> None:
        """Make this transaction one part of a multi-table transaction: it commits only with the others
        (its own commit() is refused) and aborting it aborts them all."""
        self._check_open("join_group")
        if self._group is not None:
            raise InvalidArgumentError(f"{self!r} is already part of multi-table transaction {self._group.id}")
        self._group = group

    def pending_commit(self, multi_txn_id: str, tables: tuple[str, ...]) -> PendingCommit:
        """What the multi-table commit `multi_txn_id` over `tables` needs of this part, its staged files
        proved still present (a missing one closes this transaction and raises, as commit() would). The
        intent names the multi-table transaction from the start, so the commit need not copy it to."""
        self._check_open("commit")
        self._prove_adds_present()
        return PendingCommit(
            self.intent(multi_txn_id=multi_txn_id, multi_txn_tables=tables),
            self.snapshot,
            self.head_revision,
            _Staged(self),
            self._reads.as_of,
        )

    def ended(self, info: CommitInfo | None) -> None:
        """The multi-table commit ended this part: committed as `info`, or not (None)."""
        self._closed = True
        self._committed = info
        with self._in_flight_lock:  # never registered from now on
            if info is not None or self._in_flight == "pending":
                self._in_flight = "closed"

    def commit(self) -> CommitInfo:
        """Validate against concurrent commits and make this transaction's changes visible, atomically.

        Raises a ConcurrentModificationException subclass when a concurrent commit conflicts (nothing
        is then visible and the staged files are deleted), CommitRetriesExhausted, CoordinatorUnavailable
        or CommitOutcomeUnknown.
        """
        self._check_open("commit")
        if self._group is not None:
            raise InvalidArgumentError(
                f"commit(): {self.operation.display} on {self.table_name} is one part of multi-table transaction "
                f"{self._group.id}, which commits all its tables at once: call its commit() (or leave its with block)"
            )
        self._prove_adds_present()
        try:
            info = commit(
                self._services,
                self.intent(),
                snapshot=self.snapshot,
                expected_revision=self.head_revision,
                staged=_Staged(self),
                reads_since=self._reads.as_of,
            )
        except CorruptMetadataError as exc:
            self._closed = True
            raise CorruptMetadataError(
                f"table {self.table_name} is damaged, so {self.operation.display} (txn {self.txn_id}) was not "
                f"committed: {exc}",
                key=exc.key,
                table=self.table_name,
            ) from None
        except BaseException:
            self._closed = True
            with self._in_flight_lock:  # ended, whatever the outcome: never registered from now on
                if self._in_flight == "pending":
                    self._in_flight = "closed"
            raise
        self._closed = True
        self._committed = info
        with self._in_flight_lock:  # the compare-and-swap deleted any registration; none comes after
            self._in_flight = "closed"
        return info

    def _raise_if_dropped(self) -> None:
        """Files vanish with their table (drop with delete_data): then the drop is what the caller must
        hear, as the compare-and-swap would have said. A head read, on this failure path only."""
        try:
            self._services.coordinator.read_head(self.metadata.table_id)
        except LookupError:
            raise TableNotFoundError(
                f"{self.table_name} was dropped while {self.operation.display} was running"
            ) from None

    def _prove_adds_present(self) -> None:
        """Re-prove, just before the compare-and-swap, that every file this transaction adds new still
        exists: `add_files` proved it when it was staged, but a file deleted since (by hand, by a
        cleanup that misjudged it, by a lifecycle rule) would otherwise be committed, and every read of
        the table would then fail. One stat per file locally; one listing of the staging directory on
        an object store (bench/README.md). A failure closes the transaction and commits nothing."""
        live = self.snapshot.find(list(self._adds))
        new = [path for path in self._adds if path not in live]
        if not new:
            return
        try:
            gone = find_missing(
                self._storage,
                new,
                under=self._storage.staging_dir(self.txn_id),
                action=f"commit(): {self.operation.display} on {self.table_name} (txn {self.txn_id})",
            )
        except StorageUnavailableError:
            self.end_uncommitted()
            raise
        if gone:
            self.end_uncommitted()
            self._raise_if_dropped()
            raise InvalidArgumentError(
                f"commit(): {len(gone)} file(s) given to add_files() no longer exist: {listed(self._storage, gone)}. "
                f"Nothing was committed ({self.operation.display} on {self.table_name}, txn {self.txn_id}) and its "
                "staged files are deleted; re-run the job (something deleted its staged files while it ran: check "
                "cleanup's grace_seconds and any lifecycle rule on the location)"
            )

    def end_uncommitted(self) -> None:
        """Close a transaction that failed before its compare-and-swap, as a lost commit ends: its
        staged files deleted, its registration gone."""
        self._closed = True
        self.discard_staged(keep=())
        self._forget_inflight()

    def abort(self) -> None:
        """Give up: nothing becomes visible and the staged files are deleted. Idempotent. A part of a
        multi-table transaction aborts the whole of it. A transaction resumed from another process
        (`Table.resume`) may have been committed by another handle of it: its files are then the
        table's, and abort leaves them (as when etcd cannot say; cleanup checks the log first)."""
        if self._closed:
            return
        if self._group is not None:
            self._group.abort()
            return
        self.abort_alone()

    def abort_alone(self) -> None:
        """Abort this transaction only (the multi-table transaction aborting its parts)."""
        if self._closed:
            return
        self._closed = True
        if self._registered is None and self._may_have_landed():
            return
        self.discard_staged(keep=())
        self._forget_inflight()
        self._services.report(
            events.commit_event(
                "aborted",
                self.table_name,
                table_id=self.metadata.table_id,
                operation=self.operation.value,
                txn_id=self.txn_id,
            )
        )

    def _may_have_landed(self) -> bool:
        """Whether the log has this transaction's commit, or etcd cannot say. Asked only of a transaction
        begun in another process: any handle of it may commit it there (Spark aborts a write whose commit
        raised, and a commit whose answer was lost may have landed), and its staged files are then the
        table's data files."""
        try:
            landed = self._services.log(self.metadata.table_id, self.metadata.location).find_txn(self.txn_id)
        except AcidTablesError as exc:
            logger.warning(
                "%s: txn %s may have landed (%s); abort leaves its staged files to cleanup, which checks the log",
                self.table_name,
                self.txn_id,
                exc,
            )
            return True
        if landed is not None:
            logger.info(
                "%s: txn %s was committed as version %d; abort leaves its files, which are the table's",
                self.table_name,
                self.txn_id,
                landed,
            )
        return landed is not None

    def discard_staged(self, keep: Iterable[str]) -> None:
        """Delete this transaction's staged files except `keep`; failures are warnings (after the commit
        point nothing may raise, and cleanup removes leftovers later).

        With nothing to keep the whole staging directory goes, including files a failed job wrote but
        never registered with add_files. Only files under this transaction's own staging directory are
        ever deleted (`Storage.discard_staged`): an added entry may name a file the table already had.
        """
        keep_set = set(keep)
        try:
            if keep_set:
                self._storage.discard_staged(self.txn_id, [p for p in self._adds if p not in keep_set])
            else:
                self._storage.discard_staged(self.txn_id)
        except OSError as exc:
            logger.warning(
                "%s: could not delete staged files of txn %s (%s); cleanup will remove them",
                self.table_name,
                self.txn_id,
                exc,
            )

    def _stop_registering(self) -> bool:
        """The commit is under way: the registrar makes no registration from now on. True when one may
        exist: this process made it, or the transaction was begun in another process, which registers
        it there (the commit transaction deletes it either way)."""
        with self._in_flight_lock:
            if self._in_flight == "pending":
                self._in_flight = "closed"
                return False
            return self._in_flight == "registered" or self._registered is None

    def _forget_inflight(self) -> None:
        """The transaction ended without committing: no registration may stay behind (the registrar
        never makes one now, and one it made is deleted)."""
        with self._in_flight_lock:
            registered, self._in_flight = self._in_flight == "registered", "closed"
            if not registered:
                return
        try:
            self._services.coordinator.unregister_inflight(self.metadata.table_id, self.txn_id)
        except Exception as exc:  # the lease expires it anyway
            logger.info(
                "%s: could not unregister txn %s (%s); its lease will expire it", self.table_name, self.txn_id, exc
            )

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()

    def __repr__(self) -> str:
        return (
            f"Transaction({self.table_name}, {self.operation.value}, txn={self.txn_id}, "
            f"read_version={self.read_version})"
        )
