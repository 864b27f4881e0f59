"""Least privilege, for real: the operator runs with a token of the ServiceAccount the chart creates,
bound to the Role the chart renders (the API server enforces RBAC). Everything works with those rights,
and taking away any one rule breaks what needs it."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import envtest
from tests.helpers.helm import helm, require_helm_python
from tests.helpers.kubelet import Kubelet
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import catalog_name, events_for, eventually, get, job_resource, table_resource
from tests.helpers.tables import staged_parquet
from tests.test_operator_compaction import small_files, wait_until_succeeded

from acidtables import Catalog
from acidtables.core.coordination.embedded import EmbeddedEtcd

ROOT = Path(__file__).resolve().parents[1]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
#: the chart's default account for driver pods, created in each watched namespace
SPARK_ACCOUNT = "acidtables-spark"


@pytest.fixture
def chart_operator(
    kube_api: envtest.KubeAPI,
    acidtables_crds: None,
    kube_namespace: str,
    etcd_server: EmbeddedEtcd,
    operator_env: dict[str, str],
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    """The chart installed to serve the test's namespace; the environment an operator process needs to
    run as the chart's ServiceAccount (a token from the TokenRequest API in its own kubeconfig)."""
    python = require_helm_python()
    release, namespace = f"r{uuid.uuid4().hex[:6]}", f"op-{uuid.uuid4().hex[:8]}"
    values = {
        "watchNamespaces": [kube_namespace],
        "etcd": {"bundled": {"enabled": False}, "external": {"endpoints": [etcd_server.endpoint]}},
    }
    answer = helm(
        python,
        kube_api.kubeconfig,
        "install",
        release,
        namespace,
        str(ROOT / "charts" / "acidtables"),
        json.dumps(values),
    )
    assert answer["ok"], answer
    account = f"{release}-acidtables-operator"
    token = envtest.service_account_token(kube_api, namespace, account)
    kubeconfig = envtest.write_kubeconfig(kube_api, token=token, path=tmp_path / "operator.kubeconfig")
    roles = {
        "role": f"{RBAC}/namespaces/{kube_namespace}/roles/{account}",
        "discovery": f"{RBAC}/clusterroles/{account}-discovery",
    }
    env = {**operator_env, "KUBECONFIG": str(kubeconfig), "ACIDTABLES_JOB_SERVICE_ACCOUNT": SPARK_ACCOUNT}
    try:
        yield {"env": env, **roles}
    finally:
        helm(python, kube_api.kubeconfig, "uninstall", release, namespace)
        envtest.delete_namespace(kube_api, namespace)


@pytest.mark.slow  # the compaction job starts a Spark JVM
def test_the_operator_does_everything_with_the_charts_rights(
    kube_api: envtest.KubeAPI, kube_namespace: str, chart_operator: dict[str, Any], catalog: Catalog, tmp_path: Path
) -> None:
    operator = OperatorProcess(tmp_path / "operator.log", chart_operator["env"], [kube_namespace])
    try:
        table = small_files(kube_api, kube_namespace, catalog, 3)
        assert any(e["reason"] == "Created" for e in events_for(kube_api, kube_namespace, "events"))
        with Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
            envtest.apply(kube_api, kube_namespace, job_resource("ranked"))
            status = wait_until_succeeded(kube_api, kube_namespace, "ranked", operator, kubelet)
        assert status["result"]["committedVersion"] == table.version
        assert "forbidden" not in operator.log().lower()
    finally:
        assert operator.stop() == 0, operator.log()[-4000:]


