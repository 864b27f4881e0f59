"""`acidtables demo`: overlapping transactions on each conflict policy, run for real, in seconds.

The demo starts an embedded etcd in a temporary directory, creates one table per policy, and runs each
scenario through the two-phase API in the seeds' order — E begins, L begins, both stage a small real
Parquet file, E commits, then L commits — and prints what actually happened. Nothing is scripted: a
wrong conflict rule in core shows up as a wrong line here. It ends with time travel and `changes()`
on one of the tables, then stops etcd and deletes the directory.

The scenarios and policies are data (`SCENARIOS`, `POLICIES`); the file-level work of a job is behind
`Stager`. Until `acidtables.spark` exists, `FileStager` writes Parquet with pyarrow; the Spark pipeline
can replace it with DataFrame writes without touching the scenarios or the output.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables.core import (
    Catalog,
    CommitInfo,
    ConcurrentModificationException,
    DataFile,
    InvalidArgumentError,
    Operation,
    Table,
    Transaction,
    to_datetime,
)

from .output import rfc3339, table

__all__ = [
    "POLICIES",
    "SCENARIOS",
    "DemoResult",
    "FileStager",
    "Job",
    "PolicySpec",
    "Scenario",
    "ScenarioResult",
    "Stager",
    "run_demo",
]

#: the demo tables' columns; `dt` is the partition column, `id` the primary key where there is one
SCHEMA = "id BIGINT, v STRING, dt STRING"
_ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("dt", pa.string())])


# --- the scenarios, as data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySpec:
    """One demo table: a conflict policy and its settings."""

    policy: str
    isolation_level: str | None = None
    primary_key: bool = False

    @property
    def label(self) -> str:
        return f"{self.policy} ({self.isolation_level})" if self.isolation_level else self.policy

    @property
    def table_name(self) -> str:
        suffix = f"_{self.isolation_level.lower()}" if self.isolation_level else ""
        return f"demo.{self.policy.replace('-', '_')}{suffix}"


@dataclass(frozen=True)
class Job:
    """One side of a scenario: an operation on one partition (`dt=<partition>`)."""

    operation: Operation
    partition: str


@dataclass(frozen=True)
class Scenario:
    earlier: Job
    later: Job

    @property
    def partitions(self) -> str:
        if self.earlier.partition == self.later.partition:
            return f"same (dt={self.earlier.partition})"
        return f"different (dt={self.earlier.partition}, dt={self.later.partition})"


POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec("maxcompute", primary_key=True),
    PolicySpec("maxcompute-transactional"),
    PolicySpec("delta", "WriteSerializable"),
    PolicySpec("delta", "Serializable"),
)

#: chosen so each policy shows both outcomes; conflict-rules §3.1 and §8.1 say which to expect
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.INSERT_INTO, "a")),
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.UPDATE, "a")),
    Scenario(Job(Operation.UPDATE, "a"), Job(Operation.UPDATE, "a")),
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.MINOR_COMPACT, "b")),
)

#: the table the time-travel part runs on (its row counts are plain: no merge-on-read)
TIME_TRAVEL_POLICY = POLICIES[2]

#: data the demo tables start with: (partition, files, rows per file); dt=b has two files to compact
_INITIAL_LOAD = (("a", 2, 2), ("b", 2, 2))


# --- the file-level steps ------------------------------------------------------------------------------


class Stager(Protocol):
    """Does a job's data work inside an open transaction: read, write staged files, tell the transaction.

    The only part of the demo that touches data; the Spark pipeline will provide its own.
    """

    def load(self, txn: Transaction, partition: str, files: int, rows_per_file: int) -> None: ...

    def stage(self, txn: Transaction, job: Job) -> None: ...


class FileStager:
    """Writes small Parquet files with pyarrow, as a Spark job's tasks would, under the txn's staging dir."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._names = itertools.count(1)

    def _write(self, txn: Transaction, partition: str, rows: pa.Table, **file_fields: Any) -> DataFile:
        path = Path(txn.staging_dir) / f"part-{next(self._names):05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        # "xb": a staged file is never overwritten (design §2)
        with path.open("xb") as out:
            pq.write_table(rows, out)
        if txn.metadata.primary_key and "kind" not in file_fields:
            file_fields["kind"] = "delta"  # primary-key tables are merge-on-read (design §4)
        return DataFile(
            path=str(path),
            partition={"dt": partition},
            rows=rows.num_rows,
            size_bytes=path.stat().st_size,
            **file_fields,
        )

    def _new_rows(self, partition: str, count: int, value: str) -> pa.Table:
        ids = [next(self._ids) for _ in range(count)]
        return pa.table({"id": ids, "v": [value] * count, "dt": [partition] * count}, schema=_ARROW_SCHEMA)

    @staticmethod
    def _read(txn: Transaction, files: Sequence[DataFile]) -> pa.Table:
        location = txn.metadata.location
        parts = [pq.read_table(f.path if f.path.startswith("/") else f"{location}/{f.path}") for f in files]
        return pa.concat_tables(parts) if parts else _ARROW_SCHEMA.empty_table()

    def load(self, txn: Transaction, partition: str, files: int, rows_per_file: int) -> None:
        txn.add_files(
            [self._write(txn, partition, self._new_rows(partition, rows_per_file, "v0")) for _ in range(files)]
        )

    def stage(self, txn: Transaction, job: Job) -> None:
        dt = job.partition
        if job.operation is Operation.INSERT_INTO:
            txn.add_files([self._write(txn, dt, self._new_rows(dt, 1, "inserted"))])
        elif job.operation is Operation.UPDATE:
            # UPDATE ... SET v = 'updated' WHERE dt = <partition>: scan() records the read
            matched = txn.scan(f"dt = '{dt}'")
            rows = self._read(txn, matched)
            updated = rows.set_column(1, "v", pa.array(["updated"] * rows.num_rows, pa.string()))
            if not txn.metadata.primary_key:
                # copy-on-write replaces the matched files; a primary-key table is merge-on-read instead,
                # and the new file holds only the new row versions, keyed by primary key (design §4)
                txn.remove_files(matched)
            txn.add_files([self._write(txn, dt, updated)])
        elif job.operation is Operation.MINOR_COMPACT:
            # a compaction records its inputs as removes only, never as reads (conflict-rules D-16)
            inputs = [f for f in txn.snapshot.files if f.partition.get("dt") == dt]
            merged = self._read(txn, inputs)
            txn.remove_files(inputs)
            txn.add_files([self._write(txn, dt, merged, lineage=tuple(f.path for f in inputs), ordered_lineage=True)])
        else:
            raise NotImplementedError(f"the demo stager has no {job.operation.display}")


