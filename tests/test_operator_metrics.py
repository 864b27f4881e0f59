"""/metrics of the operator, scraped: cluster-wide counters include what happened in other processes
(this test process is one: its commits, conflicts, retries and aborts are counted by the operator from
etcd, not from anything it saw itself)."""

from __future__ import annotations

import urllib.request

import pytest
from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import SampleKey, catalog_name, eventually, metric_samples, table_resource
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Transaction
from acidtables.errors import ConcurrentAppendException


def scrape(port: str) -> dict[SampleKey, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return metric_samples(answer.read().decode())


def test_counters_include_what_other_processes_did(
    kube_api: envtest.KubeAPI,
    kube_namespace: str,
    operator: OperatorProcess,
    operator_env: dict[str, str],
    catalog: Catalog,
) -> None:
    envtest.apply(kube_api, kube_namespace, table_resource("counted"))
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Ready", "acidtable/counted", "-n", kube_namespace, "--timeout=60s"
    )
    table = catalog.table(catalog_name(kube_namespace, "counted"))
    namespace = kube_namespace.replace("-", "_")

    def append(tx: Transaction) -> Transaction:
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
        return tx

    earlier, later = append(table.begin("insert_into")), append(table.begin("insert_into"))
    earlier.commit()
    later.commit()  # rebased once: a retry
    first, second = table.begin("update"), table.begin("update")
    for tx in (first, second):
        tx.remove_files(tx.scan("dt = 'a'"))
        append(tx)
    first.commit()
    with pytest.raises(ConcurrentAppendException):
        second.commit()
    table.begin("insert_into").abort()

    port = operator_env["ACIDTABLES_METRICS_PORT"]
    labels = (("namespace", namespace), ("table", "counted"))

    def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        samples = scrape(port)
        aborts = ("acidtables_cluster_aborts_total", tuple(sorted((*labels, ("operation", "insert_into")))))
        version = ("acidtables_table_version", tuple(sorted(labels)))
        durations = (
            "acidtables_cluster_commit_duration_seconds_count",
            tuple(sorted((*labels, ("operation", "insert_into")))),
        )
        # counters come with the records; the table's gauges with its next status update (coalesced);
        # the commit durations in their own batch, which may land after both (seen on a loaded machine)
        wanted = samples.get(aborts) == 1 and samples.get(version) == 3 and samples.get(durations) == 2
        return samples if wanted else None

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = eventually(
        counted, "the abort and both commits' durations counted, the version shown", operator
    )

    def value(name: str, **extra: str) -> float | None:
        return samples.get((name, tuple(sorted((*labels, *extra.items())))))

    assert value("acidtables_cluster_commits_total", operation="insert_into") == 2
    assert value("acidtables_cluster_commits_total", operation="update") == 1
    assert value("acidtables_cluster_retries_total", operation="insert_into") == 1
    assert value("acidtables_cluster_conflicts_total", operation="update", exception="ConcurrentAppendException") == 1
    assert value("acidtables_table_version") == 3
    # commit latency as each writer measured it, read from the records: one observation per commit
    assert value("acidtables_cluster_commit_duration_seconds_count", operation="insert_into") == 2
    assert 0 < (value("acidtables_cluster_commit_duration_seconds_sum", operation="insert_into") or 0) < 10
    assert samples[("acidtables_operator_etcd_watch_up", ())] == 1
    # each newer version the status showed is one lag observation, taken within seconds of its commit
    lags = samples[("acidtables_operator_status_lag_seconds_count", ())]
    assert 1 <= lags <= 3 and samples[("acidtables_operator_status_lag_seconds_sum", ())] < 5 * lags


def test_a_tables_counters_are_exported_from_zero_before_anything_happens(
    kube_api: envtest.KubeAPI,
    kube_namespace: str,
    operator: OperatorProcess,
    operator_env: dict[str, str],
) -> None:
    """Issue 40, item 6: every counter of the operator and of a Ready table is there at 0 (a dashboard
    shows 0, not "no data", and rate() sees the first conflict)."""
    envtest.apply(kube_api, kube_namespace, table_resource("quiet"))
    envtest.kubectl(kube_api, "wait", "--for=condition=Ready", "acidtable/quiet", "-n", kube_namespace, "--timeout=60s")
    port = operator_env["ACIDTABLES_METRICS_PORT"]
    labels = (("namespace", kube_namespace.replace("-", "_")), ("table", "quiet"))

    def key(name: str, **extra: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted((*labels, *extra.items())))

    conflicts = key("acidtables_cluster_conflicts_total", operation="update", exception="ConcurrentAppendException")

    def exported() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        found = scrape(port)
        return found if found.get(conflicts) == 0 else None

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = eventually(
        exported, "the table's counters at zero", operator
    )
    for name in ("commits", "retries", "exhausted", "aborts"):
        assert samples[key(f"acidtables_cluster_{name}_total", operation="insert_into")] == 0
    assert samples[key("acidtables_maintenance_runs_total", kind="expire", outcome="refused")] == 0
    assert samples[key("acidtables_maintenance_bytes_freed_total")] == 0
    assert samples[("acidtables_operator_reconcile_errors_total", (("kind", "AcidTable"),))] == 0
    assert samples[("acidtables_compaction_jobs_total", (("result", "Succeeded"), ("type", "minor")))] == 0
