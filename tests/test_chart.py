"""The Helm chart, with Helm's own engine (helm-sdkpy) against the real kube-apiserver: it lints,
installs (Helm renders it and the server validates every object against its OpenAPI), refuses bad
values by schema with the reason, keeps its CRDs identical to crds/, and grants no wildcard rights."""

from __future__ import annotations

import json
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import envtest
from tests.helpers.helm import helm, require_helm_python
from tests.helpers.resources import job_resource, poll

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "acidtables"


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    return require_helm_python()


@pytest.fixture
def release(kube_api: envtest.KubeAPI, helm_bin: Path) -> Iterator[tuple[str, str]]:
    """A release name and a fresh namespace; uninstalled afterwards."""
    name, namespace = f"r{uuid.uuid4().hex[:6]}", f"chart-{uuid.uuid4().hex[:8]}"
    yield name, namespace
    helm(helm_bin, kube_api.kubeconfig, "uninstall", name, namespace)
    envtest.delete_namespace(kube_api, namespace)


def install(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str], values: dict[str, Any]
) -> dict[str, Any]:
    return helm(helm_bin, kube_api.kubeconfig, "install", release[0], release[1], str(CHART), json.dumps(values))


def test_the_chart_lints_clean(helm_bin: Path) -> None:
    answer = helm(helm_bin, None, "lint", str(CHART))
    assert answer["ok"], answer
    assert answer["result"]["Errors"] is None
    assert all(m["Severity"] <= 1 for m in answer["result"]["Messages"]), answer  # info only


def test_the_chart_copy_of_the_crds_is_crds(helm_bin: Path) -> None:
    copies = {p.name: p.read_text() for p in (CHART / "files" / "crds").glob("*.yaml")}
    assert copies == {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}


def test_a_default_install_creates_a_locked_down_operator_and_a_bundled_etcd(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str]
) -> None:
    answer = install(kube_api, helm_bin, release, {})
    assert answer["ok"], answer
    name, namespace = release
    deployment = kube_api.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}-acidtables-operator")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert (
        pod["securityContext"]["runAsNonRoot"] is True
        and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health", "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health", "scheme": "HTTP"}
    assert container["resources"]["requests"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ACIDTABLES_ETCD_ENDPOINTS"].startswith(
        f"http://{name}-acidtables-etcd-0.{name}-acidtables-etcd.{namespace}.svc:2379"
    )
    etcd = kube_api.request("GET", f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}-acidtables-etcd")
    command = etcd["spec"]["template"]["spec"]["containers"][0]["command"]
    # one member by default, so a single-node cluster comes up (tests/test_chart_render.py has the rest)
    assert etcd["spec"]["replicas"] == 1 and "--quota-backend-bytes=8589934592" in command
    assert any(c.startswith("--auto-compaction-retention=") for c in command)
    with pytest.raises(urllib.error.HTTPError):  # one member: no disruption budget to keep
        kube_api.request("GET", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}-acidtables-etcd")
    crd = kube_api.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/acidtables.acidtables.io")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_watched_namespaces_get_roles_not_a_cluster_role_and_no_wildcards(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str]
) -> None:
    name, namespace = release
    watched = f"{namespace}-team"
    kube_api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": watched}}
    )
    try:
        values = {
            "watchNamespaces": [watched],
            "etcd": {
                "bundled": {"enabled": False},
                "external": {
                    "endpoints": ["https://etcd.db:2379"],
                    "credentialsSecret": "etcd-auth",
                    "tlsSecret": "etcd-tls",
                    "clientCertificate": True,
                },
            },
            "warehouse": {"s3": {"credentialsSecret": "lake-keys"}},
            "metrics": {"enabled": False},
        }
        answer = install(kube_api, helm_bin, release, values)
        assert answer["ok"], answer
        role = kube_api.request(
            "GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{watched}/roles/{name}-acidtables-operator"
        )
        spark = kube_api.request(
            "GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{watched}/roles/acidtables-spark"
        )
        for rules in (role["rules"], spark["rules"]):
            for rule in rules:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        with pytest.raises(urllib.error.HTTPError):
            kube_api.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}-acidtables-operator")
        with pytest.raises(urllib.error.HTTPError):  # metrics disabled: no Service
            kube_api.request("GET", f"/api/v1/namespaces/{namespace}/services/{name}-acidtables-metrics")
        deployment = kube_api.request(
            "GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}-acidtables-operator"
        )
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert env["ACIDTABLES_ETCD_ENDPOINTS"]["value"] == "https://etcd.db:2379"
        assert env["ACIDTABLES_ETCD_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "etcd-auth"
        assert f"--namespace={watched}" in container["args"]
        # what the operator hands on to job pods: the Secrets' names, never their contents
        assert env["ACIDTABLES_ETCD_TLS_SECRET"]["value"] == "etcd-tls"
        assert env["ACIDTABLES_ETCD_CERT_FILE"]["value"] == "/etc/acidtables/etcd-tls/tls.crt"
        assert env["ACIDTABLES_S3_CREDENTIALS_SECRET"]["value"] == "lake-keys"
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert {"name": "etcd-tls", "secret": {"secretName": "etcd-tls", "defaultMode": 420}} in volumes
    finally:
        envtest.delete_namespace(kube_api, watched)


def test_a_warehouse_volume_is_mounted_at_the_location_and_handed_on_to_job_pods(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str]
) -> None:
    volume = {"persistentVolumeClaim": {"claimName": "lake"}}
    answer = install(kube_api, helm_bin, release, {"warehouse": {"location": "/warehouse", "volume": volume}})
    assert answer["ok"], answer
    name, namespace = release
    deployment = kube_api.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}-acidtables-operator")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"name": "warehouse", "persistentVolumeClaim": {"claimName": "lake"}} in pod["volumes"]
    assert {"name": "warehouse", "mountPath": "/warehouse"} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # the operator mounts it at the same path in each driver pod (tests/test_driver_pod.py)
    assert json.loads(env["ACIDTABLES_WAREHOUSE_VOLUME"]) == volume and env["ACIDTABLES_WAREHOUSE"] == "/warehouse"
    # the job pods' user, so the operator and the jobs write in each other's directories
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"]) == (185, 185)
    assert container["command"] == ["acidtables"] and container["args"][0] == "operator"


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"replica": 2}, "replica"),  # a typo: additionalProperties false
        ({"replicas": 0}, "replicas"),
        ({"etcd": {"bundled": {"enabled": False}}}, "endpoints"),
        ({"etcd": {"bundled": {"storage": {"size": "lots"}}}}, "size"),
        ({"metrics": {"port": 80}}, "port"),
        ({"etcd": {"bundled": {"image": {"repository": "x", "tag": "3.4.0"}}}}, "tag"),
        # a mounted volume needs a path to be mounted at, and is one volume source
        ({"warehouse": {"location": "s3a://lake/w", "volume": {"hostPath": {"path": "/x"}}}}, "location"),
        ({"warehouse": {"location": "/w", "volume": {"hostPath": {"path": "/x"}, "nfs": {}}}}, "volume"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_bad_values_are_refused_by_the_schema_with_the_reason(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str], values: dict[str, Any], reason: str
) -> None:
    answer = install(kube_api, helm_bin, release, values)
    assert not answer["ok"]
    assert "values don't meet the specifications of the schema" in answer["error"] and reason in answer["error"]