# --- results -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioResult:
    policy: PolicySpec
    scenario: Scenario
    earlier_version: int
    #: None when the later job failed
    later_version: int | None
    later_retries: int
    exception: str | None
    message: str | None

    @property
    def outcome(self) -> str:
        return "later_failed" if self.exception else "both_committed"

    @property
    def summary(self) -> str:
        if self.exception:
            return f"later failed: {self.exception}"
        if self.later_retries:
            plural = "retry" if self.later_retries == 1 else "retries"
            return f"both committed (later rebased, {self.later_retries} {plural})"
        return "both committed"

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy.policy,
            "isolation_level": self.policy.isolation_level,
            "table": self.policy.table_name,
            "earlier": self.scenario.earlier.operation.display,
            "later": self.scenario.later.operation.display,
            "earlier_partition": f"dt={self.scenario.earlier.partition}",
            "later_partition": f"dt={self.scenario.later.partition}",
            "outcome": self.outcome,
            "summary": self.summary,
            "earlier_version": self.earlier_version,
            "later_version": self.later_version,
            "later_retries": self.later_retries,
            "exception": self.exception,
            "message": self.message,
        }


class Committable(Protocol):
    def commit(self) -> CommitInfo: ...


def commit_in_order(spec: PolicySpec, scenario: Scenario, earlier: Committable, later: Committable) -> ScenarioResult:
    """E commits, then L: both staged already. L either commits (rebased) or fails with its conflict."""
    won = earlier.commit()
    try:
        info = later.commit()
    except ConcurrentModificationException as exc:
        return ScenarioResult(spec, scenario, won.version, None, 0, type(exc).__name__, str(exc))
    return ScenarioResult(spec, scenario, won.version, info.version, info.retries, None, None)


SCENARIO_COLUMNS = ("POLICY", "EARLIER (E)", "LATER (L)", "PARTITIONS", "OUTCOME")


def scenario_rows(results: Sequence[ScenarioResult]) -> list[tuple[str, str, str, str, str]]:
    """One line per pair, for the SCENARIO_COLUMNS table both demos print."""
    return [
        (
            r.policy.label,
            r.scenario.earlier.operation.display,
            r.scenario.later.operation.display,
            r.scenario.partitions,
            r.summary,
        )
        for r in results
    ]


@dataclass(frozen=True)
class SnapshotView:
    label: str
    version: int
    time_version: datetime | None
    active_files: int
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            "read_as": self.label,
            "version": self.version,
            "time_version": rfc3339(self.time_version),
            "active_files": self.active_files,
            "rows": self.rows,
        }


@dataclass(frozen=True)
class ChangeView:
    version: int
    time_version: datetime | None
    operation: str
    files_added: int
    files_removed: int
    rows_added: int
    rows_removed: int

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time_version": rfc3339(self.time_version),
            "operation": self.operation,
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "rows_added": self.rows_added,
            "rows_removed": self.rows_removed,
        }


