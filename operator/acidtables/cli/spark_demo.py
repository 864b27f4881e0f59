"""`acidtables demo`: the main job, live. Local Spark and an embedded etcd, nothing to set up.

For each conflict policy it creates a table, runs the seeds' pairs of overlapping Spark jobs (E
prepares, L prepares, E commits, L commits; each job is a real Spark write of staged Parquet files), and
prints who won. Then it compacts the small files the way the operator's automatic compaction would,
travels back in time by version and by timestamp, and reads the changes incrementally. Everything runs
in a temporary directory that is removed at the end, and Spark and etcd are stopped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from acidtables.core import AcidTablesError, Catalog, Operation
from acidtables.spark import Prepared, SparkTable, local_session, stop_session

from .demo import (
    POLICIES,
    SCENARIO_COLUMNS,
    Job,
    PolicySpec,
    Scenario,
    ScenarioResult,
    commit_in_order,
    scenario_rows,
)
from .output import table

SCHEMA = "id BIGINT, v STRING, dt STRING"

#: pairs of overlapping jobs; together they show both outcomes on every policy (conflict-rules §3.1, §8.1)
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.INSERT_INTO, "a")),
    Scenario(Job(Operation.INSERT_OVERWRITE, "a"), Job(Operation.INSERT_INTO, "a")),
    Scenario(Job(Operation.UPDATE, "a"), Job(Operation.UPDATE, "a")),
    Scenario(Job(Operation.UPDATE, "a"), Job(Operation.DELETE, "b")),
    Scenario(Job(Operation.INSERT_INTO, "b"), Job(Operation.MINOR_COMPACT, "b")),
)

#: automatic compaction starts when a partition holds at least this many small files (operator default)
SMALL_FILES_THRESHOLD = 4


@dataclass(frozen=True)
class Compaction:
    table: str
    small_files_before: int
    files_before: int
    files_after: int
    groups_committed: int
    rows_unchanged: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TimeTravel:
    table: str
    reads: tuple[tuple[str, int, int], ...]  # (read as, version, rows)
    changes: tuple[tuple[int, str, int], ...]  # (version, change type, rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "reads": [{"read_as": r, "version": v, "rows": n} for r, v, n in self.reads],
            "changes": [{"version": v, "change_type": c, "rows": n} for v, c, n in self.changes],
        }


@dataclass(frozen=True)
class SparkDemoResult:
    scenarios: tuple[ScenarioResult, ...]
    compaction: Compaction
    time_travel: TimeTravel
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "scenarios": [s.to_json() for s in self.scenarios],
            "compaction": self.compaction.to_json(),
            "time_travel": self.time_travel.to_json(),
            "seconds": round(self.seconds, 1),
        }

    def to_text(self) -> str:
        rows = scenario_rows(self.scenarios)
        c = self.compaction
        travel = self.time_travel
        return "\n".join(
            [
                "Each pair overlaps: E and L both run their Spark job (staged, not visible), E commits, then L.",
                "",
                table(SCENARIO_COLUMNS, rows),
                "",
                f"Automatic-style compaction of {c.table}: {c.small_files_before} small files (threshold "
                f"{SMALL_FILES_THRESHOLD}) -> {c.groups_committed} group(s) committed, files {c.files_before} -> "
                f"{c.files_after}, rows {'unchanged' if c.rows_unchanged else 'CHANGED'}.",
                "",
                f"Time travel on {travel.table}:",
                table(("READ AS", "VERSION", "ROWS"), list(travel.reads)),
                "",
                f"Incremental read (changes) on {travel.table}; the compaction is not a change:",
                table(("VERSION", "CHANGE TYPE", "ROWS"), list(travel.changes)),
                "",
                f"Done in {self.seconds:.0f} s.",
            ]
        )


def _rows(spark: Any, dt: str, count: int, value: str, start: int) -> Any:
    return spark.createDataFrame([(start + i, value, dt) for i in range(count)], SCHEMA)


def _job(spark: Any, target: SparkTable, job: Job, ids: Callable[[], int]) -> Prepared:
    dt = job.partition
    op = job.operation
    result: object
    if op is Operation.INSERT_INTO:
        result = target.insert_into(_rows(spark, dt, 2, "inserted", ids()), commit=False)
    elif op is Operation.INSERT_OVERWRITE:
        result = target.insert_overwrite(_rows(spark, dt, 2, "overwritten", ids()), partition={"dt": dt}, commit=False)
    elif op is Operation.UPDATE:
        result = target.update(f"dt = '{dt}'", {"v": "'updated'"}, commit=False)
    elif op is Operation.DELETE:
        result = target.delete(f"dt = '{dt}' AND id % 2 = 0", commit=False)
    elif op is Operation.MINOR_COMPACT:
        result = target.compact("minor", where=f"dt = '{dt}'", target_file_bytes=1 << 20, commit=False)
    else:
        raise NotImplementedError(op.display)
    if not isinstance(result, Prepared):  # commit=False always returns the prepared operation
        raise TypeError(f"{op.display} committed although commit=False")
    return result


def run_scenario(
    spark: Any, target: SparkTable, spec: PolicySpec, scenario: Scenario, ids: Callable[[], int]
) -> ScenarioResult:
    earlier = _job(spark, target, scenario.earlier, ids)
    later = _job(spark, target, scenario.later, ids)
    return commit_in_order(spec, scenario, earlier, later)


def _create(catalog: Catalog, spark: Any, spec: PolicySpec, name: str | None = None) -> SparkTable:
    created = catalog.create_table(
        name or spec.table_name,
        SCHEMA,
        partition_by=["dt"],
        primary_key=["id"] if spec.primary_key else (),
        conflict_policy=spec.policy,
        isolation_level=spec.isolation_level,
    )
    target = SparkTable(spark, created)
    for start, dt in ((0, "a"), (10, "a"), (20, "b"), (30, "b")):  # two small files per partition
        target.insert_into(_rows(spark, dt, 2, "v0", start))
    return target


def run_spark_demo(
    policies: Sequence[PolicySpec] = POLICIES, scenarios: Sequence[Scenario] = SCENARIOS
) -> SparkDemoResult:
    started = time.monotonic()
    counter = iter(range(1000, 10_000_000, 10))
    spark = local_session("acidtables-demo")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="acidtables-demo-") as home, Catalog.local(home) as catalog:
            results = []
            for spec in policies:
                target = _create(catalog, spark, spec)
                for scenario in scenarios:
                    results.append(run_scenario(spark, target, spec, scenario, lambda: next(counter)))
            travel_table = _create(catalog, spark, PolicySpec("delta", "WriteSerializable"), name="demo.events")
            compaction, travel = _compact_and_travel(spark, travel_table, counter)
    finally:
        stop_session(spark)
    return SparkDemoResult(tuple(results), compaction, travel, time.monotonic() - started)


def _compact_and_travel(spark: Any, target: SparkTable, counter: Any) -> tuple[Compaction, TimeTravel]:
    before_version = target.table.version
    for _ in range(3):
        target.insert_into(_rows(spark, "c", 1, "trickle", next(counter)))
    target.delete("dt = 'a' AND id = 0")
    snapshot = target.table.snapshot()
    small = [f for f in snapshot.files if f.size_bytes < (96 << 20)]
    rows_before = sorted(map(tuple, target.read().collect()))
    infos = target.compact("minor", target_file_bytes=128 << 20) if len(small) >= SMALL_FILES_THRESHOLD else []
    after = target.table.snapshot()
    compaction = Compaction(
        target.name,
        len(small),
        len(snapshot.files),
        len(after.files),
        len(infos) if isinstance(infos, list) else 0,
        sorted(map(tuple, target.read().collect())) == rows_before,
    )
    first_data = target.table.history()[-2]  # version 1, the first load
    if first_data.time_version is None:
        raise AcidTablesError("the first load of the demo table has no time version")
    reads = [
        (f"version={before_version}", before_version, target.read(version=before_version).count()),
        (
            f"timestamp={first_data.time_version:%H:%M:%S.%f}",
            target.table.version_at(first_data.time_version),
            target.read(timestamp=first_data.time_version).count(),
        ),
        ("now", after.version, target.read().count()),
    ]
    changes = target.changes(start_version=before_version + 1).groupBy("_commit_version", "_change_type").count()
    change_rows = tuple(sorted((int(r[0]), str(r[1]), int(r[2])) for r in changes.collect()))
    return compaction, TimeTravel(target.name, tuple(reads), change_rows)
