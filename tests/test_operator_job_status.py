"""What a CompactionJob's status says on a real kube-apiserver, with the operator as its own process
and no kubelet: the test writes what a kubelet would into pod status (issue 40). The same scenarios
run against kmock in tests/test_operator_kmock.py; here the API server's own validation, structural
pruning and watch semantics apply."""

from __future__ import annotations

import json
import time
import urllib.error
from datetime import UTC, datetime
from typing import Any

from tests.helpers import envtest
from tests.helpers.kubelet import NODE
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import condition, events_for, eventually, get_job, job_resource, table_resource


def pod_named(kube_api: envtest.KubeAPI, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube_api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return found


def test_a_job_applied_together_with_its_table_waits_for_it_and_runs(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess
) -> None:
    """One `kubectl apply -f` holding the job and then its table (issue 40, item 1): never NoTable."""
    both = {"apiVersion": "v1", "kind": "List", "items": [job_resource("compact"), table_resource("events")]}
    envtest.kubectl(kube_api, "apply", "-n", kube_namespace, "-f", "-", stdin=json.dumps(both))
    eventually(lambda: pod_named(kube_api, kube_namespace, "compact-driver-1"), "the driver pod", operator)
    # the driver pod is created before the handler's status patch lands: wait for the patch too
    eventually(
        lambda: get_job(kube_api, kube_namespace, "compact").get("status", {}).get("attempts") == 1,
        "the first attempt in the job's status",
        operator,
    )
    job = get_job(kube_api, kube_namespace, "compact")
    assert job["status"]["attempts"] == 1 and condition(job, "Failed") is None
    assert job["status"].get("phase") in ("Pending", "Running")


#: a terminated container's times, as a kubelet writes them
TIMES = {"startedAt": "2026-11-28T12:00:00Z", "finishedAt": "2026-11-28T12:01:00Z"}


def pod_status(kube_api: envtest.KubeAPI, namespace: str, name: str, status: dict[str, Any]) -> None:
    kube_api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status})


def container(name: str, **state: Any) -> dict[str, Any]:
    """A container's status with the fields a kubelet always fills in (the API server checks them)."""
    return {"name": name, "image": "acidtables-test:1", "imageID": "", "ready": False, "restartCount": 0,
            "state": state}  # fmt: skip


def bind(kube_api: envtest.KubeAPI, namespace: str, name: str) -> None:
    """What the scheduler does: the pod on the test's node (a kubelet reports only for pods bound to it)."""
    try:
        kube_api.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # there already
            raise
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}  # fmt: skip
    kube_api.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)


def running_driver(kube_api: envtest.KubeAPI, namespace: str, operator: OperatorProcess, **spark: Any) -> None:
    """The job `compact` on a Ready table, its driver pod created by the operator and, as a kubelet would
    say, running."""
    envtest.apply(kube_api, namespace, table_resource("events"))
    envtest.apply(kube_api, namespace, job_resource("compact", spark={"driverMemory": "1g", **spark}))
    eventually(lambda: pod_named(kube_api, namespace, "compact-driver-1"), "the driver pod", operator)
    bind(kube_api, namespace, "compact-driver-1")
    # started now: the executors' start deadline runs from here
    started = {"startedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    pod_status(kube_api, namespace, "compact-driver-1", {"phase": "Running", "containerStatuses": [
        container("driver", running=started)]})  # fmt: skip
    eventually(lambda: get_job(kube_api, namespace, "compact")["status"].get("phase") == "Running", "Running", operator)


def end_driver(kube_api: envtest.KubeAPI, namespace: str, outcome: dict[str, Any]) -> None:
    terminated = {"exitCode": 0, "reason": "Completed", "message": json.dumps(outcome), **TIMES}
    pod_status(kube_api, namespace, "compact-driver-1", {"phase": "Succeeded", "containerStatuses": [
        container("driver", terminated=terminated)]})  # fmt: skip


