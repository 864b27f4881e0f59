"""Every handler's decisions, and every failure path of a driver pod, with the operator's real kopf
registry against kmock's emulated API server and a real etcd (tests/helpers/kmock_operator.py): the
operator tier that runs in CI, where no kube-apiserver exists. Each scenario waits on what the operator
writes (status, conditions, Events, pods) with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client.metrics import MetricWrapperBase
from pyspark.sql import SparkSession
from tests.helpers.kmock_operator import KmockOperator, running_operator
from tests.helpers.kmock_resources import (
    NS,
    SECONDS,
    container,
    create,
    driver_pod,
    event_with,
    events,
    get,
    play_kubelet,
    ready_table,
    with_condition,
)
from tests.helpers.resources import GROUP, condition, job_resource, table_resource
from tests.helpers.streams import drop_batch
from tests.helpers.streams import events as event_stream
from tests.helpers.tables import staged_parquet

from acidtables import Catalog
from acidtables.core import Column, TableNotFoundError
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.operator import conditions, driving
from acidtables.operator.pods import JOB_LABEL


@pytest.fixture
def op(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    etcd_server: EmbeddedEtcd,
    etcd_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[KmockOperator]:
    """The operator; a test parametrized indirectly on `op` gives it OperatorConfig fields."""
    config = getattr(request, "param", {})
    yield from running_operator(tmp_path, etcd_server.endpoint, etcd_prefix, monkeypatch.setenv, **config)


@pytest.fixture
def catalog(op: KmockOperator) -> Iterator[Catalog]:
    """The test's own client of the operator's catalog (same etcd prefix and warehouse)."""
    cat = Catalog(Settings(etcd=EtcdSettings(op.settings.etcd.endpoints, prefix=op.settings.etcd.prefix),
                           warehouse=op.settings.warehouse))  # fmt: skip
    try:
        yield cat
    finally:
        cat.close()


# --- AcidTable ---------------------------------------------------------------------------------------


def test_a_new_acidtable_creates_its_table_and_is_ready(op: KmockOperator, catalog: Catalog) -> None:
    table = ready_table(op)
    assert condition(table, "Ready")["reason"] == "Created"  # type: ignore[index]
    assert table["status"]["catalogName"] == "sales.orders" and table["status"]["version"] == 0
    assert catalog.table("sales.orders").table_id == table["status"]["tableId"]
    assert table["metadata"]["finalizers"] == ["acidtables.io/finalizer"]
    event_with(op, "orders", "Created")


def test_an_acidtable_adopts_the_table_etcd_already_has(op: KmockOperator, catalog: Catalog) -> None:
    from acidtables.operator.definition import TableDefinition

    definition = TableDefinition.from_spec(table_resource("orders")["spec"])
    existing = catalog.create_table("sales.orders", list(definition.columns), **definition.create_options())
    table = ready_table(op)
    assert condition(table, "Ready")["reason"] == "Adopted"  # type: ignore[index]
    assert table["status"]["tableId"] == existing.table_id


def test_an_acidtable_whose_table_differs_is_degraded_not_overwritten(op: KmockOperator, catalog: Catalog) -> None:
    catalog.create_table("sales.orders", [Column("id", "bigint", False)])
    create(op, "acidtables", table_resource("orders"))
    table = with_condition(op, "acidtables", "orders", "Degraded")
    assert condition(table, "Ready")["status"] == "False"  # type: ignore[index]
    assert condition(table, "Degraded")["reason"] == "DefinitionMismatch"  # type: ignore[index]
    event_with(op, "orders", "DefinitionMismatch")
    assert [c.name for c in catalog.table("sales.orders").metadata.columns] == ["id"]


def test_a_column_added_to_the_spec_alters_the_table(op: KmockOperator, catalog: Catalog) -> None:
    table = ready_table(op)
    schema = [*table["spec"]["schema"], {"name": "note", "type": "string"}]
    op.request("PATCH", f"{GROUP}/namespaces/{NS}/acidtables/orders", {"spec": {"schema": schema}})
    op.eventually(
        lambda: [c.name for c in catalog.table("sales.orders").metadata.columns][-1] == "note",
        "the column added in etcd",
        SECONDS,
    )
    altered = event_with(op, "orders", "Altered")
    assert "added columns note" in altered["message"]


def test_conflict_detection_in_the_spec_is_the_tables_setting_and_a_change_alters_it(
    op: KmockOperator, catalog: Catalog
) -> None:
    ready_table(op)
    assert catalog.table("sales.orders").metadata.conflict_detection == "partitions"
    op.request("PATCH", f"{GROUP}/namespaces/{NS}/acidtables/orders", {"spec": {"conflictDetection": "statistics"}})
    op.eventually(
        lambda: catalog.table("sales.orders").metadata.conflict_detection == "statistics",
        "acidtables.conflictDetection=statistics in etcd",
        SECONDS,
    )


@pytest.mark.parametrize(("policy", "kept"), [("Retain", True), ("Delete", False)])
def test_deleting_an_acidtable_follows_its_deletion_policy(
    op: KmockOperator, catalog: Catalog, policy: str, kept: bool
) -> None:
    ready_table(op, deletionPolicy=policy)
    op.request("DELETE", f"{GROUP}/namespaces/{NS}/acidtables/orders")
    op.eventually(lambda: not op.objects("acidtables.io/v1alpha1/acidtables", NS), "the AcidTable released", SECONDS)
    event_with(op, "orders", "Released")
    try:
        catalog.table("sales.orders")
        still_there = True
    except TableNotFoundError:  # dropped with its data
        still_there = False
    assert still_there is kept


def test_deletion_policy_delete_never_drops_a_table_the_acidtable_did_not_manage(
    op: KmockOperator, catalog: Catalog
) -> None:
    """Someone else's sales.orders, of another definition: the AcidTable never adopts it (Definition
    Mismatch), so deleting the AcidTable, even with deletionPolicy Delete, leaves it and its data."""
    theirs = catalog.create_table("sales.orders", schema="id BIGINT NOT NULL, note STRING")
    create(op, "acidtables", table_resource("orders", deletionPolicy="Delete"))
    event_with(op, "orders", "DefinitionMismatch")
    op.request("DELETE", f"{GROUP}/namespaces/{NS}/acidtables/orders")
    released = event_with(op, "orders", "Released")
    assert "kept: this AcidTable never managed a table" in released["message"]
    assert catalog.table("sales.orders").table_id == theirs.table_id


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_an_operator_given_namespaces_acts_in_those_alone(
    tmp_path: Path, etcd_server: EmbeddedEtcd, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`acidtables operator --namespace=sales`, as the chart runs it for one namespace: kopf lists and
    watches Namespace objects to find the ones it serves (the emulator once answered that list with a
    500, which stopped the operator), reconciles the AcidTable in `sales` once that namespace exists, and
    never touches the one in `elsewhere`."""
    for op in running_operator(tmp_path, etcd_server.endpoint, etcd_prefix, monkeypatch.setenv, namespaces=(NS,)):
        op.request("POST", "/api/v1/namespaces", namespace("elsewhere"))
        elsewhere = table_resource("orders")
        elsewhere["metadata"]["namespace"] = "elsewhere"
        op.request("POST", f"{GROUP}/namespaces/elsewhere/acidtables", elsewhere)
        op.request("POST", "/api/v1/namespaces", namespace(NS))
        table = ready_table(op)
        assert table["status"]["catalogName"] == "sales.orders"
        untouched = op.request("GET", f"{GROUP}/namespaces/elsewhere/acidtables/orders")
        assert "status" not in untouched and not untouched["metadata"].get("finalizers")
        names = {item["metadata"]["name"] for item in op.request("GET", "/api/v1/namespaces")["items"]}
        assert {"default", "kube-system", NS, "elsewhere"} <= names


