"""CompactionJobs on a real kube-apiserver: the operator creates the driver pod through the API, a test
kubelet runs it as a local process (real Spark, real etcd, real files), and the outcome reaches status."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import envtest
from tests.helpers.kubelet import Kubelet
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import catalog_name, eventually, get_job, job_resource, table_resource
from tests.helpers.servers import enable_auth, make_tls_files
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.operator.compactions import parse_time

pytestmark = pytest.mark.slow  # each job starts a Spark JVM in its driver process


def wait_until_succeeded(
    kube_api: envtest.KubeAPI,
    namespace: str,
    name: str,
    operator: OperatorProcess,
    kubelet: Kubelet,
    timeout_seconds: int = 180,
) -> dict[str, Any]:
    """`kubectl wait` for the job's Succeeded condition; its status. When it does not come, the failure
    shows every pod's log, the test kubelet's errors and the operator's log."""
    try:
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Succeeded", f"compactionjob/{name}", "-n", namespace,
            f"--timeout={timeout_seconds}s",
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        logs = "\n".join(f"--- {pod}:\n{kubelet.log(pod)[-3000:]}" for pod in kubelet.started)
        raise AssertionError(
            f"{name} did not succeed\n{logs}\nkubelet: {kubelet.errors}\noperator log:\n{operator.log()[-3000:]}"
        ) from None
    status: dict[str, Any] = get_job(kube_api, namespace, name)["status"]
    return status


def small_files(kube_api: envtest.KubeAPI, namespace: str, catalog: Catalog, count: int) -> Table:
    envtest.apply(kube_api, namespace, table_resource("events"))
    envtest.kubectl(kube_api, "wait", "--for=condition=Ready", "acidtable/events", "-n", namespace, "--timeout=60s")
    table = catalog.table(catalog_name(namespace, "events"))
    for _ in range(count):
        with table.begin("insert_into") as tx:
            tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=3)])
            tx.commit()
    return table


def test_a_compaction_job_rewrites_the_small_files_and_reports_exactly(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, tmp_path: Path
) -> None:
    table = small_files(kube_api, kube_namespace, catalog, 4)
    rows = table.snapshot().row_count
    with Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
        envtest.apply(kube_api, kube_namespace, job_resource("compact-1"))
        wait_until_succeeded(kube_api, kube_namespace, "compact-1", operator, kubelet)
    job = get_job(kube_api, kube_namespace, "compact-1")
    status = job["status"]
    assert (status["phase"], status["attempts"]) == ("Succeeded", 1)
    assert (status["result"]["filesRemoved"], status["result"]["filesAdded"]) == (4, 1)
    assert status["result"]["committedVersion"] == table.version == 5
    snapshot = table.snapshot()
    assert (len(snapshot.files), snapshot.row_count) == (1, rows)
    pod = kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods/compact-1-driver-1")
    assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert job["metadata"]["uid"] in pod["spec"]["containers"][0]["command"]
    assert table.history(limit=1)[0].operation.display == "MINOR COMPACT"


def test_a_compaction_job_that_loses_says_which_commit_won(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, tmp_path: Path
) -> None:
    table = small_files(kube_api, kube_namespace, catalog, 3)
    victim = table.snapshot().files[0]
    with Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
        envtest.apply(kube_api, kube_namespace, job_resource("compact-2"))
        # the job has pinned its snapshot (its transaction is registered): freeze its node there
        deadline = time.monotonic() + 120
        while not any(t.operation == "minor_compact" for t in table.in_flight()):
            assert time.monotonic() < deadline, kubelet.log("compact-2-driver-1")[-4000:]
            time.sleep(0.01)  # polling interval of the wait
        (driver,) = kubelet.running()  # the attempt that registered
        kubelet.pause(driver)
        assert table.version == 3  # frozen before its commit
        with table.begin("delete") as tx:  # a concurrent DELETE removes one of the files it compacts
            tx.remove_files([victim])
            winner = tx.commit()
        kubelet.resume(driver)
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Failed", "compactionjob/compact-2", "-n", kube_namespace,
            "--timeout=180s",
        )  # fmt: skip
    status = get_job(kube_api, kube_namespace, "compact-2")["status"]
    assert status["phase"] == "Conflicted" and status["attempts"] == int(driver.rsplit("-", 1)[1])  # not retried
    conflict = status["result"]["conflict"]
    assert (conflict["winningVersion"], conflict["winningOperation"]) == (winner.version, "DELETE")
    assert conflict["exception"] == "ConcurrentDeleteDeleteException"
    assert table.version == winner.version  # the job committed nothing


