"""Spark executors on a pod network (issue 30, items 1-3): the operator's driver pod and the
executor pods Spark's Kubernetes scheduler creates, each a podman container of the real image in a
network namespace of its own, talking over a bridge as pods do.

The operator runs here against kmock's API server (TLS, on the node's address of the pod network, as
pods reach a real one through KUBERNETES_SERVICE_HOST); the test kubelet (tests/helpers/podman_kubelet.py)
starts each pod the API server holds: the driver pod exactly as the operator wrote it, the executors
exactly as Spark wrote them. etcd listens on the node's address too. So the driver's settings, the
address it gives its executors, the executors' pod template and the rights Spark uses are all the
product's own; only the API server is emulated (no kube-apiserver can be had in CI), and the kubelet.
Where KUBEBUILDER_ASSETS names a kube-apiserver, the last test runs the same on a real one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from tests.helpers import envtest, pod_network
from tests.helpers.kmock_operator import KmockOperator
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.pod_network import PodNetwork
from tests.helpers.podman_kubelet import PodmanKubelet, account_token, give_to_pod_user
from tests.helpers.resources import GROUP, job_resource
from tests.helpers.servers import make_tls_files
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.operator.compactions import parse_time
from acidtables.operator.executor_failures import is_executor
from acidtables.operator.spark_rbac import SPARK_RULES

pytestmark = pytest.mark.image

IMAGE_VARIABLE = "ACIDTABLES_TEST_IMAGE"
REQUIRE_VARIABLE = "ACIDTABLES_REQUIRE_IMAGE"
NAMESPACE = "sales"
ACCOUNT = "acidtables-spark"


def _unavailable() -> str | None:
    if not os.environ.get(IMAGE_VARIABLE):
        return f"{IMAGE_VARIABLE} names no image (`make image-test` builds one and runs these tests)"
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman)"
    return pod_network.available()


@pytest.fixture(scope="module")
def image() -> str:
    problem = _unavailable()
    if problem:
        if os.environ.get(REQUIRE_VARIABLE):
            pytest.fail(f"{REQUIRE_VARIABLE} is set but {problem}")
        pytest.skip(problem)
    return os.environ[IMAGE_VARIABLE]


@pytest.fixture
def node() -> Iterator[tuple[PodNetwork, Path]]:
    """The pod network, and a work directory uid 185 can use (mounted at its own path)."""
    workdir = Path(tempfile.mkdtemp(prefix="acidtables-executors-"))
    workdir.chmod(0o755)
    try:
        with PodNetwork() as network:
            yield network, workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _small_files(catalog: Catalog, name: str, partitions: Sequence[str] = ("a", "b", "c")) -> Table:
    """Four small files in each partition: what a minor compaction merges."""
    table = catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"])
    for round_ in range(4):
        tx = table.begin("insert_into")
        tx.add_files([staged_parquet(tx, {"dt": dt}, rows=round_ + 1) for dt in partitions])
        tx.commit()
    return table


def _rows(table: Table) -> list[tuple[Any, ...]]:
    """The table's rows at its head, read from its Parquet files (no Spark in the test process)."""
    rows = []
    for file in table.snapshot().files:
        data = pq.read_table(table.storage.absolute(file.path)).to_pydict()
        rows += [(value, file.partition.get("dt")) for value in data["id"]]
    return sorted(rows)


def _granted(resource: str, verb: str) -> bool:
    return any(
        resource in rule["resources"] and verb in rule["verbs"] and "" in rule["apiGroups"] for rule in SPARK_RULES
    )


@dataclass
class PodCluster:
    """The operator (kmock's API server on the pod network), the podman kubelet, etcd and a catalog."""

    operator: KmockOperator
    kubelet: PodmanKubelet
    catalog: Catalog

    def run(self, job: str, table: str, spark: dict[str, Any]) -> dict[str, Any]:
        """Create a CompactionJob (no retries) and wait until it ends: its status."""
        body = job_resource(job, table=table, spark=spark, backoffLimit=0)
        self.operator.request("POST", f"{GROUP}/namespaces/{NAMESPACE}/compactionjobs", body)

        def finished() -> dict[str, Any] | None:
            found = self.operator.request("GET", f"{GROUP}/namespaces/{NAMESPACE}/compactionjobs/{job}")
            status: dict[str, Any] = found.get("status") or {}
            return status if status.get("phase") in ("Succeeded", "Failed", "Conflicted") else None

        try:
            status: dict[str, Any] = self.operator.eventually(finished, f"{job} finished", timeout_seconds=300)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
        return status

    def executors(self) -> list[str]:
        """The executor pods the kubelet started, by name."""
        return [key for key, pod in self.kubelet.started.items() if is_executor(pod)]

    def logs(self) -> str:
        return "\n".join(f"--- {pod}\n{self.kubelet.log(pod)[-3000:]}" for pod in self.kubelet.started)

    def warnings(self, job: str) -> list[tuple[str, str]]:
        """(reason, message) of every Warning Event on the job."""
        return [
            (str(e.get("reason")), str(e.get("message")))
            for e in self.operator.objects("v1/events", NAMESPACE)
            if e.get("involvedObject", {}).get("name") == job and e.get("type") == "Warning"
        ]

    def spark_calls(self) -> set[tuple[str, str]]:
        """(resource, verb) of every call made under the job's ServiceAccount: Spark's."""
        assert self.operator.kube is not None
        return self.operator.kube.calls_by(account_token(NAMESPACE, ACCOUNT))


