"""e2e, on a real cluster: the AcidTable lifecycle (create and adopt, an added column failing a concurrent
writer, an invalid spec, deletion with Retain and Delete) and /metrics scraped through the API server's
service proxy, counting a separate writer's conflicts.

Needs only ACIDTABLES_E2E_KUBECONFIG and ACIDTABLES_E2E_IMAGE (skipped without the first). The module
installs the chart (helm-sdkpy) into a fresh namespace with its bundled etcd (one member) and the
warehouse on a PersistentVolumeClaim of that namespace (`warehouse.volume`, mounted at /warehouse in the
operator, the job pods and the writer pods: the cluster's default StorageClass, ReadWriteOnce, which
suits single-node clusters such as kind; ACIDTABLES_E2E_STORAGE_CLASS names a ReadWriteMany class for
others), and deletes it all afterwards. Writers and readers are pods of the same image
(tests/helpers/e2e_pod.py) reporting JSON in their termination message, so this process needs no path
to etcd or the warehouse: only to the API server.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers.cluster import Release, skip_reason
from tests.helpers.resources import SPEC, catalog_name, condition, events_for, eventually, get, table_resource

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


def ready(release: Release, name: str) -> dict[str, Any]:
    return release.wait_for_condition("acidtables", name, "Ready")


def status_at(release: Release, name: str, version: int) -> dict[str, Any]:
    """The AcidTable's status once it shows `version` (it follows etcd by itself)."""

    def shown() -> dict[str, Any] | None:
        status: dict[str, Any] = get(release.cluster, release.namespace, name).get("status", {})
        return status if status.get("version") == version else None

    found: dict[str, Any] = eventually(shown, f"{name}'s status at version {version}", release)
    return found


def test_a_new_acidtable_becomes_ready_and_its_status_follows_a_writer_pod(release: Release) -> None:
    release.apply(table_resource("orders", primaryKey=["id"], conflictPolicy="maxcompute"))
    resource = ready(release, "orders")
    status = resource["status"]
    assert (status["version"], status["conflictPolicy"]) == (0, "maxcompute")
    assert status["observedGeneration"] == resource["metadata"]["generation"] == 1
    assert any(e["reason"] == "Created" for e in events_for(release.cluster, release.namespace, "orders"))

    table = catalog_name(release.namespace, "orders")
    written = release.run("insert", "insert", {"table": table, "partition": "2026-11-01", "rows": 3})
    assert written["versions"] == [1]
    followed = status_at(release, "orders", 1)
    assert (followed["files"], followed["rows"], followed["lastCommit"]["operation"]) == (1, 3, "INSERT INTO")


def test_an_existing_table_with_the_same_definition_is_adopted_and_a_different_one_is_not_touched(
    release: Release,
) -> None:
    same = release.run(
        "create",
        "create_table",
        {
            "table": catalog_name(release.namespace, "same"),
            "schema": "id BIGINT NOT NULL, dt STRING, amount DOUBLE",
            "partition_by": ["dt"],
        },
    )
    release.run("create", "create_table", {"table": catalog_name(release.namespace, "other"), "schema": "id BIGINT"})
    release.apply(table_resource("same"))
    release.apply(table_resource("other"))
    assert ready(release, "same")["status"]["tableId"] == same["table_id"]
    mismatch = eventually(
        lambda: condition(get(release.cluster, release.namespace, "other"), "Ready"), "a Ready condition", release
    )
    assert (mismatch["status"], mismatch["reason"]) == ("False", "DefinitionMismatch")
    assert "schema: the table has (id BIGINT)" in mismatch["message"]
    warnings = [e for e in events_for(release.cluster, release.namespace, "other") if e["type"] == "Warning"]
    assert warnings, "no Warning event for the mismatch"
    other = release.run("read", "read", {"table": catalog_name(release.namespace, "other")})
    assert (other["columns"], other["version"]) == (["id"], 0)  # never overwritten


