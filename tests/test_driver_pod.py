"""The driver pod manifest the operator creates, and the Spark settings its job derives (pure)."""

from __future__ import annotations

from typing import Any

from acidtables.jobs.compact import build_parser, spark_conf
from acidtables.operator.config import OperatorConfig
from acidtables.operator.pods import driver_pod

JOB: dict[str, Any] = {
    "apiVersion": "acidtables.io/v1alpha1",
    "kind": "CompactionJob",
    "metadata": {"name": "big", "namespace": "sales", "uid": "uid-1"},
    "spec": {
        "table": "orders",
        "type": "major",
        "where": "dt = 'x'",
        "spark": {"executors": 3, "driverMemory": "2g", "executorMemory": "8g", "conf": {"spark.sql.x": "1"}},
    },
}


def test_the_driver_pod_is_owned_non_root_and_gets_credentials_by_reference_only() -> None:
    config = OperatorConfig(
        job_image="img:1", credentials_secret="etcd-auth", job_env={"ACIDTABLES_ETCD_ENDPOINTS": "http://etcd:2379"}
    )
    pod = driver_pod(JOB, 2, "sales.orders", config)
    assert pod["metadata"]["name"] == "big-driver-2"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["ACIDTABLES_ETCD_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "etcd-auth", "key": "password"}
    assert all(
        "value" not in e for name, e in env.items() if name in ("ACIDTABLES_ETCD_USER", "ACIDTABLES_ETCD_PASSWORD")
    )
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert container["resources"]["requests"]["memory"] == "2Gi"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["command"][:4] == ["python", "-m", "acidtables.jobs", "compact"]


def test_executors_run_on_kubernetes_in_client_mode_owned_by_the_driver_pod() -> None:
    config = OperatorConfig(job_image="img:1")
    command = driver_pod(JOB, 1, "sales.orders", config)["spec"]["containers"][0]["command"]
    args = build_parser().parse_args(command[4:])
    env = {"POD_IP": "10.1.2.3", "POD_NAME": "big-driver-1", "POD_NAMESPACE": "sales", "ACIDTABLES_JOB_IMAGE": "img:1"}
    conf = spark_conf(args, env)
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc:443"  # the port is required
    assert (conf["spark.submit.deployMode"], conf["spark.executor.instances"]) == ("client", "3")
    assert (conf["spark.driver.host"], conf["spark.kubernetes.driver.pod.name"]) == ("10.1.2.3", "big-driver-1")
    assert conf["spark.kubernetes.container.image"] == "img:1" and conf["spark.sql.x"] == "1"
    local = build_parser().parse_args(["--table", "a.b", "--type", "minor", "--job-id", "u"])
    assert spark_conf(local, env) == {}