# --- CompactionJob -----------------------------------------------------------------------------------


def test_a_compaction_job_creates_its_driver_pod_with_the_job_in_its_command(op: KmockOperator) -> None:
    ready_table(op)
    job = create(op, "compactionjobs", job_resource("compact", table="orders", where="dt = 'a'"))
    pod = driver_pod(op, "compact")
    command = pod["spec"]["containers"][0]["command"]
    assert command[:4] == ["python", "-m", "acidtables.jobs", "compact"]
    assert command[command.index("--table") + 1] == "sales.orders"
    assert command[command.index("--job-id") + 1] == job["metadata"]["uid"]
    assert command[command.index("--where") + 1] == "dt = 'a'"
    assert pod["metadata"]["labels"][JOB_LABEL] == "compact"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert pod["spec"]["containers"][0]["image"] == "acidtables-test:1"
    # the pod is created before the handler's status patch lands
    op.eventually(
        lambda: get(op, "compactionjobs", "compact").get("status", {}).get("phase") == "Pending",
        "the job's phase Pending",
        SECONDS,
    )
    event_with(op, "compact", "Started")


@pytest.mark.parametrize(("size", "in_bytes"), [("512Ki", 524288), ("1.5Gi", 1610612736), ("128M", 128000000)])
def test_every_size_the_crd_accepts_reaches_the_driver_in_bytes(op: KmockOperator, size: str, in_bytes: int) -> None:
    """`Ki` once failed to parse after the CRD had accepted it: no driver, no status, a timer retrying."""
    ready_table(op)
    create(op, "compactionjobs", job_resource("sized", table="orders", targetFileBytes=size))
    command = driver_pod(op, "sized")["spec"]["containers"][0]["command"]
    assert command[command.index("--target-file-bytes") + 1] == str(in_bytes)


@pytest.mark.parametrize("spelled", ["orders-v2", "orders_v2"])
def test_a_job_names_a_hyphenated_acidtable_either_way(op: KmockOperator, spelled: str) -> None:
    """docs' `orders-v2`: a job may name it as the resource does or as the catalog does (`orders_v2`);
    either way it compacts sales.orders_v2 and the AcidTable shows it Compacting."""
    ready_table(op, "orders-v2")
    create(op, "compactionjobs", job_resource("compact", table=spelled))
    command = driver_pod(op, "compact")["spec"]["containers"][0]["command"]
    assert command[command.index("--table") + 1] == "sales.orders_v2"
    with_condition(op, "acidtables", "orders-v2", "Compacting", "True")