@pytest.mark.slow  # a driver and an executor JVM
def test_executors_run_as_pods_the_driver_creates_under_the_spark_accounts_rights(
    kube_api: envtest.KubeAPI, kube_namespace: str, chart_operator: dict[str, Any], catalog: Catalog, tmp_path: Path
) -> None:
    """`executors: 1`: the driver pod runs Spark's Kubernetes scheduler in client mode as the chart's
    Spark ServiceAccount (RBAC enforced): it creates its executor pod through the API, owned by the
    driver pod; the executor runs the job's tasks; the driver deletes it at the end."""
    token_file = tmp_path / "spark.token"
    token_file.write_text(envtest.service_account_token(kube_api, kube_namespace, SPARK_ACCOUNT))
    conf = {
        # what a cluster's DNS (kubernetes.default.svc) and the pod's projected token would give
        "spark.master": f"k8s://{kube_api.url}",
        "spark.kubernetes.authenticate.oauthTokenFile": str(token_file),
        "spark.kubernetes.authenticate.caCertFile": str(kube_api.ca_file),
    }
    spark = {"driverMemory": "1g", "executors": 1, "executorMemory": "1g", "conf": conf}
    operator = OperatorProcess(tmp_path / "operator.log", chart_operator["env"], [kube_namespace])
    try:
        table = small_files(kube_api, kube_namespace, catalog, 3)
        with Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
            envtest.apply(kube_api, kube_namespace, job_resource("wide", spark=spark))
            status = wait_until_succeeded(kube_api, kube_namespace, "wide", operator, kubelet, timeout_seconds=240)
            executors = [pod for name, pod in kubelet.started.items() if "-exec-" in name]
            assert len(executors) == 1, list(kubelet.started)
            owner = executors[0]["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("Pod", "wide-driver-1")
            driver = kubelet.started["wide-driver-1"]
            assert executors[0]["spec"]["containers"][0]["image"] == driver["spec"]["containers"][0]["image"]
            assert driver["spec"]["serviceAccountName"] == SPARK_ACCOUNT
            assert "Finished task" in kubelet.log(executors[0]["metadata"]["name"])  # the work ran there
            eventually(
                lambda: (
                    not [
                        p
                        for p in kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods")["items"]
                        if "-exec-" in p["metadata"]["name"]
                    ]
                ),
                "the executor pod deleted by its driver",
                operator,
            )
            assert "forbidden" not in kubelet.log("wide-driver-1").lower()
        assert status["result"]["committedVersion"] == table.version
        used = kube_api.calls(f"system:serviceaccount:{kube_namespace}:{SPARK_ACCOUNT}", kube_namespace)
        role = kube_api.request("GET", f"{RBAC}/namespaces/{kube_namespace}/roles/{SPARK_ACCOUNT}")
        granted = {
            (resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]
        }
        # the Role is exactly what Spark did, but for patching and deleting one executor pod, which only
        # a failed executor makes Spark do (tests/test_image_executors.py has executors fail)
        assert used <= granted, used - granted
        assert granted - used == {("pods", "delete"), ("pods", "patch")}, granted - used
        assert table.history(limit=1)[0].operation.display == "MINOR COMPACT"
    finally:
        assert operator.stop() == 0, operator.log()[-4000:]


def _without(role: dict[str, Any], resource: str) -> dict[str, Any]:
    changed = copy.deepcopy(role)
    changed["rules"] = [r for r in role["rules"] if resource not in r["resources"]]
    assert len(changed["rules"]) == len(role["rules"]) - 1
    return changed


@pytest.mark.parametrize(
    ("role", "resource", "evidence"),
    [
        ("role", "acidtables", "acidtables"),  # cannot watch its tables
        ("role", "compactionjobs", "compactionjobs"),  # cannot list jobs (automatic compaction, Compacting)
        ("role", "acidtables/status", "/status"),  # cannot show status
        ("role", "events", "events"),  # cannot post events
        ("role", "pods", "pods"),  # cannot create a driver pod
        ("discovery", "customresourcedefinitions", "customresourcedefinitions"),  # kopf cannot find its CRDs
        ("discovery", "namespaces", "namespaces"),  # kopf cannot watch the namespaces it serves
    ],
)
def test_taking_away_any_rule_breaks_what_needs_it(
    kube_api: envtest.KubeAPI,
    kube_namespace: str,
    chart_operator: dict[str, Any],
    catalog: Catalog,
    tmp_path: Path,
    role: str,
    resource: str,
    evidence: str,
) -> None:
    granted = kube_api.request("GET", chart_operator[role])
    kube_api.request("PUT", chart_operator[role], _without(granted, resource))
    operator = OperatorProcess(tmp_path / "operator.log", chart_operator["env"], [kube_namespace])
    try:
        envtest.apply(kube_api, kube_namespace, table_resource("needy"))
        if resource == "acidtables/status":
            # kopf's own status patch fails quietly; the status follower's, after a commit, says why
            eventually(lambda: "created table" in operator.log(), "the table created", operator)
            table = catalog.table(catalog_name(kube_namespace, "needy"))
            with table.begin("insert_into") as tx:
                tx.add_files([staged_parquet(tx, {"dt": "a"})])
                tx.commit()
        if resource == "pods":
            envtest.kubectl(
                kube_api, "wait", "--for=condition=Ready", "acidtable/needy", "-n", kube_namespace, "--timeout=60s"
            )
            envtest.apply(kube_api, kube_namespace, job_resource("needy-1", table="needy"))

        eventually(
            lambda: "forbidden" in operator.log().lower() and evidence in operator.log(),
            f"the operator refused access to {resource}",
            operator,
            timeout_seconds=60,
        )
        if resource in ("acidtables", "acidtables/status"):  # and its status shows nothing
            assert get(kube_api, kube_namespace, "needy").get("status", {}).get("tableId") is None
        if resource == "pods":  # and no driver pod exists
            assert kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods")["items"] == []
    finally:
        operator.stop()
