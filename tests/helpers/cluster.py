"""A real cluster for the e2e tier (tests/e2e/): reached through nothing but a kubeconfig, with the chart
installed in a namespace of the test's own, and writer and reader pods started from the one image.

`Cluster` speaks to the API server through the kubernetes client, so any authentication a kubeconfig
can hold works (tokens, client certificates, exec plugins); it has the `request` shape of
`envtest.KubeAPI`, so the scenario helpers of tests/helpers/resources.py serve both tiers.
`Release` is the chart installed for one test module: the operator's pods, their logs, and `run`, which
starts a pod of the image running tests/helpers/e2e_pod.py and returns the JSON it reports.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.helm import MISSING, helm, helm_python
from tests.helpers.resources import GROUP, HasLog, SampleKey, condition, eventually, metric_samples

KUBECONFIG_VARIABLE = "ACIDTABLES_E2E_KUBECONFIG"
IMAGE_VARIABLE = "ACIDTABLES_E2E_IMAGE"
#: optional: a StorageClass with ReadWriteMany for the warehouse claim (multi-node clusters)
STORAGE_CLASS_VARIABLE = "ACIDTABLES_E2E_STORAGE_CLASS"
CHART = Path(__file__).resolve().parents[2] / "charts" / "acidtables"
POD_SCRIPT = Path(__file__).with_name("e2e_pod.py")
#: where the warehouse claim is mounted in every pod, and so the root of every table's location
WAREHOUSE = "/warehouse"
#: the job image's user (the Spark image's); the operator runs as it too with a volume warehouse
POD_USER = 185
#: image pulls and JVM starts on a cold node take a while
POD_TIMEOUT_SECONDS = 600.0
#: settings the writer pods copy from the operator's container: how to reach etcd and the warehouse
SHARED_ENV_PREFIXES = ("ACIDTABLES_ETCD_", "ACIDTABLES_WAREHOUSE", "ACIDTABLES_S3_ENDPOINT", "AWS_")
#: the kinds a test applies (the examples hold them), by their plural
APPLIED_KINDS = {
    "AcidTable": "acidtables",
    "CompactionJob": "compactionjobs",
    "Deployment": "deployments",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}


def skip_reason() -> str | None:
    """Why the tier cannot run here, or None."""
    if not os.environ.get(KUBECONFIG_VARIABLE):
        return (
            f"the e2e tier needs a real cluster: set {KUBECONFIG_VARIABLE} to its kubeconfig and "
            f"{IMAGE_VARIABLE} to an image built from spark-images/Dockerfile that its nodes can pull"
        )
    return None


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: {status} {body[:500]}")
        self.status = status


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        import kubernetes

        self.kubeconfig = kubeconfig
        # any credentials a kubeconfig can hold (token, client certificate, exec plugin)
        self._client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]

    def _call(self, method: str, path: str, body: Any, content_type: str | None) -> bytes:
        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        serialized = self._client.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self._client.call_api(*serialized, _request_timeout=60)
        raw: bytes = response.read() or b""
        if response.status >= 400:
            raise ApiError(response.status, method, path, raw.decode(errors="replace"))
        return raw

    def request(self, method: str, path: str, body: Any = None) -> Any:
        content_type = None
        if body is not None:
            content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        raw = self._call(method, path, body, content_type)
        return json.loads(raw) if raw else None

    def text(self, path: str) -> str:
        return self._call("GET", path, None, None).decode(errors="replace")

    def apply(self, namespace: str, resource: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of one namespaced resource (`kubectl apply --server-side`, forced)."""
        group_version, kind = resource["apiVersion"], resource["kind"]
        plural = APPLIED_KINDS[kind]
        root = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        path = f"{root}/namespaces/{namespace}/{plural}/{resource['metadata']['name']}"
        query = "?fieldManager=acidtables-e2e&force=true"
        raw = self._call("PATCH", path + query, json.dumps(resource), "application/apply-patch+yaml")
        result: dict[str, Any] = json.loads(raw)
        return result

    def exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete(self, path: str, *, grace_seconds: int | None = None) -> None:
        body = None if grace_seconds is None else {"kind": "DeleteOptions", "gracePeriodSeconds": grace_seconds}
        try:
            self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.status != 404:
                raise