def test_an_upgrade_applies_new_values_and_upgrades_the_crds_too(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str]
) -> None:
    assert install(kube_api, helm_bin, release, {})["ok"]
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/acidtables.acidtables.io"
    crd = kube_api.request("GET", crd_path)
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = []  # an older CRD than the chart's
    kube_api.request("PUT", crd_path, crd)
    name, namespace = release
    answer = helm(helm_bin, kube_api.kubeconfig, "upgrade", name, namespace, str(CHART), json.dumps({"replicas": 2}))
    assert answer["ok"], answer
    deployment = kube_api.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}-acidtables-operator")
    assert (deployment["spec"]["replicas"], deployment["spec"]["strategy"]["type"]) == (2, "RollingUpdate")
    columns = kube_api.request("GET", crd_path)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns][:2] == ["Version", "Files"]  # Helm alone would have left it old


def test_a_release_watching_namespaces_refuses_its_kinds_elsewhere_when_they_are_created(
    kube_api: envtest.KubeAPI, helm_bin: Path, release: tuple[str, str]
) -> None:
    """Issue 40, item 5: the chart's ValidatingAdmissionPolicy, enforced by the API server itself: a
    CompactionJob in a namespace the release does not watch is refused at creation, the message naming
    the chart value to change; one in a watched namespace is created."""
    name, namespace = release
    watched = f"{namespace}-team"
    kube_api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": watched}}
    )
    try:
        answer = install(kube_api, helm_bin, release, {"watchNamespaces": [watched], "metrics": {"enabled": False}})
        assert answer["ok"], answer

        def job(where: str) -> Any:
            body = job_resource(f"job-{uuid.uuid4().hex[:6]}")
            return kube_api.request("POST", f"/apis/acidtables.io/v1alpha1/namespaces/{where}/compactionjobs", body)

        def refused() -> str | None:
            try:
                job(namespace)  # the release's own namespace is not watched either
            except urllib.error.HTTPError as exc:
                return f"{exc.code} {exc.read().decode()}"
            return None  # the API server has not loaded the policy yet: a moment after the install

        said = poll(refused, "a CompactionJob refused outside the watched namespace", kube_api.log,
                    timeout_seconds=60, interval_seconds=0.5)  # fmt: skip
        assert said.startswith("403 ") and f"{name}-acidtables-watched-namespaces" in said, said
        assert f"add {namespace} to the chart value watchNamespaces" in said, said
        assert f"--set watchNamespaces={{{watched},{namespace}}}" in said, said
        assert job(watched)["metadata"]["namespace"] == watched
    finally:
        envtest.delete_namespace(kube_api, watched)
