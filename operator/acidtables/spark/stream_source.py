"""The `acidtables` data source as a Structured Streaming source, with Delta Lake's source semantics.

    spark.readStream.format("acidtables").option("maxFilesPerTrigger", 100).load("sales.orders")

With no starting option a stream first reads the table's contents at the version current when the query
started (its files in log order), then each later version in order; `startingVersion` (a number, or
"latest") and `startingTimestamp` read only the changes from that version on. A micro-batch admits
files up to maxFilesPerTrigger and maxBytesPerTrigger (both when both are given), cutting inside a
version when it must and admitting one file at least. Commits that change no data (compaction,
clustering, metadata) are passed over. A commit that rewrites or removes rows stops the stream
(StreamStoppedError) unless skipChangeCommits (any such commit) or ignoreDeletes (one that only
removes) passes over it; so does a commit that changes the schema, after the rows before it were
delivered: a restart from the same checkpoint continues with the new schema. Versions behind the
table's retention, and data files gone from its location, stop the stream unless failOnDataLoss=false,
which goes on from the oldest version kept and skips missing files, with a warning.

A primary-key table streams what a reader sees: the initial snapshot merged on read, then each
version's rows merged within the version (one row per key), without the merge-on-read columns.

Spark runs a Python stream reader's driver side (initialOffset, latestOffset, partitions, commit, stop)
in one Python worker for the query's whole life, so the reader opens its catalog there on first use and
closes it in stop(). What it keeps is bounded, however long the stream runs: the units of the snapshot
being streamed (dropped once it is read) and of the last micro-batch planned. Spark also makes a reader
in a planning worker only to ship it to the executors, so the constructor connects to nothing. The
executors get their files and the table's metadata in their partitions and read them with pyarrow
(`arrow_files.read_rows`), never talking to etcd.

Offsets are `{"table_id": id, "version": v, "index": i, "snapshot": b}`: the next unit to read is unit
`i` of the initial snapshot at version `v` (`snapshot` true) or of version `v`'s changes. A unit is one
file, or on a primary-key table all the files of one table partition (in the snapshot) or of one
version in one partition, which merge-on-read needs together. Version -1 is a stream not pinned yet: the
first micro-batch pins the snapshot's version (or, for "latest", where the stream starts), so a restart
before that batch commits reads exactly what its offsets say.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from acidtables.core import (
    AcidTablesError,
    Catalog,
    CommitRecord,
    CorruptMetadataError,
    DataFile,
    DataFilesMissingError,
    InvalidArgumentError,
    Operation,
    Settings,
    Storage,
    StreamStoppedError,
    Table,
    TableMetadata,
    VersionExpiredError,
    VersionNotFoundError,
    check_files_exist,
    read_retention,
)

from .arrow_files import read_rows
from .change_feed import INSERT, CommitChange, change_rows, commit_change, labelled
from .datasource import OPEN_COST_BYTES, packed_tasks
from .schema import change_feed_struct, read_struct
from .source_catalog import catalog_from_options, user_facing
from .source_options import (
    DEFAULT_MAX_FILES_PER_TRIGGER,
    FAIL_ON_DATA_LOSS,
    IGNORE_DELETES,
    SKIP_CHANGE_COMMITS,
    STARTING_TIMESTAMP,
    STARTING_VERSION,
    SourceOptions,
    StreamReadOptions,
    parse_options,
)

logger = logging.getLogger(__name__)

#: the version of an offset the first micro-batch has not pinned yet
UNPINNED = -1
#: log entries read per round trip while a micro-batch is planned
RECORDS_PER_READ = 256
#: on a primary-key table these add rows without replacing what the stream delivered before (an
#: overwrite that removed files is judged by its removes); UPDATE, MERGE, DELETE rewrite rows by key
_PK_APPENDS = frozenset({Operation.CREATE_TABLE, Operation.INSERT_INTO, Operation.INSERT_OVERWRITE})


@dataclass(frozen=True, order=True)
class Position:
    """Where a stream is: the next unit to read (see the module docstring)."""

    version: int
    index: int = 0
    snapshot: bool = False

    def to_offset(self, table_id: str) -> dict[str, Any]:
        return {"table_id": table_id, "version": self.version, "index": self.index, "snapshot": self.snapshot}

    @staticmethod
    def from_offset(offset: Mapping[str, Any], table: str, table_id: str) -> Position:
        """The position an offset holds, refused when it is not one of this source's offsets for this table
        (a checkpoint of another source, or of a table dropped and created again under the same name)."""
        try:
            position = Position(int(offset["version"]), int(offset["index"]), bool(offset["snapshot"]))
            found_id = str(offset["table_id"])
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(
                f"format('acidtables'): the checkpoint holds offset {dict(offset)!r}, which is not an acidtables "
                f"stream's offset of {table}; start the query with a new checkpoint location"
            ) from None
        if found_id != table_id:
            raise InvalidArgumentError(
                f"format('acidtables'): the checkpoint's offsets are of table id {found_id}, but {table} is now table "
                f"id {table_id} (dropped and created again?); start the query with a new checkpoint location"
            )
        return position


@dataclass(frozen=True)
class _Unit:
    """Files admitted and read together (see the module docstring). In a change feed, a unit of a
    version's changes is the whole commit (`change`; its files are what it added and removed), and a
    unit of the initial snapshot reads as inserts at the snapshot's version and time (`inserts_at`)."""

    version: int
    files: tuple[DataFile, ...]
    change: CommitChange | None = None
    inserts_at: int | None = None

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def task_group(self) -> dict[str, Any]:
        """What a reader task needs of the unit (executors read it without etcd)."""
        if self.change is not None:
            return {"change": self.change.to_json()}
        group: dict[str, Any] = {"files": [_entry(f) for f in self.files]}
        if self.inserts_at is not None:
            group["inserts_at"] = [self.version, self.inserts_at]
        return group


