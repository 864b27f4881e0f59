"""A table: begin transactions, pin snapshots, read history and changes (design §3).

Readers get immutable snapshots by ID version or by time version; `changes()` gives the logical changes
between two versions or two times. Only data commits have a time (seeds 000/002, D-18 to D-20):
compaction and clustering have no time version and their files are not changes, and a read as of a
time reads the rows of the newest data commit at or before it, in the newest version holding them.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from acidtables.core.commit.transaction import Transaction
from acidtables.core.commit.txn_ids import new_txn_id
from acidtables.core.durations import DurationLike, parse_duration
from acidtables.core.errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    StorageUnavailableError,
    TableNotFoundError,
    VersionNotFoundError,
)
from acidtables.core.expressions import expr_sql
from acidtables.core.log.operations import REWRITES, Operation
from acidtables.core.log.records import CommitInfo, CommitRecord, DataFile, TableMetadata, to_datetime
from acidtables.core.log.services import Services
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.log.tablelog import ArchiveReport, TableLog, archive_log
from acidtables.core.maintenance import maintenance, retention
from acidtables.core.maintenance.fsck import FsckReport, fsck
from acidtables.core.maintenance.maintenance import CleanupReport
from acidtables.core.maintenance.repair import RepairReport, repair, repair_checkpoints
from acidtables.core.maintenance.restore import restore
from acidtables.core.maintenance.retention import ExpireReport, VacuumReport, check_minimum, check_readable
from acidtables.core.mirror import MirrorState, delta_state, sync_delta
from acidtables.core.read.scan import TableScan
from acidtables.core.storage.storage import Storage

logger = logging.getLogger(__name__)

TimeLike = datetime | str | int | float


def to_time_us(value: TimeLike, *, argument: str, method: str) -> int:
    """Accept a datetime (naive means UTC), an ISO-8601 string, or seconds since the epoch."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{method}(): {argument} must be a time, found {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{method}(): {argument} must be a finite time, found {value!r}")
        try:
            datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise InvalidArgumentError(
                f"{method}(): {argument}={value!r} seconds since the epoch is outside the supported range"
            ) from None
        return int(value * 1_000_000)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgumentError(
                f"{method}(): {argument}={value!r} is not a time; use ISO-8601 like '2026-11-22 10:00:00'"
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1_000_000)
    raise InvalidArgumentError(
        f"{method}(): {argument} must be a datetime, ISO string or epoch seconds, found {type(value).__name__}"
    )


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    #: commit time of a data change; None for compaction, clustering, metadata and creation
    time_version: datetime | None
    committed_at: datetime
    #: what ran; `operation.display` spells it for people ("INSERT INTO")
    operation: Operation
    txn_id: str
    read_version: int
    retries: int
    files_added: int
    files_removed: int
    rows_added: int
    rows_removed: int
    user_metadata: Mapping[str, str]
    #: True for an append that read nothing of the table (Delta's isBlindAppend)
    is_blind_append: bool = False
    #: the `delta` policy's isolation level the commit was judged at; None under the MaxCompute policies
    isolation_level: str | None = None
    #: what the commit read, as Spark SQL conditions (empty for a blind append or a whole-table read)
    predicates: tuple[str, ...] = ()
    #: what the job counted, in Delta's operationMetrics names (numUpdatedRows, ...)
    metrics: Mapping[str, int] = field(default_factory=dict)
    #: the multi-table transaction the commit was one part of (an id its parts share), and its tables
    multi_txn_id: str | None = None
    multi_txn_tables: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time_version": self.time_version.isoformat() if self.time_version else None,
            "committed_at": self.committed_at.isoformat(),
            "operation": self.operation.display,
            "txn_id": self.txn_id,
            "read_version": self.read_version,
            "retries": self.retries,
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "rows_added": self.rows_added,
            "rows_removed": self.rows_removed,
            "user_metadata": dict(self.user_metadata),
            "is_blind_append": self.is_blind_append,
            "isolation_level": self.isolation_level,
            "predicates": list(self.predicates),
            "metrics": dict(self.metrics),
            "multi_txn_id": self.multi_txn_id,
            "multi_txn_tables": list(self.multi_txn_tables),
        }