@pytest.fixture
def cluster(image: str, node: tuple[PodNetwork, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[PodCluster]:
    network, workdir = node
    etcd = EmbeddedEtcd(workdir / "etcd", host=network.node_ip).start()
    warehouse = workdir / "warehouse"
    prefix = f"/executors-{uuid.uuid4().hex[:8]}"
    tls = make_tls_files(workdir / "api-tls", addresses=(network.node_ip,))
    operator = KmockOperator(
        workdir,
        etcd.endpoint,
        prefix,
        host=network.node_ip,
        tls=tls,
        job_image=image,
        job_service_account=ACCOUNT,
        create_job_accounts=True,
        warehouse_volume={"hostPath": {"path": str(warehouse)}},
        warehouse_path=str(warehouse),
        job_env={
            "ACIDTABLES_ETCD_ENDPOINTS": etcd.endpoint,
            "ACIDTABLES_ETCD_PREFIX": prefix,
            "ACIDTABLES_WAREHOUSE": str(warehouse),
        },
    )
    settings = Settings(etcd=EtcdSettings((etcd.endpoint,), prefix=prefix), warehouse=str(warehouse))
    try:
        with Catalog(settings) as catalog:
            operator.start(monkeypatch.setenv)
            try:
                (workdir / "pods").mkdir(mode=0o755)
                kubelet = PodmanKubelet(operator, NAMESPACE, workdir / "pods", network=network, ca_file=tls.ca_file)
                with kubelet:
                    yield PodCluster(operator, kubelet, catalog)
            finally:
                operator.stop()
    finally:
        etcd.stop()


def test_executors_on_their_own_network_register_with_the_driver_and_run_its_tasks(cluster: PodCluster) -> None:
    spread, alone = (
        _small_files(cluster.catalog, f"{NAMESPACE}.spread"),
        _small_files(cluster.catalog, f"{NAMESPACE}.alone"),
    )
    before = _rows(spread)
    give_to_pod_user(cluster.catalog.settings.warehouse)
    status = cluster.run("with-executors", "spread", {"executors": 2, "executorMemory": "512m", "driverMemory": "1g"})
    assert status["phase"] == "Succeeded", f"{status}\n{cluster.logs()}"
    status = cluster.run("without", "alone", {"driverMemory": "1g"})
    assert status["phase"] == "Succeeded", f"{status}\n{cluster.logs()}"

    # executors that succeeded, removed by Spark at the end: no Warning, no failure (issue 40, item 3)
    assert int((status_of(cluster, "with-executors").get("executors") or {}).get("failed") or 0) == 0
    assert cluster.warnings("with-executors") == [], cluster.warnings("with-executors")

    executors = cluster.executors()
    assert len(executors) == 2, f"executor pods started: {executors}"
    logs = {key: cluster.kubelet.log(key) for key in executors}
    for key, text in logs.items():  # each reached the driver over the pod network
        assert "Successfully registered with driver" in text, f"{key}:\n{text[-3000:]}"
    assert any("Running task" in text for text in logs.values()), logs

    # the same compaction, with and without executors: the same rows, laid out alike
    assert _rows(spread) == before == _rows(alone)
    assert sorted(f.rows for f in spread.snapshot().files) == sorted(f.rows for f in alone.snapshot().files)
    assert len(spread.snapshot().files) == 3  # one file a partition

    # every call Spark's scheduler made under the job's account is one its Role grants
    calls = cluster.spark_calls()
    assert ("pods", "create") in calls  # the executors were Spark's own doing
    assert {call for call in calls if not _granted(*call)} == set()


def test_executors_that_cannot_reach_the_driver_fail_the_job_with_their_own_reason(cluster: PodCluster) -> None:
    """The job's own settings bring back the bind address of issue 30: Spark tells executors the driver
    is at 0.0.0.0, each dials itself and dies, and Spark's driver gives up after its executor failures
    saying only that its context stopped. The job says what the executors said, and every call Spark
    made on the way (it removes and replaces failed executors) is one its Role grants."""
    _small_files(cluster.catalog, f"{NAMESPACE}.doomed")
    give_to_pod_user(cluster.catalog.settings.warehouse)
    spark = {
        "executors": 2,
        "executorMemory": "512m",
        "driverMemory": "1g",
        "conf": {"spark.driver.bindAddress": "0.0.0.0"},
    }
    status = cluster.run("doomed", "doomed", spark)
    assert status["phase"] == "Failed", f"{status}\n{cluster.logs()}"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ExecutorsFailed", f"{status}\n{cluster.logs()}"
    message = status["message"]
    assert message.startswith("executors failed to start or to reach the driver ("), message
    assert "exited with code 1" in message and "0.0.0.0" in message, message
    assert status["executors"]["failed"] >= 2, status
    assert {call for call in cluster.spark_calls() if not _granted(*call)} == set()


def status_of(cluster: PodCluster, job: str) -> dict[str, Any]:
    found = cluster.operator.request("GET", f"{GROUP}/namespaces/{NAMESPACE}/compactionjobs/{job}")
    status: dict[str, Any] = found.get("status") or {}
    return status


def test_executors_whose_image_cannot_be_pulled_fail_the_job_within_their_deadline(cluster: PodCluster) -> None:
    """Issue 40, item 2: the executors' image is not there (the kubelet says ErrImagePull), so Spark's
    driver waits for resources for ever; the job's own deadline (60 s from the driver's start) fails it,
    naming the pods' reason, and removes the driver and its executor pods. The table is untouched."""
    table = _small_files(cluster.catalog, f"{NAMESPACE}.unpulled")
    files = len(table.snapshot().files)
    give_to_pod_user(cluster.catalog.settings.warehouse)
    spark = {
        "executors": 2,
        "executorMemory": "512m",
        "driverMemory": "1g",
        "executorStartTimeoutSeconds": 60,
        "conf": {"spark.kubernetes.executor.container.image": "localhost/acidtables-absent:0"},
    }
    status = cluster.run("unpulled", "unpulled", spark)
    said = f"{status}\n{cluster.logs()}"
    assert status["phase"] == "Failed", said
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ExecutorsNotStarted", said
    assert status["message"].startswith("no executor started within 60 s of the driver's start (2 requested): "), said
    assert "ErrImagePull" in status["message"] and "localhost/acidtables-absent:0" in status["message"], said
    # within its deadline: the driver pod's start (here its creation: the test kubelet gives no startedAt)
    # plus 60 s, plus a tick of the job's timer
    created = parse_time(cluster.kubelet.started["unpulled-driver-1"]["metadata"]["creationTimestamp"])
    ended = parse_time(status["completionTime"])
    assert created is not None and ended is not None
    assert timedelta(seconds=59) <= ended - created <= timedelta(seconds=75), (created, ended)
    posted = ("ExecutorsNotStarted", status["message"] + "; the driver and its executor pods are removed")
    # kopf posts the Event after the status patch lands
    cluster.operator.eventually(lambda: posted in cluster.warnings("unpulled"), "the Warning Event", timeout_seconds=30)

    def removed() -> list[dict[str, Any]] | None:
        """The pods left once the driver is gone and nothing runs: executors Spark's dying driver may
        have created after the operator removed its others."""
        pods = cluster.operator.objects("v1/pods", NAMESPACE)
        gone = not [p for p in pods if p["metadata"]["name"] == "unpulled-driver-1"]
        return pods if gone and not cluster.kubelet.running() else None

    cluster.operator.eventually(
        lambda: removed() is not None, "the driver removed, nothing running", timeout_seconds=60
    )
    for pod in removed() or []:  # kmock has no garbage collector: a cluster's removes these with their owner
        assert is_executor(pod) and pod["metadata"]["ownerReferences"][0]["name"] == "unpulled-driver-1", pod
    assert not [key for key in cluster.executors() if key.startswith("unpulled")]  # none ever ran
    assert len(table.snapshot().files) == files


# --- the same on a real kube-apiserver -------------------------------------------------------------


@pytest.mark.slow
def test_on_a_real_api_server_two_and_four_executors_run_the_tasks_under_the_spark_role(
    image: str, node: tuple[PodNetwork, Path]
) -> None:
    """Where KUBEBUILDER_ASSETS names a kube-apiserver: the same pods, with RBAC, admission, watches and
    the operator's own process all real (only the kubelet is this test's). A job with two executors and
    one with four on a larger table succeed, each executor registers and runs tasks, and the Spark
    account's calls, read from the API server's audit log, are all its Role grants."""
    assets = envtest.assets_dir()
    if assets is None or envtest.missing_binaries(assets):
        pytest.skip(f"needs {envtest.ASSETS_VARIABLE} (kube-apiserver, etcd, kubectl): the real API server tier")
    network, workdir = node
    api = envtest.start(assets, workdir / "kube-apiserver", host=network.node_ip)
    etcd = EmbeddedEtcd(workdir / "etcd", host=network.node_ip).start()
    warehouse = workdir / "warehouse"
    prefix = f"/executors-{uuid.uuid4().hex[:8]}"
    operator = None
    try:
        envtest.kubectl(api, "apply", "--server-side", "-f", str(Path(__file__).resolve().parents[1] / "crds"))
        envtest.kubectl(api, "wait", "--for=condition=Established", "--timeout=60s", "crd/compactionjobs.acidtables.io")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        api.request("POST", "/api/v1/namespaces", namespace)
        settings = Settings(etcd=EtcdSettings((etcd.endpoint,), prefix=prefix), warehouse=str(warehouse))
        with Catalog(settings) as catalog:
            small = _small_files(catalog, f"{NAMESPACE}.small")
            large = _small_files(catalog, f"{NAMESPACE}.large", partitions=[f"p{i}" for i in range(8)])
            rows = {"small": _rows(small), "large": _rows(large)}
            give_to_pod_user(warehouse)
            env = {
                "KUBECONFIG": str(api.kubeconfig),
                "ACIDTABLES_ETCD_ENDPOINTS": etcd.endpoint,
                "ACIDTABLES_ETCD_PREFIX": prefix,
                "ACIDTABLES_WAREHOUSE": str(warehouse),
                "ACIDTABLES_WAREHOUSE_VOLUME": json.dumps({"hostPath": {"path": str(warehouse)}}),
                "ACIDTABLES_JOB_IMAGE": image,
                "ACIDTABLES_JOB_SERVICE_ACCOUNT": ACCOUNT,
                "ACIDTABLES_JOB_ACCOUNTS_CREATE": "true",
                "ACIDTABLES_METRICS_PORT": "0",
            }
            operator = OperatorProcess(workdir / "operator.log", env, [NAMESPACE])
            (workdir / "pods").mkdir(mode=0o755)
            kubelet = PodmanKubelet(
                api,
                NAMESPACE,
                workdir / "pods",
                network=network,
                ca_file=api.ca_file,
                token=partial(envtest.service_account_token, api),
            )
            with kubelet:
                for job, table, executors in (("two", "small", 2), ("four", "large", 4)):
                    spark = {"executors": executors, "executorMemory": "512m", "driverMemory": "1g"}
                    envtest.apply(api, NAMESPACE, job_resource(job, table=table, spark=spark, backoffLimit=0))
                    wait = ("wait", "-n", NAMESPACE, "--for=condition=Finished", "--timeout=300s")
                    with contextlib.suppress(subprocess.CalledProcessError):  # said below, with the logs
                        envtest.kubectl(api, *wait, f"compactionjob/{job}")
                    found = api.request("GET", f"{GROUP}/namespaces/{NAMESPACE}/compactionjobs/{job}")
                    logs = "\n".join(f"--- {pod}\n{kubelet.log(pod)[-2000:]}" for pod in kubelet.started)
                    said = f"{found.get('status')}\n{logs}\n{kubelet.errors[-5:]}\n{operator.log()[-3000:]}"
                    assert found.get("status", {}).get("phase") == "Succeeded", said
                    started = [key for key, pod in kubelet.started.items() if is_executor(pod) and key.startswith(job)]
                    assert len(started) == executors, started
                    for key in started:
                        assert "Successfully registered with driver" in kubelet.log(key), kubelet.log(key)[-3000:]
                    assert any("Running task" in kubelet.log(key) for key in started)
            assert _rows(small) == rows["small"] and _rows(large) == rows["large"]
            assert (len(small.snapshot().files), len(large.snapshot().files)) == (3, 8)
        used = api.calls(f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}", NAMESPACE)
        assert ("pods", "create") in used
        assert {call for call in used if not _granted(*call)} == set()
    finally:
        if operator is not None:
            operator.stop()
        etcd.stop()
        api.stop()