@dataclass(frozen=True)
class TimeTravel:
    table: str
    since_version: int
    snapshots: tuple[SnapshotView, ...]
    changes: tuple[ChangeView, ...]
    #: commits in the range that changes() leaves out because they changed no data (D-18)
    rewrites_left_out: tuple[tuple[int, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "snapshots": [s.to_json() for s in self.snapshots],
            "changes_since_version": self.since_version,
            "changes": [c.to_json() for c in self.changes],
            "rewrites_left_out": [{"version": v, "operation": op} for v, op in self.rewrites_left_out],
        }

    def to_text(self) -> str:
        snapshots = table(
            ("READ AS", "VERSION", "TIME VERSION", "FILES", "ROWS"),
            [(s.label, s.version, s.time_version, s.active_files, s.rows) for s in self.snapshots],
        )
        changes = table(
            ("VERSION", "TIME VERSION", "OPERATION", "FILES +", "FILES -", "ROWS +", "ROWS -"),
            [
                (c.version, c.time_version, c.operation, c.files_added, c.files_removed, c.rows_added, c.rows_removed)
                for c in self.changes
            ],
        )
        left_out = ", ".join(f"{op} at version {v}" for v, op in self.rewrites_left_out)
        note = f"; left out, as they changed no data: {left_out}" if left_out else ""
        return "\n".join(
            [
                f"Time travel on {self.table}:",
                snapshots,
                "",
                f"changes(start_version={self.since_version + 1}) on {self.table}{note}:",
                changes,
            ]
        )


@dataclass(frozen=True)
class DemoResult:
    scenarios: tuple[ScenarioResult, ...]
    time_travel: TimeTravel

    def to_json(self) -> dict[str, Any]:
        return {"scenarios": [s.to_json() for s in self.scenarios], "time_travel": self.time_travel.to_json()}

    def to_text(self) -> str:
        rows = scenario_rows(self.scenarios)
        return "\n".join(
            [
                "Each pair overlaps: E begins, L begins, both stage a file, E commits, then L commits.",
                "",
                table(SCENARIO_COLUMNS, rows),
                "",
                self.time_travel.to_text(),
            ]
        )


# --- running -------------------------------------------------------------------------------------------


def _create(catalog: Catalog, spec: PolicySpec, stager: Stager) -> Table:
    created = catalog.create_table(
        spec.table_name,
        SCHEMA,
        partition_by=["dt"],
        primary_key=["id"] if spec.primary_key else (),
        conflict_policy=spec.policy,
        isolation_level=spec.isolation_level,
    )
    with created.begin(Operation.INSERT_INTO) as txn:
        for partition, files, rows_per_file in _INITIAL_LOAD:
            stager.load(txn, partition, files, rows_per_file)
        txn.commit()
    return created


def run_scenario(target: Table, spec: PolicySpec, scenario: Scenario, stager: Stager) -> ScenarioResult:
    """E begins, L begins, E stages, L stages, E commits, L commits: the seeds' interleaving, exactly."""
    earlier = target.begin(scenario.earlier.operation)
    later = target.begin(scenario.later.operation)
    try:
        stager.stage(earlier, scenario.earlier)
        stager.stage(later, scenario.later)
        return commit_in_order(spec, scenario, earlier, later)
    finally:
        # a job that did not get to commit (the stager failed) leaves nothing behind; no-op otherwise
        earlier.abort()
        later.abort()


def time_travel(target: Table, since_version: int) -> TimeTravel:
    """Read the table as of an earlier version, as of that version's time, and now; then its changes."""
    then = target.snapshot(version=since_version)
    then_time = to_datetime(then.time_version)
    by_time = target.snapshot(timestamp=then_time) if then_time is not None else then
    now = target.snapshot()
    views = tuple(
        SnapshotView(label, s.version, to_datetime(s.time_version), len(s.files_by_path), s.row_count)
        for label, s in (
            (f"version={since_version}", then),
            (f"timestamp={rfc3339(then_time)}", by_time),
            ("now", now),
        )
    )
    changes = target.changes(start_version=since_version + 1)
    change_views = tuple(
        ChangeView(
            c.version,
            c.time_version,
            c.operation,
            len(c.added),
            len(c.removed),
            sum(f.live_rows for f in c.added),
            sum(f.live_rows for f in c.removed),
        )
        for c in changes
    )
    changed = {c.version for c in changes}
    left_out = tuple(
        (h.version, h.operation)
        for h in reversed(target.history())
        if h.version > since_version and h.version not in changed
    )
    return TimeTravel(target.name, since_version, views, change_views, left_out)


def run_demo(
    *,
    policies: Sequence[PolicySpec] = POLICIES,
    scenarios: Sequence[Scenario] = SCENARIOS,
    stager: Stager | None = None,
) -> DemoResult:
    """Run every scenario on every policy against a fresh embedded etcd, and stop it afterwards."""
    if TIME_TRAVEL_POLICY not in policies:
        raise InvalidArgumentError(
            f"run_demo(): policies must include {TIME_TRAVEL_POLICY.label}, the time-travel table"
        )
    stager = stager or FileStager()
    results: list[ScenarioResult] = []
    with tempfile.TemporaryDirectory(prefix="acidtables-demo-") as home, Catalog.local(home) as catalog:
        loaded: dict[PolicySpec, tuple[Table, int]] = {}
        for spec in policies:
            target = _create(catalog, spec, stager)
            loaded[spec] = (target, target.version)
            for scenario in scenarios:
                results.append(run_scenario(target, spec, scenario, stager))
        travel = time_travel(*loaded[TIME_TRAVEL_POLICY])
    return DemoResult(tuple(results), travel)
