"""/metrics of the operator, scraped: cluster-wide counters include what happened in other processes
(this test process is one: its commits, conflicts, retries and aborts are counted by the operator from
etcd, not from anything it saw itself)."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import catalog_name, eventually, table_resource
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Transaction
from acidtables.errors import ConcurrentAppendException


def scrape(port: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


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