def executor(kube_api: envtest.KubeAPI, namespace: str, name: str, *, held: bool = False) -> None:
    """An executor pod as Spark creates it (the driver's labels, Spark's role); `held` by a finalizer, so
    that a delete leaves it terminating while the test plays the kubelet stopping it."""
    labels = {"acidtables.io/compaction-job": "compact", "acidtables.io/attempt": "1", "spark-role": "executor"}
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if held:
        metadata["finalizers"] = ["test.acidtables.io/held"]
    spec = {"restartPolicy": "Never", "containers": [{"name": "executor", "image": "acidtables-test:1"}]}
    kube_api.request("POST", f"/api/v1/namespaces/{namespace}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                                      "metadata": metadata, "spec": spec})  # fmt: skip
    bind(kube_api, namespace, name)


def test_executors_their_driver_removes_at_shutdown_post_no_warning(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess
) -> None:
    """Issue 40, item 3: Spark's driver deletes its executors at the end; stopped by SIGTERM they exit
    with 143. The job succeeds with no Warning and no failed executor."""
    running_driver(kube_api, kube_namespace, operator, executors=2)
    pods = ("compact-driver-1-exec-1", "compact-driver-1-exec-2")
    for pod in pods:
        executor(kube_api, kube_namespace, pod, held=True)
        pod_status(kube_api, kube_namespace, pod, {"phase": "Running", "containerStatuses": [
            container("executor", running={"startedAt": "2026-11-28T12:00:01Z"})]})  # fmt: skip
        kube_api.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/{pod}")
        pod_status(kube_api, kube_namespace, pod, {"phase": "Failed", "containerStatuses": [
            container("executor", terminated={"exitCode": 143, "reason": "Error", **TIMES})]})  # fmt: skip
    end_driver(kube_api, kube_namespace, {"phase": "Succeeded", "message": "compacted 4 files"})
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Succeeded", "compactionjob/compact", "-n", kube_namespace, "--timeout=60s"
    )
    status = get_job(kube_api, kube_namespace, "compact")["status"]
    assert int((status.get("executors") or {}).get("failed") or 0) == 0
    warnings = [e for e in events_for(kube_api, kube_namespace, "compact") if e["type"] == "Warning"]
    assert warnings == []


def test_an_executor_pod_is_counted_once_the_stall_is_said_and_the_end_settles_it(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess
) -> None:
    """Issue 40, item 4: ErrImagePull then ImagePullBackOff is one pending pod; status.message says why
    the job is stalled; pending is 0 once the job has ended."""
    running_driver(kube_api, kube_namespace, operator, executors=1)
    executor(kube_api, kube_namespace, "compact-driver-1-exec-1")
    for reason in ("ErrImagePull", "ImagePullBackOff"):
        waiting = {"reason": reason, "message": f'{reason}: image "spark:nope" not found'}
        pod_status(kube_api, kube_namespace, "compact-driver-1-exec-1", {"phase": "Pending", "containerStatuses": [
            container("executor", waiting=waiting)]})  # fmt: skip

        def said(reason: str = reason) -> dict[str, Any] | None:
            job = get_job(kube_api, kube_namespace, "compact")
            stalled = condition(job, "Stalled") or {}
            return job if stalled.get("status") == "True" and stalled.get("reason") == reason else None

        job = eventually(said, f"Stalled for {reason}", operator)
        assert job["status"]["executors"]["pending"] == 1
        assert job["status"]["message"] == condition(job, "Stalled")["message"]  # type: ignore[index]
        assert reason in job["status"]["message"]
    end_driver(kube_api, kube_namespace, {"phase": "Succeeded", "message": "compacted 4 files"})
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Succeeded", "compactionjob/compact", "-n", kube_namespace, "--timeout=60s"
    )
    status = get_job(kube_api, kube_namespace, "compact")["status"]
    assert status["executors"]["pending"] == 0 and status["message"] == "compacted 4 files"


def test_executors_that_never_start_fail_the_job_at_the_jobs_own_deadline_and_are_removed(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess
) -> None:
    """Issue 40, item 2: the job's own spark.executorStartTimeoutSeconds (the CRD allows 10 and more);
    past it with no executor running the job fails naming the pods' reason, its pods removed."""
    running_driver(kube_api, kube_namespace, operator, executors=2, executorStartTimeoutSeconds=10)
    began = time.monotonic()
    for pod in ("compact-driver-1-exec-1", "compact-driver-1-exec-2"):
        executor(kube_api, kube_namespace, pod)
        waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "spark:nope"'}
        pod_status(kube_api, kube_namespace, pod, {"phase": "Pending", "containerStatuses": [
            container("executor", waiting=waiting)]})  # fmt: skip
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Failed", "compactionjob/compact", "-n", kube_namespace, "--timeout=60s"
    )
    assert time.monotonic() - began >= 5  # waited for the deadline (10 s from the driver's start)
    job = get_job(kube_api, kube_namespace, "compact")
    assert condition(job, "Failed")["reason"] == "ExecutorsNotStarted"  # type: ignore[index]
    assert "no executor started within 10 s of the driver's start (2 requested)" in job["status"]["message"]
    assert "ImagePullBackOff" in job["status"]["message"] and job["status"]["executors"]["pending"] == 0

    def removed() -> bool:
        pods = ("compact-driver-1", "compact-driver-1-exec-1", "compact-driver-1-exec-2")
        return all(pod_named(kube_api, kube_namespace, pod) is None for pod in pods)

    eventually(removed, "the driver and its executor pods removed", operator)
    warnings = [e for e in events_for(kube_api, kube_namespace, "compact") if e["type"] == "Warning"]
    assert "ExecutorsNotStarted" in {e["reason"] for e in warnings}