def test_a_driver_that_never_starts_fails_the_job_instead_of_staying_pending(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, tmp_path: Path
) -> None:
    small_files(kube_api, kube_namespace, catalog, 2)
    with Kubelet(kube_api, kube_namespace, tmp_path, hold=("stuck-*",)):
        envtest.apply(kube_api, kube_namespace, job_resource("stuck", backoffLimit=0))
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Failed", "compactionjob/stuck", "-n", kube_namespace, "--timeout=90s"
        )
    status = get_job(kube_api, kube_namespace, "stuck")["status"]
    assert status["phase"] == "Failed"
    assert "did not start within 15 s" in status["message"]
    events = kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/events")["items"]
    assert any(e["reason"] == "Failed" and e["involvedObject"]["name"] == "stuck" for e in events)


def test_a_driver_pod_deleted_while_running_fails_the_attempt(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, tmp_path: Path
) -> None:
    small_files(kube_api, kube_namespace, catalog, 2)
    with Kubelet(kube_api, kube_namespace, tmp_path):
        envtest.apply(kube_api, kube_namespace, job_resource("vanish", backoffLimit=0))
        eventually(
            lambda: get_job(kube_api, kube_namespace, "vanish").get("status", {}).get("phase") == "Running",
            "the job running",
            operator,
        )
        envtest.kubectl(kube_api, "delete", "pod", "vanish-driver-1", "-n", kube_namespace, "--wait=false")
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Failed", "compactionjob/vanish", "-n", kube_namespace, "--timeout=90s"
        )
    status = get_job(kube_api, kube_namespace, "vanish")["status"]
    assert status["phase"] == "Failed" and "deleted before it finished" in status["message"]
    assert "result" not in status  # no outcome was reported, so none is invented


def test_an_operator_killed_mid_job_and_restarted_neither_duplicates_nor_loses_anything(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator_env: dict[str, str], catalog: Catalog, tmp_path: Path
) -> None:
    first = OperatorProcess(tmp_path / "first.log", operator_env, [kube_namespace])
    table = small_files(kube_api, kube_namespace, catalog, 3)
    with Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
        envtest.apply(kube_api, kube_namespace, job_resource("survive"))
        eventually(
            lambda: get_job(kube_api, kube_namespace, "survive").get("status", {}).get("phase") == "Running",
            "the job running",
            first,
        )
        first.process.kill()  # SIGKILL mid-job: no clean-up of any kind
        first.process.wait()
        kubelet.processes["survive-driver-1"].wait(timeout=180)  # the job finishes with no operator watching
        second = OperatorProcess(tmp_path / "second.log", operator_env, [kube_namespace])
        try:
            wait_until_succeeded(kube_api, kube_namespace, "survive", second, kubelet, timeout_seconds=120)
        finally:
            assert second.stop() == 0, second.log()[-4000:]
    status = get_job(kube_api, kube_namespace, "survive")["status"]
    assert status["attempts"] == 1 and status["result"]["committedVersion"] == table.version
    pods = kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods")["items"]
    assert [p["metadata"]["name"] for p in pods] == ["survive-driver-1"]  # no second pod
    compactions = [h for h in table.history() if h.operation.display == "MINOR COMPACT"]
    assert len(compactions) == 1  # no double commit


def test_a_cluster_job_reorders_and_is_deleted_after_its_ttl(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, tmp_path: Path
) -> None:
    table = small_files(kube_api, kube_namespace, catalog, 2)
    rows = table.snapshot().row_count
    job = job_resource("sort", type="cluster", clusterBy=["id"], ttlSecondsAfterFinished=2)
    job["metadata"]["finalizers"] = ["example.com/audit"]  # another controller's: the operator leaves it
    with Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
        envtest.apply(kube_api, kube_namespace, job)
        status = wait_until_succeeded(kube_api, kube_namespace, "sort", operator, kubelet)
        assert status["result"]["committedVersion"] == table.version
        assert table.history(limit=1)[0].operation.display == "CLUSTER"
        assert table.snapshot().row_count == rows

        def released() -> bool:
            meta = get_job(kube_api, kube_namespace, "sort")["metadata"]
            return "deletionTimestamp" in meta and meta.get("finalizers") == ["example.com/audit"]

        try:
            # well within kopf's minute of waiting for a timer that is still running
            eventually(released, "deleted after its TTL, only the other finalizer left", operator, timeout_seconds=20)
        except AssertionError:
            raise AssertionError(json.dumps(get_job(kube_api, kube_namespace, "sort")["metadata"], indent=1)) from None
        path = f"/apis/acidtables.io/v1alpha1/namespaces/{kube_namespace}/compactionjobs/sort"
        kube_api.request("PATCH", path, {"metadata": {"finalizers": None}})
        assert "sort" not in envtest.kubectl(kube_api, "get", "cjob", "-n", kube_namespace, "-o", "name")