def test_adding_a_column_alters_the_table_and_fails_a_concurrent_writer_pod(release: Release) -> None:
    release.apply(table_resource("grows"))
    ready(release, "grows")
    table = catalog_name(release.namespace, "grows")
    writer = release.start("held", "hold_insert", {"table": table, "partition": "a", "until_column": "note"})
    # the writer's INSERT INTO is prepared and registered in etcd: the status counts it in flight
    eventually(
        lambda: get(release.cluster, release.namespace, "grows").get("status", {}).get("inFlight") == 1,
        "the held insert in flight",
        release,
        timeout_seconds=300,
    )
    grown = table_resource("grows")
    grown["spec"]["schema"] = [*SPEC["schema"], {"name": "note", "type": "string"}]
    release.apply(grown)
    eventually(
        lambda: get(release.cluster, release.namespace, "grows").get("status", {}).get("observedGeneration") == 2,
        "observedGeneration 2",
        release,
    )
    outcome = release.result(writer)
    assert outcome["exception"] == "MetadataChangedException", outcome
    after = release.run("read", "read", {"table": table})
    assert after["columns"] == ["id", "dt", "amount", "note"]
    assert after["rows"] == 0  # the writer committed nothing


def test_an_invalid_spec_is_a_condition_and_an_event_not_a_crash(release: Release) -> None:
    bad = table_resource("broken")
    bad["spec"]["schema"] = [{"name": "id", "type": "bigintt"}]
    bad["spec"]["partitionBy"] = []
    release.apply(bad)
    found = eventually(
        lambda: condition(get(release.cluster, release.namespace, "broken"), "Ready"), "a Ready condition", release
    )
    assert (found["status"], found["reason"]) == ("False", "InvalidSpec")
    assert "bigintt" in found["message"]
    warning = eventually(
        lambda: [e for e in events_for(release.cluster, release.namespace, "broken") if e["type"] == "Warning"],
        "a Warning event",
        release,
    )
    assert "bigintt" in warning[0]["message"]
    assert release.run("exists", "exists", {"table": catalog_name(release.namespace, "broken")})["exists"] is False
    release.apply(table_resource("healthy"))  # the operator still serves other resources
    ready(release, "healthy")


@pytest.mark.parametrize("policy", ["Retain", "Delete"])
def test_deletion_honours_the_deletion_policy(release: Release, policy: str) -> None:
    name = f"doomed-{policy.lower()}"
    table = catalog_name(release.namespace, name)
    release.apply(table_resource(name, deletionPolicy=policy))
    ready(release, name)
    release.run("insert", "insert", {"table": table, "partition": "a"})
    location = release.run("read", "read", {"table": table})["location"]
    path = f"/apis/acidtables.io/v1alpha1/namespaces/{release.namespace}/acidtables/{name}"
    release.cluster.delete(path)
    eventually(
        lambda: not release.cluster.exists(path),
        "the resource gone (its finalizer released)",
        release,
    )
    left = release.run("exists", "exists", {"table": table, "location": location})
    if policy == "Retain":
        assert (left["exists"], left["data_files"]) == (True, 1)
    else:
        assert (left["exists"], left["data_files"]) == (False, 0)


def test_metrics_scraped_through_the_service_count_a_writer_pods_commits_and_conflicts(release: Release) -> None:
    release.apply(table_resource("counted"))
    ready(release, "counted")
    reported = release.run("conflicts", "conflicts", {"table": catalog_name(release.namespace, "counted")})
    assert (reported["retries"], reported["conflict"]["exception"], reported["version"]) == (
        1,
        "ConcurrentAppendException",
        3,
    )
    labels = (("namespace", release.namespace.replace("-", "_")), ("table", "counted"))

    def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        samples = release.metrics()
        aborts = ("acidtables_cluster_aborts_total", tuple(sorted((*labels, ("operation", "insert_into")))))
        version = ("acidtables_table_version", tuple(sorted(labels)))
        return samples if samples.get(aborts) == 1 and samples.get(version) == 3 else None

    samples = eventually(counted, "the writer pod's abort counted and version 3 shown", release)

    def value(name: str, **extra: str) -> float | None:
        found: float | None = samples.get((name, tuple(sorted((*labels, *extra.items())))))
        return found

    assert value("acidtables_cluster_commits_total", operation="insert_into") == 2
    assert value("acidtables_cluster_commits_total", operation="update") == 1
    assert value("acidtables_cluster_retries_total", operation="insert_into") == 1
    assert value("acidtables_cluster_conflicts_total", operation="update", exception="ConcurrentAppendException") == 1
    assert samples[("acidtables_operator_etcd_watch_up", ())] == 1