def test_a_succeeded_driver_ends_the_job_and_the_tables_compacting_within_seconds(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    driver_pod(op, "compact")
    with_condition(op, "acidtables", "orders", "Compacting", "True")
    play_kubelet(op, "compact-driver-1", "Running")
    op.eventually(lambda: get(op, "compactionjobs", "compact")["status"].get("phase") == "Running", "Running", SECONDS)
    ended = time.monotonic()
    outcome = {"phase": "Succeeded", "committedVersion": 3, "filesRewritten": 4, "message": "compacted 4 files"}
    play_kubelet(op, "compact-driver-1", "Succeeded", outcome)
    job = with_condition(op, "compactionjobs", "compact", "Succeeded")
    assert job["status"]["phase"] == "Succeeded" and job["status"]["result"]["committedVersion"] == 3
    assert condition(job, "Failed")["status"] == "False"  # type: ignore[index]
    assert condition(job, "Stalled")["status"] == "False"  # type: ignore[index]
    assert condition(job, "Finished")["status"] == "True"  # type: ignore[index]  # one wait ends on any outcome
    with_condition(op, "acidtables", "orders", "Compacting", "False")
    # the pod's own event steps the job: far inside the 2 s timer tick plus a status round trip
    assert time.monotonic() - ended < 5
    event_with(op, "compact", "Succeeded")
    jobs = op.metrics.jobs.labels("minor", "Succeeded")._value.get()
    assert jobs == 1  # counted once, though the timer and the pod's events both step the job


def test_the_compacting_condition_never_undoes_a_condition_written_since_it_was_read(
    op: KmockOperator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on a real API server (issue 40): a job applied with its table stepped while kopf made the
    table Ready, and wrote Compacting back onto the conditions it had read before Ready (a merge patch
    replaces a whole list), so Ready was gone and the job waited for a table that was Ready. The write
    now lands only on the version it read; here another writer comes in between every first read."""
    ready_table(op)
    context = op.context
    assert context is not None
    path = f"{GROUP}/namespaces/{NS}/acidtables/orders/status"
    running = [{"metadata": {"name": "compact"}, "spec": {"table": "orders"}, "status": {"phase": "Running"}}]
    monkeypatch.setattr(context.kube, "list_jobs", lambda namespace: running)
    read_table, reads = context.kube.read_table, []

    def read_then_another_writer(namespace: str, name: str) -> dict[str, Any] | None:
        found = read_table(namespace, name)
        reads.append(found)
        if len(reads) == 1:  # the mirror's timer, say, after this read and before the write
            current = get(op, "acidtables", "orders")["status"]["conditions"]
            behind = {"type": "Degraded", "status": "True", "reason": "MirrorBehind", "message": "behind",
                      "lastTransitionTime": "2026-11-29T00:00:00Z"}  # fmt: skip
            op.request(
                "PATCH", path, {"status": {"conditions": [*[c for c in current if c["type"] != "Degraded"], behind]}}
            )
        return found

    monkeypatch.setattr(context.kube, "read_table", read_then_another_writer)
    driving.refresh_compacting(context, NS, "orders")
    table = get(op, "acidtables", "orders")
    assert condition(table, "Degraded")["reason"] == "MirrorBehind"  # type: ignore[index]
    assert condition(table, "Ready")["status"] == "True"  # type: ignore[index]
    assert condition(table, "Compacting")["status"] == "True"  # type: ignore[index]
    assert len(reads) == 2  # the first write was refused (409) and the table read again


def test_a_failed_driver_without_retries_fails_the_job_with_its_reason(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", backoffLimit=0))
    driver_pod(op, "compact")
    with_condition(op, "compactionjobs", "compact", "Finished", "False")  # patched just after the pod is created
    play_kubelet(op, "compact-driver-1", "Failed", {"phase": "Failed", "message": "executor lost"})
    job = with_condition(op, "compactionjobs", "compact", "Failed")
    assert job["status"]["phase"] == "Failed" and "executor lost" in job["status"]["message"]
    assert condition(job, "Finished")["status"] == "True"  # type: ignore[index]
    assert "executor lost" in event_with(op, "compact", "Failed")["message"]


def test_a_failed_driver_is_retried_with_a_new_pod(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", backoffLimit=1))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Failed", {"phase": "Failed", "message": "executor lost"})
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert "retrying in 10 s" in job["status"]["message"] and job["status"]["retryAt"]
    assert "retrying in 10 s" in event_with(op, "compact", "AttemptFailed")["message"]


def test_a_job_applied_before_its_table_waits_for_it_and_then_runs(op: KmockOperator) -> None:
    """One `kubectl apply -f` holding both, the job seen first (issue 40, item 1): it waits, saying so,
    and starts once the table is Ready."""
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert condition(job, "Stalled")["reason"] == "WaitingForTable"  # type: ignore[index]
    assert job["status"]["phase"] == "Pending" and "no AcidTable orders in namespace sales" in job["status"]["message"]
    assert condition(job, "Failed") is None and not op.objects("v1/pods", NS)
    assert event_with(op, "compact", "WaitingForTable")["type"] == "Normal"
    ready_table(op)
    driver_pod(op, "compact")
    job = with_condition(op, "compactionjobs", "compact", "Stalled", "False")
    assert (job["status"]["phase"], job["status"]["attempts"]) == ("Pending", 1)
    assert "message" not in job["status"] and condition(job, "Failed") is None


def test_a_job_whose_table_is_not_ready_waits_and_says_why(op: KmockOperator, catalog: Catalog) -> None:
    catalog.create_table("sales.orders", [Column("id", "bigint", False)])  # another definition: never Ready
    create(op, "acidtables", table_resource("orders"))
    with_condition(op, "acidtables", "orders", "Degraded")
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert condition(job, "Stalled")["reason"] == "TableNotReady"  # type: ignore[index]
    assert "AcidTable orders is not Ready (Ready=False, DefinitionMismatch:" in job["status"]["message"]
    assert condition(job, "Stalled")["message"] == job["status"]["message"]  # type: ignore[index]
    assert not op.objects("v1/pods", NS)


def test_a_job_whose_table_never_comes_fails_with_no_table_after_the_wait(
    tmp_path: Path, etcd_server: EmbeddedEtcd, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for op in running_operator(
        tmp_path, etcd_server.endpoint, etcd_prefix, monkeypatch.setenv, table_wait_timeout=timedelta(seconds=3)
    ):
        created = time.monotonic()
        create(op, "compactionjobs", job_resource("compact", table="nothing"))
        with_condition(op, "compactionjobs", "compact", "Stalled")
        job = with_condition(op, "compactionjobs", "compact", "Failed")
        assert time.monotonic() - created >= 3  # waited for it first
        assert condition(job, "Failed")["reason"] == "NoTable"  # type: ignore[index]
        assert condition(job, "Stalled")["status"] == "False"  # type: ignore[index]
        assert job["status"]["phase"] == "Failed" and job["status"].get("attempts", 0) == 0  # no attempt made
        assert "no AcidTable nothing in namespace sales; gave up waiting for it after 3 s" in job["status"]["message"]
        assert event_with(op, "compact", "NoTable")["type"] == "Warning"
        assert not op.objects("v1/pods", NS)


PERMANENT = [
    (403, "Forbidden", 'pods is forbidden: User "system:serviceaccount:acidtables:operator" cannot create '
     'resource "pods" in API group "" in the namespace "sales"', "Forbidden"),
    (422, "Invalid", 'Pod "compact-driver-1" is invalid: spec.containers[0].image: Required value', "InvalidPodSpec"),
]  # fmt: skip
TRANSIENT = [
    (403, "Forbidden", 'pods "compact-driver-1" is forbidden: exceeded quota: compute, requested: '
     "requests.memory=1Gi, used: requests.memory=4Gi, limited: requests.memory=4Gi", "QuotaExceeded"),
    (403, "Forbidden", 'pods "compact-driver-1" is forbidden: error looking up service account '
     'sales/acidtables-spark: serviceaccount "acidtables-spark" not found', "ServiceAccountNotFound"),
    (503, "ServiceUnavailable", "the server is currently unable to handle the request", "ApiUnavailable"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "api_reason", "message", "reason"), PERMANENT, ids=[p[3] for p in PERMANENT])
def test_a_driver_pod_refused_for_good_fails_the_job_within_seconds(
    op: KmockOperator, code: int, api_reason: str, message: str, reason: str
) -> None:
    ready_table(op)
    op.refuse("POST", f"^/api/v1/namespaces/{NS}/pods$", code, api_reason, message)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    job = with_condition(op, "compactionjobs", "compact", "Failed")  # what `kubectl wait --for` ends on
    assert job["status"]["phase"] == "Failed" and message in job["status"]["message"]
    assert condition(job, "Failed")["reason"] == reason  # type: ignore[index]
    event = event_with(op, "compact", reason)
    assert event["type"] == "Warning" and message in event["message"] and "not retried" in event["message"]
    assert "retryAt" not in job["status"] and not op.objects("v1/pods", NS)


@pytest.mark.parametrize(("code", "api_reason", "message", "reason"), TRANSIENT, ids=[t[3] for t in TRANSIENT])
def test_a_driver_pod_refused_for_now_is_retried_with_backoff_and_says_so(
    op: KmockOperator, code: int, api_reason: str, message: str, reason: str
) -> None:
    ready_table(op)
    op.refuse("POST", f"^/api/v1/namespaces/{NS}/pods$", code, api_reason, message)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert condition(job, "Stalled")["reason"] == reason  # type: ignore[index]
    assert job["status"]["phase"] == "Pending" and job["status"]["retryAt"]
    assert message in job["status"]["message"] and "retrying in 10 s" in job["status"]["message"]
    event = event_with(op, "compact", reason)
    assert event["type"] == "Warning" and "retrying in 10 s" in event["message"]
    assert condition(job, "Failed") is None


def test_a_driver_that_cannot_start_for_a_missing_secret_says_so_within_seconds(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    driver_pod(op, "compact")
    waiting = {"reason": "CreateContainerConfigError", "message": 'secret "etcd-credentials" not found'}
    status = {"phase": "Pending", "containerStatuses": [container({"waiting": waiting})]}
    op.request("PATCH", f"/api/v1/namespaces/{NS}/pods/compact-driver-1/status", {"status": status})
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert condition(job, "Stalled")["reason"] == "CreateContainerConfigError"  # type: ignore[index]
    assert 'secret "etcd-credentials" not found' in job["status"]["message"]
    assert 'secret "etcd-credentials" not found' in event_with(op, "compact", "CreateContainerConfigError")["message"]


def unschedulable(op: KmockOperator, message: str) -> None:
    """Play the scheduler that cannot place the job's driver pod."""
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    status = {"phase": "Pending", "conditions": [scheduled]}
    op.request("PATCH", f"/api/v1/namespaces/{NS}/pods/compact-driver-1/status", {"status": status})


def test_a_driver_no_node_has_room_for_is_stalled_within_seconds_and_says_why(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    driver_pod(op, "compact")
    started = time.monotonic()
    unschedulable(op, "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available.")
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert time.monotonic() - started < SECONDS
    assert condition(job, "Stalled")["reason"] == "Unschedulable"  # type: ignore[index]
    assert "Insufficient cpu" in condition(job, "Stalled")["message"]  # type: ignore[index]
    assert job["status"]["phase"] == "Pending"  # room may come: the attempt waits for its start timeout
    event = event_with(op, "compact", "Unschedulable")
    assert event["type"] == "Warning" and "Insufficient cpu" in event["message"]


def test_a_driver_whose_claim_does_not_exist_fails_the_job_at_once(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    driver_pod(op, "compact")
    unschedulable(op, '0/1 nodes are available: persistentvolumeclaim "warehouse" not found. preemption: none.')
    job = with_condition(op, "compactionjobs", "compact", "Failed")
    assert job["status"]["phase"] == "Failed" and job["status"]["attempts"] == 1  # not retried
    assert condition(job, "Failed")["reason"] == "ClaimNotFound"  # type: ignore[index]
    assert condition(job, "Finished")["status"] == "True"  # type: ignore[index]
    assert "PersistentVolumeClaim warehouse, which does not exist in namespace sales" in job["status"]["message"]
    assert "not retried" in event_with(op, "compact", "ClaimNotFound")["message"]
    op.eventually(lambda: not op.objects("v1/pods", NS), "the stuck driver pod deleted", SECONDS)


JVM_REFUSED = (
    "Unrecognized VM option 'BogusOption'\nError: Could not create the Java Virtual Machine.\n"
    "Error: A fatal exception has occurred. Program will exit.\n"
)


def executor_pod(op: KmockOperator, name: str, status: dict[str, Any], *, held: bool = False) -> None:
    """An executor pod as Spark creates it from the driver's template (the driver's labels, Spark's
    role), then the status a kubelet or scheduler gives it; `held` by a finalizer, so that deleting it
    leaves it there with its deletionTimestamp while the test plays the kubelet stopping it."""
    labels = {"acidtables.io/compaction-job": "compact", "acidtables.io/attempt": "1", "spark-role": "executor"}
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels}
    if held:
        metadata["finalizers"] = ["test.acidtables.io/held"]
    op.request("POST", f"/api/v1/namespaces/{NS}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": metadata})
    executor_status(op, name, status)


def executor_status(op: KmockOperator, name: str, status: dict[str, Any]) -> None:
    op.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": status})


def executor_state(phase: str, **state: Any) -> dict[str, Any]:
    return {"phase": phase, "containerStatuses": [{"name": "executor", "state": state}]}


def failed_executor(log: str) -> dict[str, Any]:
    terminated = {"exitCode": 1, "reason": "Error", "message": log}  # FallbackToLogsOnError: the log's tail
    return {"phase": "Failed", "containerStatuses": [{"name": "executor", "state": {"terminated": terminated}}]}


def test_failed_executors_are_kept_on_the_job_and_lead_its_failure(op: KmockOperator) -> None:
    ready_table(op)
    spark = {"executors": 2, "executorMemory": "512m"}
    create(op, "compactionjobs", job_resource("compact", table="orders", backoffLimit=0, spark=spark))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    executor_pod(op, "compact-driver-1-exec-1", failed_executor(JVM_REFUSED))
    event = event_with(op, "compact", "ExecutorFailed")
    assert "compact-driver-1-exec-1 exited with code 1 (Error)" in event["message"]
    assert "Could not create the Java Virtual Machine" in event["message"] and "BogusOption" not in event["message"]
    op.request("PATCH", f"/api/v1/namespaces/{NS}/pods/compact-driver-1-exec-1", {"metadata": {"labels": {"x": "y"}}})
    executor_pod(op, "compact-driver-1-exec-2", failed_executor("Error: Could not create the Java Virtual Machine."))
    op.eventually(lambda: get(op, "compactionjobs", "compact")["status"].get("executors", {}).get("failed") == 2,
                  "two executor failures counted", SECONDS)  # fmt: skip
    # kopf posts events on its own after the status patch: wait for the second, then one per pod
    op.eventually(
        lambda: len([e for e in events(op, "compact") if e.get("reason") == "ExecutorFailed"]) >= 2,
        "an ExecutorFailed event for each pod",
        SECONDS,
    )
    failed = [e["message"] for e in events(op, "compact") if e.get("reason") == "ExecutorFailed"]
    assert len(failed) == 2 and sum("exec-1 " in m for m in failed) == sum("exec-2 " in m for m in failed) == 1
    stopped = "Py4JJavaError: An error occurred while calling o61: Cannot call methods on a stopped SparkContext"
    play_kubelet(op, "compact-driver-1", "Failed", {"phase": "Failed", "message": stopped})
    job = with_condition(op, "compactionjobs", "compact", "Failed")
    message = job["status"]["message"]
    assert condition(job, "Failed")["reason"] == "ExecutorsFailed"  # type: ignore[index]
    assert message.startswith("executors failed to start or to reach the driver (2 executor pods failed; last:")
    assert "Could not create the Java Virtual Machine" in message and stopped in message
    assert event_with(op, "compact", "ExecutorsFailed")["message"] == message


def test_an_executor_no_node_has_room_for_stalls_the_job_and_says_why(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 2}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}  # fmt: skip
    executor_pod(op, "compact-driver-1-exec-2", {"phase": "Pending", "conditions": [scheduled]})
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert condition(job, "Stalled")["reason"] == "Unschedulable"  # type: ignore[index]
    said = "executor pod compact-driver-1-exec-2 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu."
    assert condition(job, "Stalled")["message"] == said  # type: ignore[index]
    assert event_with(op, "compact", "Unschedulable")["message"] == said
    assert job["status"]["executors"]["pending"] == 1


def test_executors_their_driver_removes_at_shutdown_are_no_failure(op: KmockOperator) -> None:
    """Issue 40, item 3: Spark deletes its executor pods when the application ends; one that gets the
    SIGTERM before it exits ends with 143, one killed after the grace period with 137. Neither failed."""
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 2}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    running = executor_state("Running", running={"startedAt": "2026-11-28T12:00:00Z"})
    for pod in ("compact-driver-1-exec-1", "compact-driver-1-exec-2"):
        executor_pod(op, pod, running, held=True)
        op.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod}")  # Spark's driver, at SparkContext.stop()
    executor_status(
        op, "compact-driver-1-exec-1", executor_state("Failed", terminated={"exitCode": 143, "reason": "Error"})
    )
    executor_status(
        op, "compact-driver-1-exec-2", executor_state("Failed", terminated={"exitCode": 137, "reason": "Error"})
    )
    # a third that never got past its image: deleted as well, so no longer waiting to start
    executor_pod(
        op, "compact-driver-1-exec-3", executor_state("Pending", waiting={"reason": "ContainerCreating"}), held=True
    )
    op.request("DELETE", f"/api/v1/namespaces/{NS}/pods/compact-driver-1-exec-3")
    play_kubelet(op, "compact-driver-1", "Succeeded", {"phase": "Succeeded", "message": "compacted 4 files"})
    job = with_condition(op, "compactionjobs", "compact", "Succeeded")
    assert int(job["status"].get("executors", {}).get("failed") or 0) == 0
    assert condition(job, "Stalled")["status"] == "False"  # type: ignore[index]
    assert [e["reason"] for e in events(op, "compact") if e.get("type") == "Warning"] == []