@dataclass(frozen=True)
class Change:
    """One commit's logical change: the files it added and removed."""

    version: int
    time_version: datetime | None
    operation: Operation
    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    #: what the job counted, in Delta's operationMetrics names (a MERGE's say whether it only updated)
    metrics: Mapping[str, int] = field(default_factory=dict)
    #: time_version as the log keeps it, in microseconds (exact, unlike the datetime's float round trip)
    time_us: int | None = None


@dataclass(frozen=True)
class InFlight:
    """A running transaction as its registration in etcd describes it (design §2)."""

    txn_id: str
    operation: str
    #: µs since the epoch
    started_at: int | None = None
    #: the version it read; None until it published its scope
    read_version: int | None = None
    #: the partitions it writes; None for the whole table, or while it has not said
    partitions: tuple[Mapping[str, Any], ...] | None = None
    #: a registration etcd holds but nobody can read (the transaction is still counted)
    damaged: str | None = None

    @staticmethod
    def from_registration(txn_id: str, info: Mapping[str, Any]) -> InFlight:
        if "damaged" in info:
            return InFlight(txn_id, "unknown", damaged=str(info["damaged"]))
        partitions = info.get("partitions")
        return InFlight(
            txn_id,
            str(info.get("operation", "unknown")),
            info.get("started_at") if isinstance(info.get("started_at"), int) else None,
            info.get("read_version") if isinstance(info.get("read_version"), int) else None,
            tuple(dict(p) for p in partitions) if isinstance(partitions, list) else None,
        )


F = TypeVar("F", bound=Callable[..., Any])