def test_a_job_for_a_table_that_never_appears_fails_after_the_table_wait_and_says_so(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator_env: dict[str, str], tmp_path: Path
) -> None:
    """A job waits for its table (issue 40, item 1); past ACIDTABLES_TABLE_WAIT_TIMEOUT_SECONDS (3 s here)
    with none, it fails with NoTable, and nothing was launched for it."""
    operator = OperatorProcess(
        tmp_path / "operator.log", {**operator_env, "ACIDTABLES_TABLE_WAIT_TIMEOUT_SECONDS": "3"}, [kube_namespace]
    )
    try:
        envtest.apply(kube_api, kube_namespace, job_resource("orphan", table="ghost"))
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Failed", "compactionjob/orphan", "-n", kube_namespace, "--timeout=60s"
        )
    finally:
        code = operator.stop()
    assert code == 0, operator.log()[-4000:]
    status = get_job(kube_api, kube_namespace, "orphan")["status"]
    assert status["phase"] == "Failed"
    assert f"no AcidTable ghost in namespace {kube_namespace}; gave up waiting for it after 3 s" in status["message"]
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Failed"] == ["NoTable"]
    pods = kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods")["items"]
    assert pods == []  # nothing was launched for it


def test_a_job_pod_reaches_etcd_over_tls_with_a_password_through_secrets_it_mounts(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator_env: dict[str, str], etcd_prefix: str, tmp_path: Path
) -> None:
    """etcd with TLS and authentication, as the chart's external etcd: the driver pod gets the CA as a
    mounted Secret and the password by reference, and commits through them."""
    tls = make_tls_files(tmp_path / "certs")
    with EmbeddedEtcd(tmp_path / "etcd", tls=tls) as server:
        enable_auth(server, "root", "s3cret", ca_file=tls.ca_file)
        secrets = {
            "etcd-tls": {"ca.crt": tls.ca_file.read_bytes()},
            "etcd-auth": {"user": b"root", "password": b"s3cret"},
        }
        for name, data in secrets.items():
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name},
                "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
            }
            kube_api.request("POST", f"/api/v1/namespaces/{kube_namespace}/secrets", secret)
        etcd = {"ca_file": str(tls.ca_file), "user": "root", "password": "s3cret"}
        env = {
            **operator_env,
            "ACIDTABLES_ETCD_ENDPOINTS": server.endpoint,
            "ACIDTABLES_ETCD_CA_FILE": etcd["ca_file"],
            "ACIDTABLES_ETCD_USER": "root",
            "ACIDTABLES_ETCD_PASSWORD": "s3cret",
            "ACIDTABLES_ETCD_TLS_SECRET": "etcd-tls",
            "ACIDTABLES_ETCD_CREDENTIALS_SECRET": "etcd-auth",
        }
        settings = Settings(
            etcd=EtcdSettings(
                (server.endpoint,), prefix=etcd_prefix, ca_file=etcd["ca_file"], user="root", password="s3cret"
            ),
            warehouse=env["ACIDTABLES_WAREHOUSE"],
        )
        operator = OperatorProcess(tmp_path / "operator.log", env, [kube_namespace])
        try:
            with Catalog(settings) as catalog, Kubelet(kube_api, kube_namespace, tmp_path) as kubelet:
                table = small_files(kube_api, kube_namespace, catalog, 3)
                envtest.apply(kube_api, kube_namespace, job_resource("secure"))
                status = wait_until_succeeded(kube_api, kube_namespace, "secure", operator, kubelet)
                pod = kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods/secure-driver-1")
                assert "s3cret" not in json.dumps(pod["spec"])  # by reference only
                assert status["result"]["committedVersion"] == 4
                assert table.history(limit=1)[0].operation.display == "MINOR COMPACT"
        finally:
            assert operator.stop() == 0, operator.log()[-4000:]


def test_a_failed_attempt_is_retried_after_its_backoff_and_the_retry_succeeds(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, tmp_path: Path
) -> None:
    table = small_files(kube_api, kube_namespace, catalog, 2)
    # attempt 1 is never scheduled: it fails at the driver start timeout (15 s here) and waits its backoff
    with Kubelet(kube_api, kube_namespace, tmp_path, hold=("again-driver-1",)) as kubelet:
        envtest.apply(kube_api, kube_namespace, job_resource("again", backoffLimit=1))
        waiting = eventually(
            lambda: get_job(kube_api, kube_namespace, "again").get("status", {}).get("retryAt"),
            "the failed attempt's retry time kept in status",
            operator,
        )
        status = wait_until_succeeded(kube_api, kube_namespace, "again", operator, kubelet, timeout_seconds=120)
    assert (status["phase"], status["attempts"]) == ("Succeeded", 2)
    assert "retryAt" not in status and status["result"]["committedVersion"] == table.version
    retried, started = parse_time(waiting), parse_time(status["startTime"])
    assert retried is not None and started is not None and retried > started
    events = kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/events")["items"]
    assert any(e["reason"] == "AttemptFailed" and e["involvedObject"]["name"] == "again" for e in events)