def test_an_executor_pod_is_counted_once_whatever_reasons_it_passes_through(op: KmockOperator) -> None:
    """Issue 40, item 4: ErrImagePull then ImagePullBackOff is one pending pod, posted once; the
    message says why the job is stalled."""
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 2}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    pulling = {"reason": "ErrImagePull", "message": 'failed to pull image "spark:nope": not found'}
    executor_pod(op, "compact-driver-1-exec-1", executor_state("Pending", waiting=pulling))
    job = with_condition(op, "compactionjobs", "compact", "Stalled")
    assert job["status"]["executors"]["pending"] == 1
    assert job["status"]["message"] == condition(job, "Stalled")["message"]  # type: ignore[index]
    assert "executor pod compact-driver-1-exec-1 cannot start: ErrImagePull" in job["status"]["message"]
    backoff = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "spark:nope"'}
    executor_status(op, "compact-driver-1-exec-1", executor_state("Pending", waiting=backoff))

    def reason_of_exec_1() -> str | None:
        recent = get(op, "compactionjobs", "compact")["status"]["executors"]["recent"]
        return next((e["reason"] for e in recent if e["pod"] == "compact-driver-1-exec-1"), None)

    op.eventually(lambda: reason_of_exec_1() == "ImagePullBackOff", "exec-1's newest reason", SECONDS)
    job = get(op, "compactionjobs", "compact")
    assert job["status"]["executors"]["pending"] == 1  # one pod, not one per reason
    assert "ImagePullBackOff" in job["status"]["message"]
    executor_pod(op, "compact-driver-1-exec-2", executor_state("Pending", waiting=pulling))

    def both_pending() -> dict[str, Any] | None:
        job = get(op, "compactionjobs", "compact")
        executors = job["status"]["executors"]
        return job if executors["pending"] == 2 and len(executors["recent"]) == 2 else None

    job = op.eventually(both_pending, "two pending pods, each recorded", SECONDS)
    assert job["status"]["message"].startswith(
        "2 executor pods cannot start; last: executor pod compact-driver-1-exec-2"
    )
    warned = [e["message"] for e in events(op, "compact") if e.get("type") == "Warning"]
    assert sum("exec-1 " in m for m in warned) == 1 and len(job["status"]["executors"]["recent"]) == 2


