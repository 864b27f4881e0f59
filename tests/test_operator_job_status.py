"""What a CompactionJob's status says on a real kube-apiserver, with the operator as its own process
and no kubelet: the test writes what a kubelet would into pod status (issue 40). The same scenarios
run against kmock in tests/test_operator_kmock.py; here the API server's own validation, structural
pruning and watch semantics apply."""

from __future__ import annotations

import json
import urllib.error
from typing import Any

from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import condition, eventually, get_job, job_resource, table_resource


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
    job = get_job(kube_api, kube_namespace, "compact")
    assert job["status"]["attempts"] == 1 and condition(job, "Failed") is None
    assert job["status"].get("phase") in ("Pending", "Running")