def names_damage(method: F) -> F:
    """Name the table in a CorruptMetadataError raised below (etcd and the log know only its id)."""

    @functools.wraps(method)
    def wrapper(self: Table, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except CorruptMetadataError as exc:
            if exc.table is not None:
                raise
            raise CorruptMetadataError(
                f"table {self.name} (id {self.table_id}) is damaged: {exc}. Its other versions and every other "
                "table are unaffected; nothing is committed on top of it",
                key=exc.key,
                table=self.name,
            ) from None

    return cast(F, wrapper)


class Table:
    def __init__(self, services: Services, table_id: str, name: str, location: str) -> None:
        self._services = services
        self.table_id = table_id
        self.name = name
        self.location = location

    def __repr__(self) -> str:
        return f"Table({self.name!r}, id={self.table_id})"

    @property
    def storage(self) -> Storage:
        """The table location, for readers that open its data files (Spark)."""
        return self._services.storage(self.location)

    @property
    def _coordinator(self) -> Any:
        return self._services.coordinator

    @property
    def _log(self) -> TableLog:
        return self._services.log(self.table_id, self.location)

    # --- snapshots -----------------------------------------------------------------------------------

    @names_damage
    def _head(self) -> tuple[int, int]:
        try:
            state = self._coordinator.read_head(self.table_id)
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None
        return int(state.value["version"]), state.mod_revision

    @property
    def version(self) -> int:
        return self._head()[0]

    @property
    def metadata(self) -> TableMetadata:
        return self.snapshot().metadata

    @names_damage
    def snapshot(self, version: int | None = None, timestamp: TimeLike | None = None) -> Snapshot:
        """The table as of an ID version, as of a time (`version_at`), or now."""
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("snapshot(): give version or timestamp, not both")
        head_version, _ = self._head()
        if timestamp is not None:
            version = self.version_at(timestamp, method="snapshot")
        if version is None:
            version = head_version
        return self.snapshot_at(version, head_version)

    @names_damage
    def snapshot_at(self, version: int, head_version: int) -> Snapshot:
        """Version `version` of the table whose head was `head_version` when it was read (by `snapshot`,
        or by Catalog.snapshots at one etcd revision for several tables)."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise InvalidArgumentError(f"snapshot(): version must be a non-negative int, found {version!r}")
        if version > head_version:
            raise VersionNotFoundError(f"{self.name} has no version {version}; the newest is {head_version}")
        if version < head_version:  # time travel: refused behind the retention, before any file is read
            check_readable(self._coordinator, self.table_id, self.name, version)
        return self._services.snapshots.load(self.table_id, self.location, version)

    def scan(
        self,
        *,
        where: str | None = None,
        columns: Sequence[str] | None = None,
        version: int | None = None,
        timestamp: TimeLike | None = None,
        limit: int | None = None,
    ) -> TableScan:
        """The rows of one version (now, an ID version, or as of a time) without Spark: `.to_arrow()`,
        `.to_batches()`, `.to_pandas()`, `.to_polars()`, `.to_duckdb(connection, name)`,
        `.to_dataset()`. `where` is a Spark SQL condition (`TableScan`'s subset), `columns` the columns
        to return in that order, `limit` the most rows. The snapshot is pinned here, so every call on
        the scan reads the same version."""
        return TableScan(
            self.snapshot(version=version, timestamp=timestamp),
            self.storage,
            where=where,
            columns=columns,
            limit=limit,
        )

    @names_damage
    def sync_mirror(self) -> MirrorState:
        """Bring the table's mirrors (`mirror.formats`) up to its newest version now, instead of waiting
        for the background writer; removes the mirror of a table whose property no longer names it.
        The operator calls this for every table it manages."""
        return sync_delta(self._services, self.table_id, self.location)

    @names_damage
    def mirror_state(self) -> MirrorState:
        """How far the Delta mirror is: its newest version, the table's, and since when it is behind."""
        return delta_state(self._services, self.table_id, self.location)

    @names_damage
    def version_at(self, timestamp: TimeLike, *, method: str = "version_at") -> int:
        """The version a read as of `timestamp` sees: the data of the newest data commit at or before it,
        in the newest version that still holds exactly that data (after it, compactions, clustering and
        ALTERs up to the next data commit; `TableLog.version_as_of`). At or after the last data commit
        that is the head; a time later than now is refused (VersionNotFoundError), since what it reads
        could still change."""
        time_us = to_time_us(timestamp, argument="timestamp", method=method)
        now_us = self._services.clock()
        if time_us > now_us:
            # Delta's DELTA_TIMESTAMP_GREATER_THAN_COMMIT, for the case that matters: a read as of a time
            # still to come would read differently once commits land before it
            raise VersionNotFoundError(
                f"{method}(): {to_datetime(time_us)} is later than now ({to_datetime(now_us)}); a read as of a "
                "time still to come could change as commits land (Delta's DELTA_TIMESTAMP_GREATER_THAN_COMMIT). "
                "Give a time up to now: one after the last commit reads the current version"
            )
        try:
            found = self._log.version_as_of(time_us, self._decode)
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None
        if found is None:
            raise VersionNotFoundError(
                f"{self.name} has no data commit at or before {to_datetime(time_us)}; time travel reaches back "
                "to the first data commit only"
            )
        return found

    def _decode(self, entry: dict[str, Any]) -> CommitRecord:
        return self._services.decode_log_entry(self.location, entry)

    # --- transactions --------------------------------------------------------------------------------

    @names_damage
    def begin(self, operation: str | Operation, *, user_metadata: Mapping[str, str] | None = None) -> Transaction:
        """Start a transaction pinned to the current version. Commit it, or abort it (also on error, as
        a context manager)."""
        op = Operation.parse(operation)
        if op is Operation.CREATE_TABLE:
            raise InvalidArgumentError("begin(): tables are created with Catalog.create_table()")
        if op is Operation.REPAIR:
            raise InvalidArgumentError("begin(): a repair is committed by Table.repair() (acidtables fsck --repair)")
        if op is Operation.RESTORE:
            raise InvalidArgumentError("begin(): a restore is committed by Table.restore(version= or timestamp=)")
        return self._begin(op, user_metadata)

    def _begin(self, op: Operation, user_metadata: Mapping[str, str] | None) -> Transaction:
        # No round trip (design §2): the id carries this process's lease (granted once), and the
        # transaction starts from the newest head this process knows (its own last commit, a race it
        # lost, a read), else from a serializable read. The compare-and-swap judges whatever landed
        # since, as after any lost race. It registers in etcd only if it is still running after
        # `register_after_seconds`.
        txn_id = new_txn_id(self._coordinator.process_lease_id(self._services.settings.commit.lease_ttl_seconds))
        storage = self._services.storage(self.location)
        info = {
            "operation": op.value,
            "staging_dir": storage.absolute(storage.staging_dir(txn_id)),
            "started_at": self._services.clock(),
        }
        head = self._coordinator.known_head(self.table_id)
        try:
            if head is None:
                head = self._coordinator.read_head(self.table_id, serializable=True)
            try:
                snapshot = self._services.snapshots.load(self.table_id, self.location, int(head.value["version"]))
            except CorruptMetadataError:
                # a head this process remembered, of a table dropped (or damaged) since: ask etcd
                self._coordinator.forget_head(self.table_id)
                head = self._coordinator.read_head(self.table_id)
                snapshot = self._services.snapshots.load(self.table_id, self.location, int(head.value["version"]))
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None
        transaction = Transaction(
            self._services,
            snapshot,
            op,
            txn_id=txn_id,
            head_revision=head.mod_revision,
            user_metadata=user_metadata,
            registered=info,
        )
        self._services.registrar.schedule(transaction)
        return transaction

    @names_damage
    def resume(
        self,
        txn_id: str,
        operation: str | Operation,
        *,
        read_version: int,
        head_revision: int,
        table_id: str | None = None,
    ) -> Transaction:
        """Rebuild a transaction begun in another process, from what `begin` returned there.

        Spark's Python data sources plan, write and commit in different Python workers, so the
        transaction travels between them as (txn id, operation, read version, head revision, and the
        table id it was begun on: a table dropped and created again under its name meanwhile is another
        table, which TableNotFoundError says). Any handle may commit it; `abort()` of a resumed handle
        first asks the log, and leaves the files of a commit that landed (or that etcd cannot rule out)
        where they are.
        """
        if table_id is not None and table_id != self.table_id:
            raise TableNotFoundError(
                f"{self.name} was dropped while transaction {txn_id} ran, and created again (table id "
                f"{table_id} is now {self.table_id}); the transaction belongs to the dropped table and commits "
                "nothing to the new one"
            )
        op = Operation.parse(operation, method="resume")
        snapshot = self._services.snapshots.load(self.table_id, self.location, read_version)
        return Transaction(self._services, snapshot, op, txn_id=txn_id, head_revision=head_revision)

    def in_flight(self) -> list[InFlight]:
        """The transactions running on this table now (their registrations live under leases)."""
        registered = self._coordinator.list_inflight(self.table_id)
        return [InFlight.from_registration(txn_id, info) for txn_id, info in sorted(registered.items())]

    @names_damage
    def find_commit(self, txn_id: str) -> int | None:
        """The version a transaction committed, or None; answers CommitOutcomeUnknown once etcd is back."""
        result = self._log.find_txn(txn_id)
        return None if result is None else int(result)

    # --- history and changes -------------------------------------------------------------------------

    def _records(self, after: int, upto: int | None) -> list[CommitRecord]:
        return [self._decode(e) for e in self._log.read(after, upto)]

    @names_damage
    def commits(self, start_version: int = 0, end_version: int | None = None) -> list[CommitRecord]:
        """The full commit records of a version range (both ends inclusive), oldest first, as the log
        holds them: what conflict detection and replay see."""
        if isinstance(start_version, bool) or not isinstance(start_version, int) or start_version < 0:
            raise InvalidArgumentError(f"commits(): start_version must be a non-negative int, found {start_version!r}")
        return self._records(start_version - 1, end_version)

    @names_damage
    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Commits newest first; `limit` reads only that many log entries."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InvalidArgumentError(f"history(): limit must be a positive int, found {limit!r}")
        # A version range, not a newest-first read with a limit: etcd 3.5 reads and sorts every key of a
        # sorted range before applying the limit, which would make history(limit=10) read the whole log.
        head_version, _ = self._head()
        after = -1 if limit is None else max(-1, head_version - limit)
        entries = self._log.read(after, head_version)[::-1]
        out = []
        for entry in entries:
            r = self._services.decode_log_entry(self.location, entry)
            out.append(
                HistoryEntry(
                    version=r.version,
                    time_version=to_datetime(r.time_version),
                    committed_at=to_datetime(r.committed_at) or datetime.fromtimestamp(0, UTC),
                    operation=r.operation,
                    txn_id=r.txn_id,
                    read_version=r.read_version,
                    retries=r.retries,
                    files_added=len(r.adds),
                    files_removed=len(r.removes),
                    rows_added=sum(f.live_rows for f in r.adds),
                    rows_removed=sum(f.live_rows for f in r.removes),
                    user_metadata=r.user_metadata,
                    is_blind_append=r.blind_append,
                    isolation_level=r.isolation_level.value if r.isolation_level else None,
                    predicates=tuple(expr_sql(p) for p in r.read_predicates),
                    metrics=r.metrics,
                    multi_txn_id=r.multi_txn_id,
                    multi_txn_tables=r.multi_txn_tables,
                )
            )
        return out

    @names_damage
    def changes(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        *,
        start_time: TimeLike | None = None,
        end_time: TimeLike | None = None,
        include_rewrites: bool = False,
        single_schema: bool = False,
    ) -> list[Change]:
        """Logical changes in an ID-version range or a time range (both ends inclusive).

        Compaction and clustering rewrite files without changing data, so they are left out (D-18);
        `include_rewrites=True` lists their physical files too, for diagnostics, by ID version only.
        With `single_schema=True` (readers that return rows, which need one schema for the whole range),
        a range that crosses a metadata change raises InvalidArgumentError naming the version to read
        from, instead of mixing rows of two schemas.
        """
        by_time = start_time is not None or end_time is not None
        if by_time and (start_version is not None or end_version is not None):
            raise InvalidArgumentError("changes(): give a version range or a time range, not both")
        head_version, _ = self._head()
        if by_time:
            if include_rewrites:
                raise InvalidArgumentError(
                    "changes(): include_rewrites works with versions only; rewrites have no time version"
                )
            start_us = to_time_us(start_time, argument="start_time", method="changes") if start_time is not None else 0
            end_us = to_time_us(end_time, argument="end_time", method="changes") if end_time is not None else 2**62
            if start_us > end_us:
                raise InvalidArgumentError("changes(): start_time is after end_time")
            found = self._log.versions_between_times(start_us, end_us)
            if not found:
                return []
            wanted = {v for _, v in found}
            span = self._records(min(wanted) - 1, max(wanted))
            records = [r for r in span if r.version in wanted]
        else:
            start = 1 if start_version is None else start_version
            end = head_version if end_version is None else end_version
            for arg, value in (("start_version", start), ("end_version", end)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidArgumentError(f"changes(): {arg} must be a non-negative int, found {value!r}")
            if start > end:
                raise InvalidArgumentError(f"changes(): start_version {start} is after end_version {end}")
            if end > head_version:
                raise VersionNotFoundError(f"{self.name} has no version {end}; the newest is {head_version}")
            span = records = self._records(start - 1, end)
        if single_schema:
            self._check_one_schema(span)
        out = []
        for r in records:
            if r.operation in REWRITES and not include_rewrites:
                continue
            if not (r.adds or r.removes):
                continue
            out.append(
                Change(
                    r.version,
                    to_datetime(r.time_version),
                    r.operation,
                    r.adds,
                    r.removes,
                    dict(r.metrics),
                    r.time_version,
                )
            )
        return out

    def _check_one_schema(self, records: list[CommitRecord]) -> None:
        """Refuse a change range whose rows would have two schemas (a metadata change after its start)."""
        for r in records[1:]:
            if r.metadata is not None:
                first = records[0].version
                raise InvalidArgumentError(
                    f"changes(): the metadata of {self.name} changed at version {r.version} "
                    f"({r.operation.display}), inside the range that starts at version {first}; rows before and "
                    f"after it have different schemas. Read the changes up to version {r.version - 1}, then from "
                    f"version {r.version} on"
                )

    # --- maintenance ---------------------------------------------------------------------------------

    @names_damage
    def cleanup(self, *, grace_seconds: float = 3600.0) -> CleanupReport:
        """Delete staged files of transactions that died: not running (no live lease), never committed,
        and older than `grace_seconds`. Files of committed transactions that no version references (a
        rebase dropped them, or the writer died before deleting them) go too. Only inside staging
        directories and this table's commit files, and only once the ownership marker says this table
        owns the location (LocationNotOwnedError otherwise)."""
        if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int | float) or not grace_seconds >= 0:
            raise InvalidArgumentError(f"cleanup(): grace_seconds must be a number >= 0, found {grace_seconds!r}")
        self._head()  # a dropped table's handle cleans nothing: TableNotFoundError
        return maintenance.cleanup(self._services, self.table_id, self.name, self.location, grace_seconds)

    @names_damage
    def archive(self, *, keep_versions: int | None = None) -> ArchiveReport:
        """Move the log entries etcd no longer needs into archive segments in the table location now.

        Commits do this by themselves in the background (every half window) and the operator
        does it for quiet tables, so nobody has to call it: it is here for tools and tests. Keeps the
        newest `keep_versions` (default: ACIDTABLES_LOG_WINDOW_VERSIONS) and everything a registered
        transaction's conflict check still needs. Readers see the same log before and after."""
        window = self._services.settings.commit.log_window_versions if keep_versions is None else keep_versions
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidArgumentError(f"archive(): keep_versions must be an int >= 1, found {keep_versions!r}")
        try:
            return archive_log(self._log, keep_versions=window)
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None

    @names_damage
    def expire(
        self,
        *,
        retain_versions: int = 1000,
        retain_duration: DurationLike = "168h",
        force: bool = False,
    ) -> ExpireReport:
        """Set how far back time travel reaches. The oldest version kept is the older of two: the
        `retain_versions`-th newest (every commit counts, data and maintenance alike), and the version a
        read as of now - `retain_duration` reads (`version_at`: the newest version holding the rows of
        the last data commit at or before that time). Every version after it is kept too, and so is the
        read version of a registered transaction. A version before a compaction with nothing but
        maintenance commits after it is not kept for the duration: reads as of any time after its data
        commit read the compaction's version, which holds the same rows.

        Older versions are no longer snapshot targets (VersionExpiredError at planning time), and files
        only they read become eligible for `vacuum`. History stays: `history()` and `changes()` still
        list them. The limit never moves back. Also archives at once the log entries etcd no longer needs.

        A `retain_duration` under the safety minimum (168h; ACIDTABLES_RETENTION_MINIMUM_SECONDS) needs
        `force=True`: a job running longer than the retention could lose the files it reads."""
        if isinstance(retain_versions, bool) or not isinstance(retain_versions, int) or retain_versions < 1:
            raise InvalidArgumentError(f"expire(): retain_versions must be an int >= 1, found {retain_versions!r}")
        duration = self._retain_duration(retain_duration, force=force, method="expire")
        try:
            return retention.expire(
                self._services,
                self.table_id,
                self.location,
                retain_versions=retain_versions,
                retain_duration=duration,
            )
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None

    @names_damage
    def vacuum(
        self, *, retain_duration: DurationLike = "168h", dry_run: bool = False, force: bool = False
    ) -> VacuumReport:
        """Delete data files no retained version reads (see `expire`) that left the table more than
        `retain_duration` ago, judged by the time of the commit that removed them (never by a file's
        modification time); never a file of a registered transaction's snapshot. Only files this table
        wrote, inside its location. `dry_run=True` lists exactly what the real run deletes.

        Staged files of transactions that died are `cleanup()`'s. Under the safety minimum (168h) only
        with `force=True`."""
        duration = self._retain_duration(retain_duration, force=force, method="vacuum")
        try:
            return retention.vacuum(
                self._services,
                self.table_id,
                self.name,
                self.location,
                retain_duration=duration,
                dry_run=bool(dry_run),
            )
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None

    def _retain_duration(self, value: DurationLike, *, force: bool, method: str) -> timedelta:
        """`retain_duration` parsed, and refused under the safety minimum unless forced."""
        duration = parse_duration(value, argument="retain_duration", method=method)
        minimum = timedelta(seconds=self._services.settings.commit.retention_minimum_seconds)
        check_minimum(duration, minimum, force=force, method=method)
        return duration

    @names_damage
    def repair(self, *, dry_run: bool = False) -> RepairReport:
        """Commit one version that removes the entries of the current version's data files that are
        gone from the location, as Databricks' FSCK REPAIR TABLE does; their rows are lost (they were
        unreadable already: every read failed with DataFilesMissingError). `dry_run=True` lists them
        and changes nothing; with none missing nothing is committed either.

        The operation is REPAIR, a DELETE of those files for the conflict rules, with a time version.
        Raises StorageUnavailableError, committing nothing, while the location cannot say whether its
        files exist (missing must mean missing); a concurrent commit it conflicts with makes it fail
        like any transaction (run it again). It also writes again, from the log, each checkpoint a
        retained version may start from that cannot be read, committing nothing for it (`checkpoints`).

            report = catalog.table("sales.orders").repair(dry_run=True)
            print([f.path for f in report.removed])"""
        if not isinstance(dry_run, bool):
            raise InvalidArgumentError(f"repair(): dry_run must be True or False, found {dry_run!r}")
        # from etcd's head, not the newest this process remembers: the files checked are the current ones
        self._coordinator.forget_head(self.table_id)
        report = repair(self._begin(Operation.REPAIR, None), dry_run=dry_run)
        rewritten = repair_checkpoints(self._services, self.table_id, self.name, self.location, dry_run=dry_run)
        return replace(report, checkpoints=rewritten)

    @names_damage
    def restore(self, version: int | None = None, timestamp: TimeLike | None = None) -> CommitInfo:
        """Commit one version whose files are those of an earlier `version` (or the version current at
        `timestamp`), as Delta Lake's RESTORE does: no data file is read or written, history says
        RESTORE, and the conflict rules judge it as an overwrite of the whole table. Restoring to what
        the table already holds commits nothing (`skipped`).

        Raises DataFilesMissingError, committing nothing, when vacuum has deleted files that version
        needs; InvalidArgumentError on a primary-key table or a version of other columns.

            catalog.table("sales.orders").restore(version=3)"""
        if (version is None) == (timestamp is None):
            raise InvalidArgumentError("restore(): give the version to restore (version=) or a time (timestamp=)")
        earlier = self.snapshot(version=version, timestamp=timestamp)
        return restore(self._begin(Operation.RESTORE, None), earlier)

    @names_damage
    def fsck(self) -> FsckReport:
        """Check the table's invariants that need no history (dense versions, time versions and their
        index, txn lookups, every retained file present with its size, checkpoints equal to a replay,
        the archive, in-flight registrations). Read-only; see `acidtables fsck`."""
        try:
            return fsck(self._services, self.table_id, self.name, self.location)
        except LookupError:
            raise TableNotFoundError(f"{self.name} was dropped") from None
        except OSError as exc:  # the location did not answer: no finding about the table can be made
            raise StorageUnavailableError(
                f"fsck of {self.name}: the table location {self.location} did not answer ({exc}); check that the "
                "storage is reachable and readable, then run fsck again"
            ) from None