def test_an_executor_that_starts_after_all_unstalls_the_job(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 1}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}  # fmt: skip
    executor_pod(op, "compact-driver-1-exec-1", {"phase": "Pending", "conditions": [scheduled]})
    with_condition(op, "compactionjobs", "compact", "Stalled")
    started = executor_state("Running", running={"startedAt": "2026-11-28T12:00:00Z"})
    started["conditions"] = [{"type": "PodScheduled", "status": "True"}]  # room came: the scheduler placed it
    executor_status(op, "compact-driver-1-exec-1", started)
    job = with_condition(op, "compactionjobs", "compact", "Stalled", "False")
    assert job["status"]["executors"]["pending"] == 0 and "message" not in job["status"]


def test_an_ended_job_settles_its_executor_counts(op: KmockOperator) -> None:
    """Issue 40, item 4: no pod of a job that has ended is waiting to start."""
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 2}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    pulling = {"reason": "ErrImagePull", "message": 'failed to pull image "spark:nope": not found'}
    executor_pod(op, "compact-driver-1-exec-2", executor_state("Pending", waiting=pulling))
    with_condition(op, "compactionjobs", "compact", "Stalled")
    play_kubelet(op, "compact-driver-1", "Succeeded", {"phase": "Succeeded", "message": "compacted 4 files"})
    job = with_condition(op, "compactionjobs", "compact", "Succeeded")
    assert job["status"]["executors"]["pending"] == 0 and job["status"]["message"] == "compacted 4 files"
    assert condition(job, "Stalled")["status"] == "False"  # type: ignore[index]


@pytest.mark.parametrize("op", [{"executor_start_timeout": timedelta(seconds=3)}], indirect=True)
def test_executors_that_never_start_fail_the_job_at_their_deadline_and_their_pods_are_removed(
    op: KmockOperator,
) -> None:
    """Issue 40, item 2: an executor image that cannot be pulled used to keep the job Stalled for ever."""
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 2}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    started = time.monotonic()
    pulling = {"reason": "ErrImagePull", "message": 'failed to pull image "spark:nope": not found'}
    for pod in ("compact-driver-1-exec-1", "compact-driver-1-exec-2"):
        executor_pod(op, pod, executor_state("Pending", waiting=pulling))
    with_condition(op, "compactionjobs", "compact", "Stalled")
    job = with_condition(op, "compactionjobs", "compact", "Failed")
    assert time.monotonic() - started >= 1  # the deadline runs from the driver's start (whole seconds)
    assert condition(job, "Failed")["reason"] == "ExecutorsNotStarted"  # type: ignore[index]
    assert condition(job, "Finished")["status"] == "True"  # type: ignore[index]
    assert condition(job, "Stalled")["status"] == "False"  # type: ignore[index]
    message = job["status"]["message"]
    assert message.startswith("no executor started within 3 s of the driver's start (2 requested): executor pod")
    assert "cannot start: ErrImagePull: failed to pull image" in message and "(1 more ErrImagePull)" in message
    assert job["status"]["phase"] == "Failed" and job["status"]["attempts"] == 1  # not retried
    assert job["status"]["executors"]["pending"] == 0
    assert event_with(op, "compact", "ExecutorsNotStarted")["type"] == "Warning"
    op.eventually(lambda: not op.objects("v1/pods", NS), "the driver and its executor pods removed", SECONDS)
    assert op.metrics.jobs.labels("minor", "Failed")._value.get() == 1