def image_values(image: str) -> dict[str, str]:
    """`repository:tag` as the chart's image values (a reference without a tag is `latest`)."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:  # no tag: the colon, if any, was a registry's port
        return {"repository": image, "tag": "latest"}
    return {"repository": name, "tag": tag}


@dataclass
class Release:
    """The chart installed in `namespace` for one test module, its operator serving that namespace."""

    cluster: Cluster
    name: str
    namespace: str
    image: str
    helm_python: Path
    pods_started: list[str] = field(default_factory=list)

    @property
    def deployment_path(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.name}-acidtables-operator"

    def apply(self, resource: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.apply(self.namespace, resource)

    # --- the operator ----------------------------------------------------------------------------

    def operator_pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component=operator"
        items = self.cluster.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={selector}")
        return [p for p in items["items"] if not p["metadata"].get("deletionTimestamp")]

    def pod_log(self, pod: str, tail_lines: int = 200) -> str:
        try:
            return self.cluster.text(f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log?tailLines={tail_lines}")
        except Exception as exc:  # a failure message must not fail for want of a log
            return f"(no log of {pod}: {exc})"

    def log(self) -> str:
        """The operator pods' logs (HasLog, for failure messages)."""
        return "\n".join(
            f"--- {p['metadata']['name']}:\n{self.pod_log(p['metadata']['name'])}" for p in self.operator_pods()
        )

    def wait_for_operator(self, replicas: int, timeout_seconds: float = POD_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
        """Until `replicas` operator pods run (image pulled, container started)."""

        def running() -> list[dict[str, Any]] | None:
            pods = [p for p in self.operator_pods() if p.get("status", {}).get("phase") == "Running"]
            return pods if len(pods) == replicas else None

        found: list[dict[str, Any]] = eventually(running, f"{replicas} operator pod(s) running", self, timeout_seconds)
        return found

    def wait_for_condition(
        self, plural: str, name: str, type_: str, timeout_seconds: float = 120.0, operator: HasLog | None = None
    ) -> dict[str, Any]:
        """`kubectl wait --for=condition=TYPE`: the resource once its condition `type_` is True."""
        path = f"{GROUP}/namespaces/{self.namespace}/{plural}/{name}"

        def met() -> dict[str, Any] | None:
            resource: dict[str, Any] = self.cluster.request("GET", path)
            found = condition(resource, type_)
            return resource if found and found["status"] == "True" else None

        resource: dict[str, Any] = eventually(met, f"{plural}/{name} {type_}", operator or self, timeout_seconds)
        return resource

    # --- writer and reader pods ------------------------------------------------------------------------

    def shared_settings(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """The operator container's etcd and warehouse settings, and the volumes they need."""
        template = self.cluster.request("GET", self.deployment_path)["spec"]["template"]["spec"]
        container = template["containers"][0]
        env = [e for e in container["env"] if e["name"].startswith(SHARED_ENV_PREFIXES)]
        names = {"warehouse", "etcd-tls"}
        volumes = [v for v in template.get("volumes") or [] if v["name"] in names]
        mounts = [m for m in container.get("volumeMounts") or [] if m["name"] in names]
        return env, volumes, mounts

    def start(self, prefix: str, action: str, args: dict[str, Any] | None = None) -> str:
        """Start a pod of the image running e2e_pod.py's `action`; its name."""
        env, volumes, mounts = self.shared_settings()
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "acidtables-e2e"}},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": POD_USER, "fsGroup": POD_USER},
                "volumes": volumes,
                "containers": [
                    {
                        "name": "writer",
                        "image": self.image,
                        "command": ["python", "-c", POD_SCRIPT.read_text(), action, json.dumps(args or {})],
                        "env": env,
                        "volumeMounts": mounts,
                        "resources": {"requests": {"memory": "1Gi"}},
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                    }
                ],
            },
        }
        self.cluster.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod)
        self.pods_started.append(name)
        return name

    def result(self, pod: str, timeout_seconds: float = POD_TIMEOUT_SECONDS) -> dict[str, Any]:
        """The JSON the pod reported, once it has finished; a failure shows its log."""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}"
        deadline = time.monotonic() + timeout_seconds
        while True:
            status = self.cluster.request("GET", path).get("status", {})
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {pod} did not finish within {timeout_seconds:g} s: {status}")
            time.sleep(0.5)  # polling interval of the wait
        terminated = (status.get("containerStatuses") or [{}])[0].get("state", {}).get("terminated", {})
        try:
            reported: dict[str, Any] = json.loads(terminated.get("message") or "")
        except ValueError:
            reported = {}
        if status["phase"] != "Succeeded" or not reported:
            raise AssertionError(f"pod {pod} {status['phase']}: {terminated}\nits log:\n{self.pod_log(pod, 80)}")
        return reported

    def run(self, prefix: str, action: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.result(self.start(prefix, action, args))

    def metrics(self) -> dict[SampleKey, float]:
        """/metrics of an operator pod, through the API server's proxy to the chart's metrics Service."""
        path = f"/api/v1/namespaces/{self.namespace}/services/{self.name}-acidtables-metrics:metrics/proxy/metrics"
        return metric_samples(self.cluster.text(path))

    def uninstall(self) -> dict[str, Any]:
        return helm(self.helm_python, self.cluster.kubeconfig, "uninstall", self.name, self.namespace)


def chart_values(namespace: str, image: str, **overrides: Any) -> dict[str, Any]:
    """The chart's values for an e2e install: the image for the operator and the jobs, the bundled etcd
    as one small member, the warehouse on the namespace's claim, and timings short enough to test."""
    values: dict[str, Any] = {
        "image": {**image_values(image), "pullPolicy": "IfNotPresent"},
        "jobs": {"image": image_values(image)},
        "watchNamespaces": [namespace],
        "leaderLeaseSeconds": 5,
        "driverStartTimeoutSeconds": 30,
        "autocompact": {"intervalSeconds": 2, "backoffSeconds": 5},
        "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "warehouse": {"location": WAREHOUSE, "volume": {"persistentVolumeClaim": {"claimName": "warehouse"}}},
        "etcd": {
            "bundled": {
                "replicas": 1,
                "storage": {"size": "1Gi"},
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
            }
        },
    }
    values.update(overrides)
    return values


def warehouse_claim() -> dict[str, Any]:
    """The claim every pod mounts at WAREHOUSE: the cluster's default StorageClass, ReadWriteOnce (a
    single-node cluster such as kind), or ReadWriteMany in the class $ACIDTABLES_E2E_STORAGE_CLASS names."""
    storage_class = os.environ.get(STORAGE_CLASS_VARIABLE)
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany" if storage_class else "ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "warehouse"}, "spec": spec}


