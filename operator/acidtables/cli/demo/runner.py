"""`acidtables demo --core`: overlapping transactions on each conflict policy, on the core alone, in seconds.

It starts an embedded etcd in a temporary directory, creates one table per policy, and runs each
scenario through the two-phase API in the seeds' order — E begins, L begins, both stage a small real
Parquet file (`FileStager`), E commits, then L commits — and reports what actually happened. Nothing is
scripted: a wrong conflict rule in core shows up as a wrong line. It ends with time travel and
`changes()` on one of the tables and DuckDB querying it (`Table.scan(...).to_duckdb(...)`), then stops
etcd and deletes the directory. `acidtables demo` (no `--core`) runs the same kind of pairs as Spark
jobs (`demo.spark`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

from acidtables.core import Catalog, InvalidArgumentError, Operation, Table

from .duckdb_read import duckdb_read
from .scenarios import CORE_SCENARIOS, INITIAL_LOAD, POLICIES, SCHEMA, TIME_TRAVEL_POLICY, PolicySpec, Scenario
from .staging import FileStager
from .views import DemoResult, ScenarioResult, commit_in_order, time_travel

INTERLEAVING = "Each pair overlaps: E begins, L begins, both stage a file, E commits, then L commits."


def _create(catalog: Catalog, spec: PolicySpec, stager: FileStager) -> Table:
    created = catalog.create_table(
        spec.table_name,
        SCHEMA,
        partition_by=["dt"],
        primary_key=["id"] if spec.primary_key else (),
        conflict_policy=spec.policy,
        isolation_level=spec.isolation_level,
    )
    with created.begin(Operation.INSERT_INTO) as txn:
        for partition, files, rows_per_file in INITIAL_LOAD:
            stager.load(txn, partition, files, rows_per_file)
        txn.commit()
    return created


def run_scenario(target: Table, spec: PolicySpec, scenario: Scenario, stager: FileStager) -> ScenarioResult:
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


def run_demo(
    *,
    policies: Sequence[PolicySpec] = POLICIES,
    scenarios: Sequence[Scenario] = CORE_SCENARIOS,
) -> DemoResult:
    """Run every scenario on every policy against a fresh embedded etcd, and stop it afterwards."""
    if TIME_TRAVEL_POLICY not in policies:
        raise InvalidArgumentError(
            f"run_demo(): policies must include {TIME_TRAVEL_POLICY.label}, the time-travel table"
        )
    stager = FileStager()
    results: list[ScenarioResult] = []
    with tempfile.TemporaryDirectory(prefix="acidtables-demo-") as home, Catalog.local(home) as catalog:
        loaded: dict[PolicySpec, tuple[Table, int]] = {}
        for spec in policies:
            target = _create(catalog, spec, stager)
            loaded[spec] = (target, target.version)
            for scenario in scenarios:
                results.append(run_scenario(target, spec, scenario, stager))
        travel = time_travel(*loaded[TIME_TRAVEL_POLICY])
        duckdb = duckdb_read(catalog, TIME_TRAVEL_POLICY.table_name)
    return DemoResult(INTERLEAVING, tuple(results), travel, duckdb=duckdb)