@pytest.mark.parametrize("op", [{"executor_start_timeout": timedelta(seconds=3)}], indirect=True)
def test_a_job_with_some_executors_running_goes_on_past_the_deadline_and_says_how_many_never_started(
    op: KmockOperator,
) -> None:
    """Issue 40, item 2: 5 of 8 executors fitted on the node; the job runs with them."""
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders", spark={"executors": 8}))
    driver_pod(op, "compact")
    play_kubelet(op, "compact-driver-1", "Running")
    running = executor_state("Running", running={"startedAt": "2026-11-28T12:00:00Z"})
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}  # fmt: skip
    for number in range(1, 9):
        state = running if number <= 5 else {"phase": "Pending", "conditions": [scheduled]}
        executor_pod(op, f"compact-driver-1-exec-{number}", state)

    def judged() -> dict[str, Any] | None:
        job = get(op, "compactionjobs", "compact")
        return job if "neverStarted" in job["status"].get("executors", {}) else None

    job = op.eventually(judged, "the start deadline judged", SECONDS)
    assert job["status"]["executors"]["neverStarted"] == 3 and job["status"]["phase"] == "Running"
    assert job["status"]["message"].startswith(
        "5 of 8 executors running at the start deadline (3 s); 3 never started: executor pod "
    )
    assert job["status"]["message"].endswith("; the job goes on with 5")
    assert condition(job, "Stalled")["status"] == "False"  # type: ignore[index]
    assert condition(job, "Failed") is None and len(op.objects("v1/pods", NS)) == 9
    assert "the job goes on with 5" in event_with(op, "compact", "ExecutorsNotStarted")["message"]
    # a stuck pod changing again does not stall the job any more
    backoff = executor_state("Pending", waiting={"reason": "ImagePullBackOff", "message": "Back-off"})
    executor_status(op, "compact-driver-1-exec-8", backoff)

    def newest_reason() -> str | None:
        recent = get(op, "compactionjobs", "compact")["status"]["executors"]["recent"]
        return next((e["reason"] for e in recent if e["pod"] == "compact-driver-1-exec-8"), None)

    op.eventually(lambda: newest_reason() == "ImagePullBackOff", "exec-8's newest reason recorded", SECONDS)
    assert condition(get(op, "compactionjobs", "compact"), "Stalled")["status"] == "False"  # type: ignore[index]
    play_kubelet(op, "compact-driver-1", "Succeeded", {"phase": "Succeeded", "message": "compacted 4 files"})
    job = with_condition(op, "compactionjobs", "compact", "Succeeded")
    assert job["status"]["executors"]["neverStarted"] == 3 and job["status"]["executors"]["pending"] == 0


# --- automatic compaction ----------------------------------------------------------------------------