@dataclass(frozen=True)
class _Budget:
    """What one micro-batch admits; None: no bound of that kind."""

    max_files: int | None
    max_bytes: int | None


@dataclass
class _Batch:
    """The units one micro-batch admitted so far."""

    budget: _Budget | None
    units: list[_Unit] = field(default_factory=list)
    files: int = 0
    size_bytes: int = 0

    def admits(self, unit: _Unit) -> bool:
        # the first unit always: a unit larger than the budget must not stall the stream
        if self.budget is None or not self.units:
            return True
        if self.budget.max_files is not None and self.files + len(unit.files) > self.budget.max_files:
            return False
        # Delta's soft byte limit: the unit that crosses it is admitted, none after it
        return self.budget.max_bytes is None or self.size_bytes < self.budget.max_bytes

    def add(self, unit: _Unit) -> None:
        self.units.append(unit)
        self.files += len(unit.files)
        self.size_bytes += unit.size_bytes


class _StreamTask(InputPartition):
    """One reader task: groups of files (each a unit, read together), and the metadata to read them with."""

    def __init__(self, metadata: dict[str, Any], groups: list[dict[str, Any]]) -> None:
        super().__init__(groups)
        self.metadata = metadata
        self.groups = groups


def _entry(file: DataFile) -> dict[str, Any]:
    return {**file.to_json(), "added_version": file.added_version}


def _tasks(units: Sequence[_Unit]) -> list[list[_Unit]]:
    """Units in reader tasks as the batch reader packs its files (datasource.packed_tasks), each unit weighing
    what its files do together."""
    if not units:
        return []
    entries = [{"size_bytes": u.size_bytes + OPEN_COST_BYTES * (len(u.files) - 1), "unit": u} for u in units]
    return [[entry["unit"] for entry in task] for task in packed_tasks(entries)]


def _columns(struct: StructType) -> str:
    return ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in struct.fields)