def install(cluster: Cluster, image: str, **overrides: Any) -> Release:
    """A fresh namespace, the warehouse claim in it, and the chart installed there to serve it."""
    python = helm_python()
    if python is None:
        raise AssertionError(f"installing the chart: {MISSING}")
    suffix = uuid.uuid4().hex[:8]
    namespace, name = f"acidtables-e2e-{suffix}", f"e2e{suffix[:6]}"
    cluster.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", warehouse_claim())
    values = chart_values(namespace, image, **overrides)
    answer = helm(python, cluster.kubeconfig, "install", name, namespace, str(CHART), json.dumps(values))
    if not answer["ok"]:
        raise AssertionError(f"the chart did not install: {answer}")
    return Release(cluster, name, namespace, image, python)


def tear_down(release: Release, timeout_seconds: float = 120.0) -> None:
    """Tables deleted while the operator still runs (their finalizers released), then the chart, then the
    namespace; a finalizer still there after `timeout_seconds` is removed so the namespace can go."""
    cluster, namespace = release.cluster, release.namespace
    for plural in ("compactionjobs", "acidtables"):
        base = f"{GROUP}/namespaces/{namespace}/{plural}"
        for item in cluster.request("GET", base)["items"]:
            cluster.delete(f"{base}/{item['metadata']['name']}")
        deadline = time.monotonic() + timeout_seconds
        while cluster.request("GET", base)["items"] and time.monotonic() < deadline:
            time.sleep(1)  # polling interval of the wait
        for item in cluster.request("GET", base)["items"]:
            cluster.request("PATCH", f"{base}/{item['metadata']['name']}", {"metadata": {"finalizers": None}})
    release.uninstall()
    cluster.delete(f"/api/v1/namespaces/{namespace}")
