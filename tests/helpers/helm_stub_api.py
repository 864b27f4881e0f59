"""A stand-in for the Kubernetes API that lets Helm's own engine render and "install" the chart with no
API server: it answers discovery for the kinds the chart uses and keeps the objects Helm creates in
memory, so `lookup` in a template sees what an earlier install or upgrade left (tests/helpers/helm_driver.py
`render` runs it; tests/test_chart_render.py reads the manifests).

helm-sdkpy exposes neither `helm template` nor a client-only dry run, and every install first asks the
server for its version and resources; this stub is the smallest thing that answers. It validates
nothing: the tests validate each rendered manifest against Kubernetes' OpenAPI schemas themselves.
Standard library only, since it runs under Helm's Python 3.12 venv.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: the server version Helm sees (Capabilities.KubeVersion): the release CI validates against
KUBE_VERSION = {"major": "1", "minor": "36", "gitVersion": "v1.36.0", "platform": "linux/amd64"}


@dataclass(frozen=True)
class Kind:
    group_version: str
    kind: str
    plural: str
    namespaced: bool = True


#: every kind the chart renders or looks up; a template with another kind fails with "no matches for kind"
KINDS = (
    Kind("v1", "Namespace", "namespaces", namespaced=False),
    Kind("v1", "Service", "services"),
    Kind("v1", "ServiceAccount", "serviceaccounts"),
    Kind("v1", "Secret", "secrets"),
    Kind("v1", "ConfigMap", "configmaps"),
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Kind("apps/v1", "Deployment", "deployments"),
    Kind("apps/v1", "StatefulSet", "statefulsets"),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False),
    Kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    Kind(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        namespaced=False,
    ),
    Kind(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        namespaced=False,
    ),
    Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False),
    Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors"),
    Kind("monitoring.coreos.com/v1", "PrometheusRule", "prometheusrules"),
)
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _prefix(group_version: str) -> str:
    return "/api/v1" if group_version == "v1" else f"/apis/{group_version}"


def _resource_list(group_version: str) -> dict[str, Any]:
    resources = [
        {
            "name": k.plural,
            "singularName": k.kind.lower(),
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": VERBS,
        }
        for k in KINDS
        if k.group_version == group_version
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _group_list() -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for k in KINDS:
        if k.group_version == "v1":
            continue
        name, version = k.group_version.split("/")
        entry = {"groupVersion": k.group_version, "version": version}
        groups.setdefault(name, {"name": name, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(groups.values())}


def _not_found(path: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f"{path} not found",
        "reason": "NotFound",
        "code": 404,
    }


class Store:
    """The objects "in the cluster", keyed by their API path (collection path + "/" + name)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.version = 0

    def path_of(self, obj: dict[str, Any], namespace: str) -> str:
        kind = next(k for k in KINDS if k.kind == obj["kind"] and k.group_version == obj["apiVersion"])
        ns = obj["metadata"].get("namespace", namespace)
        where = f"/namespaces/{ns}" if kind.namespaced else ""
        return f"{_prefix(kind.group_version)}{where}/{kind.plural}/{obj['metadata']['name']}"

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.version += 1
            stored: dict[str, Any] = json.loads(json.dumps(obj))
            stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            stored["metadata"].setdefault("uid", f"uid-{self.version}")
            self.objects[path] = stored
            return stored

    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        """The status and JSON body the API server would give (for what Helm asks of it)."""
        if path == "/version":
            return 200, KUBE_VERSION
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return 200, _group_list()
        for group_version in {k.group_version for k in KINDS}:
            if path == _prefix(group_version):
                return 200, _resource_list(group_version)
        if method == "POST":
            assert body is not None
            return 201, self.put(f"{path}/{body['metadata']['name']}", body)
        with self.lock:
            if path in self.objects:
                if method == "DELETE":
                    return 200, self.objects.pop(path)
                return 200, self.objects[path]  # GET, and PATCH/PUT answered with the object as it is
            items = [o for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]
        if method == "GET" and (items or path.rsplit("/", 1)[-1] in {k.plural for k in KINDS}):
            return 200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}
        return 404, _not_found(path)


class StubAPI:
    """The stub on a loopback port, with a kubeconfig that points Helm at it; a context manager."""

    def __init__(self, workdir: Path, objects: list[dict[str, Any]], namespace: str) -> None:
        self.store = Store()
        for obj in objects:
            self.store.put(self.store.path_of(obj, namespace), obj)
        store = self.store

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw and self.command in ("POST", "PUT") else None
                status, answer = store.answer(self.command, self.path.split("?", 1)[0], body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # stdout carries the driver's one JSON answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.kubeconfig = workdir / "kubeconfig"
        self.kubeconfig.write_text(self._kubeconfig(self.server.server_address[1]))

    @staticmethod
    def _kubeconfig(port: int) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "stub", "user": {"token": "stub"}}],
            "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
            "current-context": "stub",
        }
        return json.dumps(config)  # JSON is YAML

    def __enter__(self) -> StubAPI:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