class _Planner:
    """The driver side of one stream: its catalog, the table, and the planning of micro-batches."""

    def __init__(self, options: SourceOptions, session: Settings | None, schema: StructType) -> None:
        self.options = options
        self.stream: StreamReadOptions = options.stream
        self.schema = schema
        self.catalog: Catalog = catalog_from_options(options, session)
        try:
            self.table: Table = self.catalog.table(options.table)
            head = self.table.snapshot()
        except BaseException:
            self.catalog.close()
            raise
        #: what the executors read with: the table's metadata when this reader started, whose schema is the
        #: stream's (files written under an older schema read their missing columns as NULL)
        self.meta = head.metadata
        self.metadata_json = head.metadata.to_json()
        self.change_feed = options.stream.read_change_feed
        #: the table's columns of the stream's schema (a change feed's has the change columns after them)
        self.table_schema = read_struct(self.meta)
        #: metadata changes up to here are history the stream's schema already has; later ones that change
        #: the schema stop the stream
        self.started_at = head.version
        self.primary_key = bool(head.metadata.primary_key)
        #: Trigger.AvailableNow's head, pinned by prepareForTriggerAvailableNow: never read past it
        self.pinned_head: int | None = None
        self._snapshot: tuple[int, list[_Unit]] | None = None
        self._planned: tuple[Position, Position, list[_Unit]] | None = None
        if (change_feed_struct(self.table_schema) if self.change_feed else self.table_schema) != schema:
            self.catalog.close()
            raise InvalidArgumentError(
                f"format('acidtables'): the stream of {self.meta.name} was defined with columns ({_columns(schema)}), "
                f"but the table's are ({_columns(read_struct(self.meta))}) at version {head.version}; a stream reads "
                "with the table's schema: define the query again (load() reads the schema)"
            )

    @property
    def name(self) -> str:
        return self.meta.name

    def close(self) -> None:
        self.catalog.close()

    def head(self) -> int:
        return self.pinned_head if self.pinned_head is not None else self.table.version

    # --- where a stream starts ---------------------------------------------------------------------

    def initial(self) -> Position:
        stream = self.stream
        if stream.starting_version == "latest":
            return Position(UNPINNED)
        if isinstance(stream.starting_version, int):
            head = self.table.version
            if stream.starting_version > head:
                raise VersionNotFoundError(
                    f"format('acidtables'): option {STARTING_VERSION}={stream.starting_version}: {self.name} has no "
                    f"version {stream.starting_version}; the newest is {head}. Use {STARTING_VERSION}=latest to read "
                    "only the versions committed from now on"
                )
            return Position(stream.starting_version)
        if stream.starting_timestamp is not None:
            return Position(self._first_version_at_or_after(stream.starting_timestamp))
        return Position(UNPINNED, snapshot=True)

    def _first_version_at_or_after(self, text: str) -> int:
        """The first version a reader by time would see committed at or after `text`: the version after the
        one a read as of one microsecond earlier reads (version_at). A time still to come starts after the
        head, as Delta's source does."""
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if when > datetime.now(UTC):
            return self.table.version + 1
        try:
            return self.table.version_at(when - timedelta(microseconds=1), method=STARTING_TIMESTAMP) + 1
        except VersionNotFoundError:  # no data commit before it: every version is at or after it
            return 0

    # --- planning ------------------------------------------------------------------------------------

    def plan(self, start: Position, *, until: Position | None, budget: _Budget | None) -> tuple[Position, list[_Unit]]:
        """The units from `start` up to `until` (a batch planned before, read again) or as far as `budget`
        admits (a new batch, never past the head), and where the batch ends."""
        cap = self.head()
        batch = _Batch(budget)
        if start.version == UNPINNED:
            if not start.snapshot:  # "latest": the first batch pins where the stream starts, reading nothing
                return until or Position(cap + 1), []
            # the snapshot is of the version current when the query started; a batch that began unpinned
            # ends with it at the latest, so its end tells a replay which version that was
            version = self.started_at if until is None else (until.version if until.snapshot else until.version - 1)
            start = self._retained(Position(version, snapshot=True), until)
            if not start.snapshot:
                return until or start, []
            stopped = self._take_snapshot(start, until, batch)
            return stopped or Position(start.version + 1), batch.units
        if start.version > cap:
            return start, []
        start = self._retained(start, until)
        if start.snapshot:
            stopped = self._take_snapshot(start, until, batch)
            if stopped is not None:
                return stopped, batch.units
            start = Position(start.version + 1)
        return self._take_changes(start, cap, until, batch), batch.units

    def _retained(self, start: Position, until: Position | None) -> Position:
        """`start`, or where the stream goes on when retention expired the versions from it on (with
        failOnDataLoss=false; else VersionExpiredError). Versions from the oldest kept on are whole: every
        file added since is read by a retained version, which vacuum never deletes."""
        retention, _ = read_retention(self.catalog.services.coordinator, self.table.table_id)
        oldest = retention.oldest_version
        # a primary-key commit's changes are worked out against the version before it
        # (change_feed.commit_change), and another commit's deleted rows are read from the files it removes,
        # which only the expired versions before it read (vacuum may have deleted them): so the oldest kept
        # version's own changes are lost too
        feed_from_oldest = self.change_feed and not start.snapshot and oldest > 0 and start.version <= oldest
        if feed_from_oldest and (
            self.primary_key or any(f.data_change for f in self.table.commits(oldest, oldest)[0].removes)
        ):
            oldest += 1
        if start.version >= oldest:
            return start
        upto = oldest - 1 if until is None else min(oldest - 1, until.version)
        what = f"version {start.version}" if upto == start.version else f"versions {start.version}..{upto}"
        part = "the snapshot at " if start.snapshot else ""
        if self.stream.fail_on_data_loss:
            raise VersionExpiredError(
                f"The stream of {self.name} needs {part}{what} next, which expired: the table's retention "
                f"({retention.describe()}) keeps versions {oldest} and newer, and files only older versions read "
                f"may have been vacuumed. Restart the query from the same checkpoint with option "
                f"{FAIL_ON_DATA_LOSS}=false to go on from version {oldest} (what {what} added is not delivered), "
                "or start it with a new checkpoint location to read the table afresh",
                oldest_version=oldest,
            )
        logger.warning(
            "%s: the stream goes on from version %d: %s%s expired (%s=false); what it added is not delivered",
            self.name,
            oldest,
            part,
            what,
            FAIL_ON_DATA_LOSS,
        )
        return Position(oldest)

    def _snapshot_units(self, version: int) -> list[_Unit]:
        if self._snapshot is None or self._snapshot[0] != version:
            self._snapshot = None  # one snapshot's units at a time
            snapshot = self.table.snapshot(version=version)
            units = self._units(version, snapshot.files)
            if self.change_feed:  # Delta's change feed starts with the snapshot's rows as inserts
                units = [replace(u, inserts_at=snapshot.time_version or 0) for u in units]
            self._snapshot = (version, units)
        return self._snapshot[1]

    def _log_missing(self, version: int, last: int) -> None:
        """No log entry from `version` on, although the stream's head (pinned by Trigger.AvailableNow,
        or read by this plan) is at `last` or beyond: the table was dropped since (TableNotFoundError
        from its head), or its log is damaged. Raised, never looped on."""
        head = self.table.version  # raises TableNotFoundError for a dropped table
        raise CorruptMetadataError(
            f"the stream of {self.name} needs versions {version}..{last}, but the table's log holds none of "
            f"them (its head is version {head}); acidtables fsck {self.name}",
            key=f"log/{version}",
            table=self.name,
        )

    def _take_snapshot(self, start: Position, until: Position | None, batch: _Batch) -> Position | None:
        """Admit the snapshot's units from `start`; where the batch ends inside it, or None once all are in."""
        units = self._snapshot_units(start.version)
        for index in range(start.index, len(units)):
            here = Position(start.version, index, snapshot=True)
            if here == until or not batch.admits(units[index]):
                return here
            batch.add(units[index])
        return None

    def _take_changes(self, start: Position, cap: int, until: Position | None, batch: _Batch) -> Position:
        """Admit the units of versions from `start` on, never past `cap`; where the batch ends."""
        version, index = start.version, start.index
        last = cap if until is None else min(cap, until.version)
        while version <= last:
            records = self.table.commits(version, min(last, version + RECORDS_PER_READ - 1))
            if not records:
                self._log_missing(version, last)
            for record in records:
                here = Position(record.version)
                if here == until:
                    return here
                units = self._judged(record, until, batch)
                if units is None:  # a commit the stream stops at: end the batch before it
                    return here
                for i in range(index, len(units)):
                    here = Position(record.version, i)
                    if here == until or not batch.admits(units[i]):
                        return here
                    batch.add(units[i])
                index = 0
                version = record.version + 1
        return Position(version)

    def _judged(self, record: CommitRecord, until: Position | None, batch: _Batch) -> list[_Unit] | None:
        """The units a version delivers (none for one passed over); None for one the stream stops at while
        the batch holds rows, so those are delivered first. Raises StreamStoppedError when it stops now."""
        if self._changes_schema(record):
            stop = self._schema_stop(record)
        elif not self._changes_data(record):
            return []
        elif self.change_feed:  # every data change is delivered, as change rows
            return [self._change_unit(record)]
        else:
            rewrite = self._rewrite(record)
            if rewrite is None:
                return self._units(record.version, [f for f in record.adds if f.data_change])
            if self._passes_over(record, only_removes=rewrite == "removes"):
                return []
            stop = self._change_stop(record, only_removes=rewrite == "removes")
        if until is None and batch.units:
            return None
        raise stop

    def _change_unit(self, record: CommitRecord) -> _Unit:
        """A change feed's unit: one data commit, read whole (change_feed.commit_change)."""
        assert record.time_version is not None  # a data change has a time version
        change = commit_change(
            self.table,
            record.version,
            record.time_version,
            record.operation,
            record.adds,
            record.removes,
            record.metrics,
        )
        return _Unit(record.version, change.added + change.removed, change=change)

    def _changes_schema(self, record: CommitRecord) -> bool:
        # metadata changes the stream's schema already has (up to the head it started at) are history
        return (
            record.metadata is not None
            and record.version > self.started_at
            and read_struct(record.metadata) != self.table_schema
        )

    @staticmethod
    def _changes_data(record: CommitRecord) -> bool:
        # compaction and clustering (no time version, dataChange=false files) and metadata-only commits
        return record.time_version is not None and record.changes_data

    def _rewrite(self, record: CommitRecord) -> Literal["removes", "rewrites"] | None:
        """How a data commit changes rows the stream may have delivered: None (it only adds rows),
        "removes" (it only removes rows), or "rewrites". A RESTORE always rewrites: the files it adds
        back hold rows the stream may have delivered already, so it is never streamed as an append."""
        if record.operation is Operation.RESTORE:
            return "rewrites"
        adds = any(f.data_change for f in record.adds)
        removes = any(f.data_change for f in record.removes)
        if not removes and not (self.primary_key and record.operation not in _PK_APPENDS):
            return None
        # a primary-key DELETE adds only delete markers
        only_removes = not adds or (self.primary_key and record.operation is Operation.DELETE)
        return "removes" if only_removes else "rewrites"

    def _passes_over(self, record: CommitRecord, *, only_removes: bool) -> bool:
        stream = self.stream
        if not (stream.skip_change_commits or (only_removes and stream.ignore_deletes)):
            return False
        logger.info(
            "%s: the stream passes over version %d (%s, %s=true): its rows are not delivered",
            self.name,
            record.version,
            record.operation.display,
            SKIP_CHANGE_COMMITS if stream.skip_change_commits else IGNORE_DELETES,
        )
        return True

    def _change_stop(self, record: CommitRecord, *, only_removes: bool) -> StreamStoppedError:
        operation = record.operation.display
        if only_removes:
            error_class, does = "DELTA_SOURCE_IGNORE_DELETE", "removes rows"
            options = f"option {IGNORE_DELETES}=true (commits that only remove rows) or {SKIP_CHANGE_COMMITS}=true"
        else:
            error_class, does = "DELTA_SOURCE_TABLE_IGNORE_CHANGES", "rewrites or removes rows"
            options = f"option {SKIP_CHANGE_COMMITS}=true"
        return StreamStoppedError(
            f"[{error_class}] The stream of {self.name} stopped at version {record.version} ({operation}): the commit "
            f"{does}, which a stream of appended rows cannot deliver. The rows of the versions before it were "
            f"delivered. To pass over such commits (their rows are not delivered), restart the query from the same "
            f"checkpoint with {options}",
            table=self.name,
            version=record.version,
            operation=operation,
        )

    def _schema_stop(self, record: CommitRecord) -> StreamStoppedError:
        assert record.metadata is not None
        operation = record.operation.display
        return StreamStoppedError(
            f"[DELTA_SCHEMA_CHANGED_WITH_VERSION] The stream of {self.name} stopped at version {record.version} "
            f"({operation}): it changes the schema from ({_columns(self.table_schema)}) to "
            f"({_columns(read_struct(record.metadata))}). The rows of the versions before it were delivered. "
            f"Restart the query from the same checkpoint: it continues from version {record.version} with the "
            "new schema (files written before read a column they lack as NULL)",
            table=self.name,
            version=record.version,
            operation=operation,
        )

    def _units(self, version: int, files: Sequence[DataFile]) -> list[_Unit]:
        """One unit per file; on a primary-key table one per table partition, in the order of their files."""
        if not self.primary_key:
            return [_Unit(version, (f,)) for f in files]
        groups: dict[str, list[DataFile]] = {}
        for f in files:
            groups.setdefault(repr(sorted(f.partition.items())), []).append(f)
        return [_Unit(version, tuple(g)) for g in groups.values()]

    # --- a planned micro-batch -----------------------------------------------------------------------

    def latest(self, start: Position, budget: _Budget | None) -> Position:
        end, units = self.plan(start, until=None, budget=budget)
        self._planned = (start, end, units)
        if not end.snapshot:
            self._snapshot = None  # past the snapshot: its units are the planned batch's now
        return end

    def batch(self, start: Position, end: Position) -> list[_Unit]:
        """The units of (start, end): the batch latestOffset planned, or one planned before (a restart
        replays its last batch), planned again from the log, which gives the same units."""
        if self._planned is not None and self._planned[:2] == (start, end):
            units = self._planned[2]
        else:
            _, units = self.plan(start, until=end, budget=None)
        return self._present(units)

    def committed(self, end: Position) -> None:
        if self._planned is not None and self._planned[1] <= end:
            self._planned = None

    def _present(self, units: list[_Unit]) -> list[_Unit]:
        """`units`, checked while the batch is planned (a vanished file fails it now, naming itself, not in
        a task); with failOnDataLoss=false without the missing files, with a warning."""
        storage = self.table.storage
        files = [f for u in units for f in (*u.files, *(u.change.prior if u.change else ()))]
        try:
            check_files_exist(storage, files, table=self.name, version=units[-1].version if units else 0)
            return units
        except DataFilesMissingError as exc:
            gone = set(exc.paths)
        versions = sorted({u.version for u in units for f in u.files if storage.absolute(f.path) in gone})
        listed = ", ".join(sorted(gone)[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
        if self.stream.fail_on_data_loss:
            raise DataFilesMissingError(
                f"The stream of {self.name} needs {len(gone)} data file(s) of version(s) "
                f"{', '.join(map(str, versions))} that are missing from its location: {listed}. Nothing of this "
                f"micro-batch was read. Restore the file(s) and restart the query from the same checkpoint, or "
                f"restart it with option {FAIL_ON_DATA_LOSS}=false to skip them (their rows are not delivered)",
                table=self.name,
                version=versions[0],
                paths=tuple(sorted(gone)),
            )
        logger.warning(
            "%s: the stream skips %d data file(s) of version(s) %s missing from its location (%s=false): %s",
            self.name,
            len(gone),
            ", ".join(map(str, versions)),
            FAIL_ON_DATA_LOSS,
            listed,
        )
        # a change unit is read whole or not at all: its changes need every file it names
        kept = [
            replace(u, files=tuple(f for f in u.files if storage.absolute(f.path) not in gone))
            for u in units
            if u.change is None or not any(storage.absolute(f.path) in gone for f in (*u.files, *u.change.prior))
        ]
        return [u for u in kept if u.files]


class AcidTablesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("acidtables")` (see the module docstring)."""

    def __init__(
        self,
        options: SourceOptions,
        session: Settings | None,
        schema: StructType,
        *,
        refused: AcidTablesError | None = None,
    ) -> None:
        self.options = options
        self.session = session
        self.schema = schema
        # raised from the first driver-side call, never from here: PySpark 4.3's streaming worker loses an
        # exception raised while it makes the reader (its cleanup calls stop() on a reader it never got,
        # and that UnboundLocalError is all the user would see)
        self._refused = refused
        self._planner: _Planner | None = None

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], session: Settings | None, schema: StructType
    ) -> AcidTablesStreamReader:
        """The reader of a stream with these (unchecked) options; options it refuses fail the query at its
        first driver-side call, naming the option (see __init__ for why not at once)."""
        try:
            return cls(parse_options(options, "stream_read"), session, schema)
        except AcidTablesError as exc:
            return cls(SourceOptions(table=str(options.get("path") or "")), session, schema, refused=exc)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_planner": None}  # executors get their files in their partitions

    @property
    def planner(self) -> _Planner:
        if self._refused is not None:
            raise self._refused
        if self._planner is None:
            self._planner = _Planner(self.options, self.session, self.schema)
        return self._planner

    def _position(self, offset: Mapping[str, Any]) -> Position:
        planner = self.planner
        return Position.from_offset(offset, planner.name, planner.meta.table_id)

    def _offset(self, position: Position) -> dict[str, Any]:
        return position.to_offset(self.planner.meta.table_id)

    @user_facing
    def initialOffset(self) -> dict[str, Any]:
        return self._offset(self.planner.initial())

    def getDefaultReadLimit(self) -> ReadLimit:
        stream = self.options.stream
        if stream.max_files_per_trigger is None and stream.max_bytes_per_trigger is not None:
            return ReadMaxBytes(stream.max_bytes_per_trigger)
        return ReadMaxFiles(stream.max_files_per_trigger or DEFAULT_MAX_FILES_PER_TRIGGER)

    @user_facing
    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.pinned_head = self.planner.table.version

    @user_facing
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._position(start)
        end = self.planner.latest(begin, self._budget(limit))
        return start if end == begin else self._offset(end)

    def _budget(self, limit: ReadLimit) -> _Budget | None:
        """What a micro-batch admits under Spark's limit: all there is for ReadAllAvailable (Trigger.Once),
        else the options' limits with Spark's in place of the one it names (Trigger.AvailableNow passes
        getDefaultReadLimit's, so it too runs batches of maxFilesPerTrigger, as Delta's source does)."""
        if isinstance(limit, ReadAllAvailable):
            return None
        stream = self.options.stream
        files, size = stream.max_files_per_trigger, stream.max_bytes_per_trigger
        if isinstance(limit, ReadMaxFiles):
            files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            size = limit.max_bytes
        return _Budget(files, size)

    @user_facing
    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._offset(Position(self.planner.table.version + 1))

    @user_facing
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        planner = self.planner
        units = planner.batch(self._position(start), self._position(end))
        return [_StreamTask(planner.metadata_json, [unit.task_group() for unit in task]) for task in _tasks(units)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _StreamTask):
            return
        meta = TableMetadata.from_json(partition.metadata)
        storage = Storage(meta.location)
        for group in partition.groups:
            if "change" in group:
                yield from change_rows(meta, storage, CommitChange.from_json(group["change"])).to_batches()
                continue
            files = [DataFile.from_json(f, f.get("added_version")) for f in group["files"]]
            rows = read_rows(meta, storage, files)
            if "inserts_at" in group:
                version, time_us = group["inserts_at"]
                rows = labelled(rows, INSERT, version, time_us)
            yield from rows.to_batches()

    def commit(self, end: dict[str, Any]) -> None:
        if self._planner is not None:
            self._planner.committed(self._position(end))

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


__all__ = ["AcidTablesStreamReader"]