def test_automatic_compaction_creates_a_minor_job_once_small_files_pile_up(
    tmp_path: Path, etcd_server: EmbeddedEtcd, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for op in running_operator(
        tmp_path, etcd_server.endpoint, etcd_prefix, monkeypatch.setenv, autocompact_interval_seconds=0.5
    ):
        check_automatic_compaction(op)


def check_automatic_compaction(op: KmockOperator) -> None:
    compaction = {"auto": True, "minor": {"minSmallFiles": 3}}
    status = ready_table(op, "auto", compaction=compaction)["status"]
    assert op.context is not None
    table = op.context.catalog.table(status["catalogName"])
    for _ in range(3):
        tx = table.begin("insert_into")
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
        tx.commit()

    def automatic() -> list[dict[str, Any]]:
        jobs = op.objects("acidtables.io/v1alpha1/compactionjobs", NS)
        return [j for j in jobs if j["metadata"].get("labels", {}).get("acidtables.io/automatic") == "true"]

    (job,) = op.eventually(automatic, "an automatic CompactionJob", SECONDS)
    assert job["spec"]["type"] == "minor" and job["spec"]["where"] == "dt = 'a'"
    assert job["metadata"]["ownerReferences"][0]["name"] == "auto"
    assert "3 small files in dt=a" in event_with(op, "auto", "AutoCompaction")["message"]


def automatic_jobs(op: KmockOperator) -> list[dict[str, Any]]:
    jobs = op.objects("acidtables.io/v1alpha1/compactionjobs", NS)
    return [j for j in jobs if j["metadata"].get("labels", {}).get("acidtables.io/automatic") == "true"]


@pytest.mark.parametrize("op", [{"autocompact_interval_seconds": 0.5, "autocompact_job_ttl_seconds": 1}], indirect=True)
def test_a_finished_automatic_job_is_deleted_after_its_ttl(op: KmockOperator) -> None:
    """A stream's table is compacted every few minutes for days: its automatic jobs must not pile up (a
    real cluster gathered 25 finished ones in 48 minutes of examples/streaming-job.yaml)."""
    check_automatic_compaction(op)
    (job,) = automatic_jobs(op)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    assert job["spec"]["ttlSecondsAfterFinished"] == 1
    driver_pod(op, name)
    play_kubelet(op, f"{name}-driver-1", "Succeeded", {"phase": "Succeeded", "message": "compacted 3 files"})
    with_condition(op, "compactionjobs", name, "Succeeded")
    # the table is still over its threshold (nothing really compacted), so a job of the same name may
    # follow: the finished one is told by its uid
    op.eventually(
        lambda: uid not in {j["metadata"]["uid"] for j in automatic_jobs(op)}, "the finished job deleted", SECONDS
    )


@pytest.mark.parametrize(
    "op", [{"autocompact_interval_seconds": 0.5, "autocompact_backoff": timedelta(seconds=0)}], indirect=True
)
def test_a_job_that_exists_for_the_tables_version_is_reported_not_created_again(op: KmockOperator) -> None:
    """The job an unchanged table would get is the one that failed, still kept for its TTL: the status says
    so, never that it created it again."""
    check_automatic_compaction(op)
    (job,) = automatic_jobs(op)
    name = job["metadata"]["name"]
    driver_pod(op, name)
    with_condition(op, "compactionjobs", name, "Finished", "False")  # the operator's own patch, after the pod
    failed = {"phase": "Failed", "completionTime": conditions.now()}
    op.request("PATCH", f"{GROUP}/namespaces/{NS}/compactionjobs/{name}/status", {"status": failed})
    said = auto_compaction(op, "JobExists", "auto")["message"]
    assert said.startswith(f"CompactionJob {name} exists already, for this version of the table")
    assert [j["metadata"]["uid"] for j in automatic_jobs(op)] == [job["metadata"]["uid"]]


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "orders.yaml"


def auto_compaction(op: KmockOperator, reason: str, table: str = "orders", *, starting: str = "") -> dict[str, str]:
    """The table's status.autoCompaction once its reason is `reason` (and its message starts with
    `starting`: one reason, JobRunning, says which job it waits for, and that changes)."""

    def said() -> dict[str, str] | None:
        found: dict[str, str] = get(op, "acidtables", table).get("status", {}).get("autoCompaction") or {}
        return found if found.get("reason") == reason and found.get("message", "").startswith(starting) else None

    found: dict[str, str] = op.eventually(said, f"status.autoCompaction {reason} {starting!r}", SECONDS)
    return found


def small_files(table: Any, per_partition: dict[str, int]) -> None:
    """One small file per partition per commit, until each partition has its count."""
    for round_ in range(max(per_partition.values())):
        tx = table.begin("insert_into")
        tx.add_files([staged_parquet(tx, {"dt": dt}) for dt, count in sorted(per_partition.items()) if round_ < count])
        tx.commit()


@pytest.mark.parametrize("op", [{"autocompact_interval_seconds": 0.5}], indirect=True)
def test_automatic_compaction_with_the_examples_thresholds_says_what_it_waits_for(
    op: KmockOperator, catalog: Catalog
) -> None:
    """Issue 40, item 7: examples/orders.yaml as it is (auto, minor at 16 small files per partition);
    52 small files spread over four partitions start nothing, and the status says why; a job of the
    user's holds it back; the 16th file in one partition starts a MINOR there; a lost conflict backs off."""
    example = yaml.safe_load(EXAMPLE.read_text())
    assert example["spec"]["compaction"]["minor"]["minSmallFiles"] == 16  # the example's own threshold
    create(op, "acidtables", example)
    with_condition(op, "acidtables", "orders", "Ready")
    assert auto_compaction(op, "BelowThresholds")["message"] == "the table has no files yet: nothing to compact"
    table = catalog.table("sales.orders")
    small_files(table, {"2026-11-01": 15, "2026-11-02": 13, "2026-11-03": 12, "2026-11-04": 12})  # 52 files
    said = op.eventually(
        lambda: "15 small files" in auto_compaction(op, "BelowThresholds")["message"], "the fullest partition", SECONDS
    )
    message = auto_compaction(op, "BelowThresholds")["message"]
    assert said and message.startswith(
        "the fullest of 4 partitions, dt=2026-11-01, has 15 small files (under 32Mi; minor.minSmallFiles 16) and "
    ), message
    assert "(major.minDeltaFiles 64): a job starts when a partition reaches either" in message
    assert not [j for j in op.objects("acidtables.io/v1alpha1/compactionjobs", NS)]

    create(op, "compactionjobs", job_resource("mine", table="orders"))  # a job of the user's, not started
    small_files(table, {"2026-11-01": 1})  # the 16th small file in dt=2026-11-01: over the threshold
    running = auto_compaction(op, "JobRunning")["message"]
    assert running.startswith("waiting for CompactionJob mine to end: automatic compaction runs one job per table")
    completed = {"phase": "Succeeded", "completionTime": conditions.now()}
    op.request("PATCH", f"{GROUP}/namespaces/{NS}/compactionjobs/mine/status", {"status": completed})

    def automatic() -> list[dict[str, Any]]:
        jobs = op.objects("acidtables.io/v1alpha1/compactionjobs", NS)
        return [j for j in jobs if j["metadata"].get("labels", {}).get("acidtables.io/automatic") == "true"]

    (job,) = op.eventually(automatic, "an automatic CompactionJob", SECONDS)
    assert (job["spec"]["type"], job["spec"]["where"]) == ("minor", "dt = '2026-11-01'")
    name = job["metadata"]["name"]
    # said JobCreated first, then this (the status follows the job on the operator's next pass)
    auto_compaction(op, "JobRunning", starting=f"waiting for CompactionJob {name} (automatic) to end")
    assert f"{name}: 16 small files in dt=2026-11-01" in event_with(op, "orders", "AutoCompaction")["message"]

    lost = {"phase": "Conflicted", "completionTime": conditions.now()}
    op.request("PATCH", f"{GROUP}/namespaces/{NS}/compactionjobs/{name}/status", {"status": lost})
    backing_off = auto_compaction(op, "BackingOff")["message"]
    assert backing_off.startswith("the last 1 automatic job(s) lost a conflict to a concurrent commit: the next is")
    # a job that failed is not created again at once either (a job failing for good, on a busy table)
    failed = {"phase": "Failed", "completionTime": conditions.now()}
    op.request("PATCH", f"{GROUP}/namespaces/{NS}/compactionjobs/{name}/status", {"status": failed})
    auto_compaction(op, "BackingOff", starting="the last 1 automatic job(s) failed: the next is not created before")


@pytest.mark.parametrize("op", [{"autocompact_interval_seconds": 0.5}], indirect=True)
def test_a_table_without_automatic_compaction_says_so(op: KmockOperator) -> None:
    ready_table(op)
    assert auto_compaction(op, "Off")["message"].startswith("compaction.auto is not true")


# --- metrics -----------------------------------------------------------------------------------------


def sample_value(op: KmockOperator, name: str, **labels: str) -> float | None:
    """One sample of the operator's metrics (its registry is the test's own, so read them directly)."""
    for metric in vars(op.metrics).values():
        if isinstance(metric, MetricWrapperBase):
            for family in metric.collect():
                for sample in family.samples:
                    if sample.name == name and sample.labels == labels:
                        return float(sample.value)
    return None


def test_counters_are_exported_from_zero_for_the_operator_and_every_table_it_knows(
    op: KmockOperator, catalog: Catalog
) -> None:
    """Issue 40, item 6: a dashboard has a series to show and rate() an increase to see, before anything
    happened; for a table an AcidTable declares and for one a writer made (the change feed names it)."""
    assert sample_value(op, "acidtables_operator_reconcile_errors_total", kind="AcidTable") == 0
    assert sample_value(op, "acidtables_operator_reconcile_errors_total", kind="CompactionJob") == 0
    assert sample_value(op, "acidtables_compaction_jobs_total", type="minor", result="Failed") == 0
    ready_table(op)
    catalog.create_table("sales.written", [Column("id", "bigint", False)])
    for table in ("orders", "written"):
        labels = {"namespace": NS, "table": table}
        aborts = {**labels, "operation": "delete"}

        def exported(aborts: dict[str, str] = aborts) -> bool:
            return sample_value(op, "acidtables_cluster_aborts_total", **aborts) == 0

        op.eventually(exported, f"the counters of {table}", SECONDS)
        for name in ("commits", "retries", "exhausted"):
            assert sample_value(op, f"acidtables_cluster_{name}_total", **labels, operation="merge") == 0
        conflict = {**labels, "operation": "update", "exception": "ConcurrentAppendException"}
        assert sample_value(op, "acidtables_cluster_conflicts_total", **conflict) == 0
        runs = {**labels, "kind": "vacuum", "outcome": "ok"}
        assert sample_value(op, "acidtables_maintenance_runs_total", **runs) == 0
        assert sample_value(op, "acidtables_maintenance_files_freed_total", **labels) == 0


def test_a_streams_commits_count_like_any_others(
    op: KmockOperator, catalog: Catalog, spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 42, item 5: the data source's sink commits from Spark's Python workers, processes the operator
    never sees; it counts them from the table's log, per table and operation, like any commit."""
    catalog.create_table("sales.clicks", "id BIGINT, dt STRING, amount DOUBLE")
    labels = {"namespace": NS, "table": "clicks", "operation": "insert_into"}
    op.eventually(lambda: sample_value(op, "acidtables_cluster_commits_total", **labels) == 0, "the series", SECONDS)
    for name in ("a", "b", "c"):
        drop_batch(tmp_path / "inbox", name, [(len(name), "d", 1.0)])
    options = {"etcd.endpoints": op.settings.etcd.endpoints[0], "etcd.prefix": op.settings.etcd.prefix}
    query = (
        event_stream(spark, tmp_path / "inbox")
        .writeStream.format("acidtables")
        .options(**options, warehouse=op.settings.warehouse)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start("sales.clicks")
    )
    assert query.awaitTermination(240)
    op.eventually(
        lambda: sample_value(op, "acidtables_cluster_commits_total", **labels) == 3, "three commits counted", SECONDS
    )
    assert sample_value(op, "acidtables_cluster_retries_total", **labels) == 0


def test_each_part_of_a_multi_table_transaction_counts_as_a_commit_of_its_table(
    op: KmockOperator, catalog: Catalog
) -> None:
    """Issue 44, item 2: the operator needs nothing new; a multi-table commit is one commit of each table,
    counted per table and operation from the tables' logs like any other."""
    for name in ("facts", "dims"):
        catalog.create_table(f"sales.{name}", "id BIGINT, dt STRING", partition_by=["dt"])

    def commits(table: str) -> float | None:
        return sample_value(op, "acidtables_cluster_commits_total", namespace=NS, table=table, operation="insert_into")

    op.eventually(lambda: commits("facts") == commits("dims") == 0, "the series", SECONDS)
    with catalog.transaction() as tx:
        for name in ("facts", "dims"):
            part = tx.begin(f"sales.{name}", "insert_into")
            part.add_files([staged_parquet(part, {"dt": "a"})])
    op.eventually(lambda: commits("facts") == commits("dims") == 1, "one commit of each table counted", SECONDS)
    for name in ("facts", "dims"):
        retries = sample_value(
            op, "acidtables_cluster_retries_total", namespace=NS, table=name, operation="insert_into"
        )
        assert retries == 0


# --- the Delta mirror (issue 43, item 3) ---------------------------------------------------------------

MIRRORING = {"mirror_check_seconds": 0.5, "mirror_lag_threshold_seconds": 1.0}


def mirror_status(op: KmockOperator, **expected: Any) -> dict[str, Any]:
    def matches() -> dict[str, Any] | None:
        found = get(op, "acidtables", "orders").get("status", {}).get("mirror") or {}
        return found if all(found.get(k) == v for k, v in expected.items()) else None

    status: dict[str, Any] = op.eventually(matches, f"status.mirror with {expected}", SECONDS)
    return status


@pytest.mark.parametrize("op", [MIRRORING], indirect=True)
def test_spec_mirror_keeps_a_delta_log_the_operator_catches_up_and_reports(
    op: KmockOperator, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator is the backstop for commits whose process did not mirror them (here: no process
    does, the committers' background mirroring is switched off), and says how far the mirror is."""
    import acidtables.core.commit.committer as committer

    monkeypatch.setattr(committer, "schedule_mirror", lambda *args: None)
    ready_table(op, mirror=["delta"])
    table = catalog.table("sales.orders")
    assert table.metadata.properties["mirror.formats"] == "delta"
    for _ in range(3):
        with table.begin("insert_into") as tx:
            tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=2)])
            tx.commit()
    mirror_status(op, version=3, tableVersion=3, lagVersions=0)
    import deltalake

    assert deltalake.DeltaTable(table.location).to_pyarrow_table().num_rows == 6
    labels = {"namespace": NS, "table": "orders", "format": "delta"}
    assert sample_value(op, "acidtables_mirror_lag_versions", **labels) == 0


@pytest.mark.parametrize("op", [MIRRORING], indirect=True)
def test_a_mirror_behind_for_longer_than_the_threshold_degrades_the_table_until_it_catches_up(
    op: KmockOperator, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acidtables.core.catalog.table as core_table
    import acidtables.core.commit.committer as committer

    monkeypatch.setattr(committer, "schedule_mirror", lambda *args: None)
    ready_table(op, mirror=["delta"])
    mirror_status(op, version=0, lagVersions=0)
    real_sync = getattr(core_table, "sync_delta")  # noqa: B009 - the name the module imported, patched below

    def store_down(*args: Any) -> Any:
        raise OSError("the object store refused the write")

    monkeypatch.setattr(core_table, "sync_delta", store_down)
    table = catalog.table("sales.orders")
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
        tx.commit()
    degraded = with_condition(op, "acidtables", "orders", "Degraded")
    assert condition(degraded, "Degraded")["reason"] == "MirrorBehind"  # type: ignore[index]
    assert "at version 0, the table at 1" in condition(degraded, "Degraded")["message"]  # type: ignore[index]
    assert "the object store refused the write" in degraded["status"]["mirror"]["lastError"]
    assert sample_value(op, "acidtables_mirror_lag_versions", namespace=NS, table="orders", format="delta") == 1
    event_with(op, "orders", "MirrorBehind")
    monkeypatch.setattr(core_table, "sync_delta", real_sync)
    mirror_status(op, version=1, lagVersions=0)
    op.eventually(
        lambda: condition(get(op, "acidtables", "orders"), "Degraded")["reason"] == "MirrorCaughtUp",  # type: ignore[index]
        "Degraded=False, MirrorCaughtUp",
        SECONDS,
    )
    assert condition(get(op, "acidtables", "orders"), "Degraded")["status"] == "False"  # type: ignore[index]


def test_a_mirror_on_a_primary_key_table_is_an_invalid_spec_naming_why(op: KmockOperator, catalog: Catalog) -> None:
    create(op, "acidtables", table_resource("orders", primaryKey=["id"], mirror=["delta"]))
    table = with_condition(op, "acidtables", "orders", "Degraded")
    assert condition(table, "Degraded")["reason"] == "InvalidSpec"  # type: ignore[index]
    assert "has a primary key" in condition(table, "Degraded")["message"]  # type: ignore[index]
    with pytest.raises(TableNotFoundError):
        catalog.table("sales.orders")
