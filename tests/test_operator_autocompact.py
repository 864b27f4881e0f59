"""Automatic compaction on a real kube-apiserver: after many small inserts the operator creates a
CompactionJob by itself, and it is conflict-aware: with a writer holding an in-flight INSERT INTO on
partition p of a `maxcompute` table, it compacts p with MINOR, and the writer's commit still succeeds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from tests.helpers import envtest
from tests.helpers.kubelet import Kubelet
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import automatic_jobs, catalog_name, events_for, eventually, table_resource
from tests.helpers.tables import staged_parquet

from acidtables import Catalog
from acidtables.spark import SparkTable

pytestmark = pytest.mark.slow  # the job starts a Spark JVM in its driver process

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


def test_automatic_minor_compaction_next_to_an_in_flight_insert(
    kube_api: envtest.KubeAPI,
    kube_namespace: str,
    operator: OperatorProcess,
    catalog: Catalog,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    compaction = {"auto": True, "minor": {"minSmallFiles": 3}, "major": {"minDeltaFiles": 3, "quietFor": "1h"}}
    resource = table_resource("auto", primaryKey=["id"], conflictPolicy="maxcompute", compaction=compaction)
    envtest.apply(kube_api, kube_namespace, resource)
    envtest.kubectl(kube_api, "wait", "--for=condition=Ready", "acidtable/auto", "-n", kube_namespace, "--timeout=60s")
    with Kubelet(kube_api, kube_namespace, tmp_path, hold=("blocker-*",)) as kubelet:
        # a job of the user's that never starts: automatic compaction waits beside it, never next to it
        blocker = {"apiVersion": "acidtables.io/v1alpha1", "kind": "CompactionJob", "metadata": {"name": "blocker"}}
        envtest.apply(kube_api, kube_namespace, {**blocker, "spec": {"table": "auto", "type": "minor"}})
        t = SparkTable(spark, catalog.table(catalog_name(kube_namespace, "auto")))
        for i in range(3):  # three small delta files in dt=p: over the threshold
            t.insert_into(spark.createDataFrame([(i, "p", float(i))], SCHEMA))
        writer = t.insert_into(spark.createDataFrame([(100, "p", 1.0)], SCHEMA), commit=False)  # in flight on dt=p
        assert automatic_jobs(kube_api, kube_namespace) == []
        # running for over a second, the writer is registered in etcd, with the partition it writes
        eventually(lambda: [r.operation for r in t.table.in_flight()] == ["insert_into"], "registered", operator)
        envtest.kubectl(kube_api, "delete", "compactionjob", "blocker", "-n", kube_namespace)  # now it decides
        deadline = time.monotonic() + 180
        while not any(
            j.get("status", {}).get("phase") == "Succeeded" for j in automatic_jobs(kube_api, kube_namespace)
        ):
            assert time.monotonic() < deadline, operator.log()[-4000:] + str(kubelet.errors)
            time.sleep(0.2)  # polling interval of the wait
    (job,) = automatic_jobs(kube_api, kube_namespace)
    assert (job["spec"]["type"], job["spec"]["where"]) == ("minor", "dt = 'p'")
    assert job["metadata"]["ownerReferences"][0]["name"] == "auto"
    event = next(e for e in events_for(kube_api, kube_namespace, "auto") if e["reason"] == "AutoCompaction")
    assert "MINOR because 1 running write(s) there" in event["message"]

    info = writer.commit()  # MINOR next to INSERT INTO: the writer still commits (seed 000)
    assert info.retries == 1
    history = [h.operation.display for h in t.table.history()]
    assert history[:2] == ["INSERT INTO", "MINOR COMPACT"]
    assert sorted(tuple(r) for r in t.read().collect()) == [
        (0, "p", 0.0),
        (1, "p", 1.0),
        (2, "p", 2.0),
        (100, "p", 1.0),
    ]


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "orders.yaml"


def test_automatic_compaction_with_the_examples_thresholds_says_in_status_what_it_waits_for(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog
) -> None:
    """Issue 40, item 7, on a real API server (its structural schema keeps status.autoCompaction only if
    the CRD declares it): examples/orders.yaml as it is; 52 small files over four partitions start
    nothing and `kubectl describe` says why; the 16th in one partition starts a MINOR there."""
    envtest.kubectl(kube_api, "apply", "-n", kube_namespace, "-f", str(EXAMPLE))
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Ready", "acidtable/orders", "-n", kube_namespace, "--timeout=60s"
    )
    table = catalog.table(catalog_name(kube_namespace, "orders"))

    def commit(per_partition: dict[str, int]) -> None:
        for round_ in range(max(per_partition.values())):
            tx = table.begin("insert_into")
            tx.add_files([staged_parquet(tx, {"dt": dt}) for dt, n in sorted(per_partition.items()) if round_ < n])
            tx.commit()

    commit({"2026-11-01": 15, "2026-11-02": 13, "2026-11-03": 12, "2026-11-04": 12})

    def said() -> str | None:
        found = kube_api.request("GET", f"/apis/acidtables.io/v1alpha1/namespaces/{kube_namespace}/acidtables/orders")
        verdict = found.get("status", {}).get("autoCompaction") or {}
        message = str(verdict.get("message") or "")
        return message if verdict.get("reason") == "BelowThresholds" and "15 small files" in message else None

    message = eventually(said, "status.autoCompaction on the fullest partition", operator)
    assert message.startswith("the fullest of 4 partitions, dt=2026-11-01, has 15 small files (under 32Mi; "), message
    described = envtest.kubectl(kube_api, "describe", "acidtable/orders", "-n", kube_namespace)
    assert "Auto Compaction:" in described and "BelowThresholds" in described, described
    assert automatic_jobs(kube_api, kube_namespace) == []
    commit({"2026-11-01": 1})  # the 16th
    (job,) = eventually(lambda: automatic_jobs(kube_api, kube_namespace), "an automatic CompactionJob", operator)
    assert (job["spec"]["type"], job["spec"]["where"]) == ("minor", "dt = '2026-11-01'")
