"""The driver pod manifest the operator creates, and the Spark settings its job derives (pure)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acidtables.core import Catalog, InvalidArgumentError, ObjectStore
from acidtables.jobs.compact import (
    EXECUTOR_TEMPLATE_VARIABLE,
    api_server_url,
    build_parser,
    executor_name_prefix,
    spark_conf,
)
from acidtables.operator.config import ETCD_TLS_DIR, OperatorConfig
from acidtables.operator.executors import executor_template
from acidtables.operator.pods import driver_pod
from acidtables.spark.session import object_store_conf

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
    assert (
        container["resources"]["requests"]["memory"] == "2432Mi"
    )  # 2 GiB of heap and Spark's minimum overhead of 384 MiB
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["command"][:4] == ["python", "-m", "acidtables.jobs", "compact"]


def test_executors_run_on_kubernetes_in_client_mode_owned_by_the_driver_pod() -> None:
    config = OperatorConfig(job_image="img:1")
    command = driver_pod(JOB, 1, "sales.orders", config)["spec"]["containers"][0]["command"]
    args = build_parser().parse_args(command[4:])
    env = {
        "POD_IP": "10.1.2.3",
        "POD_NAME": "big-driver-1",
        "POD_NAMESPACE": "sales",
        "ACIDTABLES_JOB_IMAGE": "img:1",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "6443",
    }
    conf = spark_conf(args, env)
    assert conf["spark.master"] == "k8s://https://10.96.0.1:6443"  # the pod's own environment, not a DNS name
    assert (conf["spark.submit.deployMode"], conf["spark.executor.instances"]) == ("client", "3")
    assert (conf["spark.driver.host"], conf["spark.kubernetes.driver.pod.name"]) == ("10.1.2.3", "big-driver-1")
    assert conf["spark.kubernetes.container.image"] == "img:1" and conf["spark.sql.x"] == "1"
    local = build_parser().parse_args(["--table", "a.b", "--type", "minor", "--job-id", "u"])
    assert spark_conf(local, env) == {}


#: a Kubernetes host name (spec.hostname): one DNS label
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def spark_executor_hostname(pod_name: str) -> str:
    """What Spark 4's BasicExecutorFeatureStep makes an executor pod's host name of: the name's last 63
    characters, leading non-word characters dropped, every other run of [^\\w-] made '_'."""
    return re.sub(r"[^\w-]+", "_", re.sub(r"^[^\w]+", "", pod_name[-63:]))


@pytest.mark.parametrize(
    "pod_name",
    [
        "big-driver-1",
        "nightly-compaction-of-the-orders-tables-driver-1",  # its 40th character is a '-'
        "orders.v2.nightly-compaction-of-orderss.driver-1",  # and here a '.'
        "orders.v2-auto-17-minor-driver-1",  # a dot Spark would make '_' in the host name
        "x" * 39 + "-" + "y" * 30 + "-driver-12",
        "",  # no POD_NAME in the environment
    ],
)
def test_the_executors_name_prefix_is_one_spark_and_kubernetes_accept(spark: Any, pod_name: str) -> None:
    """Spark checks spark.kubernetes.executor.podNamePrefix when the driver starts, and Kubernetes the
    executors' host names Spark derives from it: a prefix cut from the driver pod's name used to end in
    '-' for some names (the driver failed at its start), and kept a dot that Spark turns into '_' in the
    host name (no executor pod could be created)."""
    prefix = executor_name_prefix(pod_name)
    jvm = spark.sparkContext._jvm
    entry = jvm.org.apache.spark.deploy.k8s.Config.KUBERNETES_EXECUTOR_POD_NAME_PREFIX()
    conf = jvm.org.apache.spark.SparkConf(False).set("spark.kubernetes.executor.podNamePrefix", prefix)
    assert conf.get(entry).get() == prefix  # Spark's own rule: it raises for a prefix it refuses
    hostname = spark_executor_hostname(f"{prefix}-exec-{2**31 - 1}")
    assert DNS_LABEL.match(hostname), hostname


def test_two_attempts_of_a_long_named_job_never_share_executor_names() -> None:
    """Cut at 40 characters, `<job>-driver-1` and `<job>-driver-2` made the same prefix, so the second
    attempt's executors could collide with the first's still terminating."""
    job = "nightly-compaction-of-the-orders-table-in-sales"
    first, second = executor_name_prefix(f"{job}-driver-1"), executor_name_prefix(f"{job}-driver-2")
    assert first != second and len(first) <= 40 and first.startswith("nightly-compaction-of-the")
    assert executor_name_prefix("big-driver-1") == "big-driver-1"  # a short name stays as it is


def test_etcd_tls_and_object_store_keys_reach_the_pod_by_reference() -> None:
    config = OperatorConfig.from_env(
        {
            "ACIDTABLES_ETCD_ENDPOINTS": "https://etcd:2379",
            "ACIDTABLES_ETCD_CA_FILE": "/somewhere/ca.crt",
            "ACIDTABLES_ETCD_CERT_FILE": "/somewhere/client.crt",
            "ACIDTABLES_ETCD_KEY_FILE": "/somewhere/client.key",
            "ACIDTABLES_ETCD_TLS_SECRET": "etcd-tls",
            "ACIDTABLES_S3_CREDENTIALS_SECRET": "lake-keys",
            "ACIDTABLES_S3_ENDPOINT": "http://minio:9000",
            "AWS_REGION": "eu-west-1",
            "AWS_SECRET_ACCESS_KEY": "never-copied",
        }
    )
    pod = driver_pod(JOB, 1, "sales.orders", config)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    # the Secret's standard keys, where the pod mounts it (not the operator's own paths)
    assert env["ACIDTABLES_ETCD_CA_FILE"] == f"{ETCD_TLS_DIR}/ca.crt"
    assert (env["ACIDTABLES_ETCD_CERT_FILE"], env["ACIDTABLES_ETCD_KEY_FILE"]) == (
        f"{ETCD_TLS_DIR}/tls.crt",
        f"{ETCD_TLS_DIR}/tls.key",
    )
    assert pod["spec"]["volumes"] == [{"name": "etcd-tls", "secret": {"secretName": "etcd-tls"}}]
    assert container["volumeMounts"][0]["mountPath"] == ETCD_TLS_DIR
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "lake-keys", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert (env["ACIDTABLES_S3_ENDPOINT"], env["AWS_REGION"]) == ("http://minio:9000", "eu-west-1")
    assert "never-copied" not in str(pod)
    without = driver_pod(JOB, 1, "sales.orders", OperatorConfig.from_env({"ACIDTABLES_ETCD_CA_FILE": "/x/ca.crt"}))
    assert "volumes" not in without["spec"]  # no Secret named: nothing mounted, no file path passed on
    assert "ACIDTABLES_ETCD_CA_FILE" not in str(without)


def test_a_bare_spark_memory_is_mebibytes_and_the_pods_request_adds_sparks_overhead() -> None:
    job = {**JOB, "spec": {**JOB["spec"], "spark": {"driverMemory": "1536"}}}
    container = driver_pod(job, 1, "sales.orders", OperatorConfig(job_image="img:1"))["spec"]["containers"][0]
    assert container["resources"]["requests"]["memory"] == f"{1536 + 384}Mi"  # the minimum overhead
    big = {**JOB, "spec": {**JOB["spec"], "spark": {"driverMemory": "8g"}}}
    container = driver_pod(big, 1, "sales.orders", OperatorConfig(job_image="img:1"))["spec"]["containers"][0]
    assert container["resources"]["requests"]["memory"] == f"{8192 + 819}Mi"  # 10 % above 3.84 GiB


def conf_of(pod: dict[str, Any]) -> dict[str, str]:
    command = pod["spec"]["containers"][0]["command"]
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--conf")


def test_driver_and_executors_request_a_share_of_a_cpu_that_the_operator_or_the_job_sets() -> None:
    """Spark asks a whole CPU per executor unless told: a 2-core node fits no second executor."""
    pod = driver_pod(JOB, 1, "sales.orders", OperatorConfig(job_image="img:1"))
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"
    assert conf_of(pod)["spark.kubernetes.executor.request.cores"] == "250m"
    config = OperatorConfig(job_image="img:1", driver_core_request="1", executor_core_request="500m")
    pod = driver_pod(JOB, 1, "sales.orders", config)
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    assert conf_of(pod)["spark.kubernetes.executor.request.cores"] == "500m"
    spark = {**JOB["spec"]["spark"], "driverCoreRequest": "2", "executorCoreRequest": "1500m"}
    job = {**JOB, "spec": {**JOB["spec"], "spark": spark}}
    pod = driver_pod(job, 1, "sales.orders", config)
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "2"
    assert conf_of(pod)["spark.kubernetes.executor.request.cores"] == "1500m"
    own = {**spark, "conf": {"spark.kubernetes.executor.request.cores": "3"}}  # Spark's own setting wins
    assert (
        conf_of(driver_pod({**JOB, "spec": {**JOB["spec"], "spark": own}}, 1, "s.o", config))[
            "spark.kubernetes.executor.request.cores"
        ]
        == "3"
    )
    local = {**JOB, "spec": {**JOB["spec"], "spark": {"executors": 0}}}
    assert "spark.kubernetes.executor.request.cores" not in conf_of(driver_pod(local, 1, "s.o", config))


@pytest.mark.parametrize("value", ["0", "lots", "-1", "250 m", "1.5.2"])
def test_a_bad_cpu_request_setting_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"ACIDTABLES_JOB_EXECUTOR_CORE_REQUEST .*{re.escape(value)!s}"):
        OperatorConfig.from_env({"ACIDTABLES_JOB_EXECUTOR_CORE_REQUEST": value})
    assert OperatorConfig.from_env({"ACIDTABLES_JOB_DRIVER_CORE_REQUEST": "0.5"}).driver_core_request == "0.5"


def test_executors_tell_the_kubelet_to_keep_their_last_log_lines_when_they_fail() -> None:
    pod = driver_pod(JOB, 1, "sales.orders", OperatorConfig(job_image="img:1"))
    template = executor_template(pod)
    assert template["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_driver_is_told_its_pod_address_and_no_bind_address() -> None:
    """With spark.driver.bindAddress set, Spark 4.3 gives executors that address (0.0.0.0) for the
    driver: they then dial themselves (issue 30). tests/test_image_executors.py shows it on a network."""
    args = build_parser().parse_args(["--table", "a.b", "--type", "minor", "--job-id", "u", "--executors", "2"])
    env = {"POD_IP": "10.1.2.3", "POD_NAME": "p", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    conf = spark_conf(args, env)
    assert conf["spark.driver.host"] == "10.1.2.3" and "spark.driver.bindAddress" not in conf


def test_spark_reaches_the_same_object_store_as_the_table_library() -> None:
    store = ObjectStore.from_env({"ACIDTABLES_S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"})
    conf = object_store_conf(store)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"  # s3:// locations too
    aws = object_store_conf(ObjectStore.from_env({}))
    assert "spark.hadoop.fs.s3a.endpoint" not in aws and aws["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"


def test_a_warehouse_volume_is_mounted_at_the_warehouse_path_in_the_driver_pod() -> None:
    volume = '{"persistentVolumeClaim": {"claimName": "lake"}}'
    config = OperatorConfig.from_env({"ACIDTABLES_WAREHOUSE": "/warehouse/", "ACIDTABLES_WAREHOUSE_VOLUME": volume})
    pod = driver_pod(JOB, 1, "sales.orders", config)
    assert pod["spec"]["volumes"] == [{"name": "warehouse", "persistentVolumeClaim": {"claimName": "lake"}}]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "warehouse", "mountPath": "/warehouse"}]
    # the operator and the job image's user write in each other's directories
    assert (pod["spec"]["securityContext"]["runAsUser"], pod["spec"]["securityContext"]["fsGroup"]) == (185, 185)


@pytest.mark.parametrize(
    ("env", "found"),
    [
        ({"ACIDTABLES_WAREHOUSE": "/w", "ACIDTABLES_WAREHOUSE_VOLUME": "{pvc"}, "as JSON"),
        ({"ACIDTABLES_WAREHOUSE": "/w", "ACIDTABLES_WAREHOUSE_VOLUME": '{"hostPath": {}, "nfs": {}}'}, "one volume"),
        ({"ACIDTABLES_WAREHOUSE": "s3a://lake/w", "ACIDTABLES_WAREHOUSE_VOLUME": '{"hostPath": {}}'}, "absolute"),
    ],
    ids=["not-json", "two-sources", "not-a-path"],
)
def test_a_bad_warehouse_volume_setting_is_refused_with_the_reason(env: dict[str, str], found: str) -> None:
    with pytest.raises(InvalidArgumentError, match="ACIDTABLES_WAREHOUSE") as refused:
        OperatorConfig.from_env(env)
    assert found in str(refused.value)


def test_the_api_server_comes_from_the_pods_environment_or_the_job_says_what_is_missing() -> None:
    assert api_server_url({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}) == (
        "k8s://https://[fd00::1]:443"
    )
    with pytest.raises(InvalidArgumentError, match="KUBERNETES_SERVICE_HOST is not set"):
        api_server_url({})


def test_executors_get_the_drivers_volumes_environment_secrets_and_user(tmp_path: Path) -> None:
    """The executor pod template is derived from the driver pod: the warehouse volume at the same path,
    the etcd TLS secret, the settings and secrets' environment, uid 185 with fsGroup, the account; the
    job writes it where Spark reads it."""
    config = OperatorConfig(
        job_image="img:1",
        credentials_secret="etcd-auth",
        tls_secret="etcd-tls",
        job_service_account="acidtables-spark",
        job_env={"ACIDTABLES_ETCD_ENDPOINTS": "https://etcd:2379", "ACIDTABLES_WAREHOUSE": "/lake"},
        warehouse_volume={"persistentVolumeClaim": {"claimName": "lake"}},
        warehouse_path="/lake",
    )
    pod = driver_pod(JOB, 1, "sales.orders", config)
    driver = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in driver["env"]}
    template = json.loads(env[EXECUTOR_TEMPLATE_VARIABLE]["value"])
    assert template == executor_template(pod)
    spec = template["spec"]
    executor = spec["containers"][0]
    assert executor["name"] == "executor"
    assert {v["name"]: v for v in spec["volumes"]}["warehouse"]["persistentVolumeClaim"] == {"claimName": "lake"}
    assert {m["name"]: m["mountPath"] for m in executor["volumeMounts"]} == {
        "etcd-tls": ETCD_TLS_DIR,
        "warehouse": "/lake",
    }
    executor_env = {e["name"]: e for e in executor["env"]}
    assert executor_env["ACIDTABLES_WAREHOUSE"]["value"] == "/lake"
    assert executor_env["ACIDTABLES_ETCD_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "etcd-auth",
        "key": "password",
    }
    assert "SPARK_DRIVER_MEMORY" not in executor_env and EXECUTOR_TEMPLATE_VARIABLE not in executor_env
    assert spec["securityContext"]["runAsUser"] == 185 and spec["securityContext"]["fsGroup"] == 185
    assert spec["serviceAccountName"] == "acidtables-spark"
    assert executor["securityContext"]["capabilities"]["drop"] == ["ALL"]

    args = build_parser().parse_args(driver["command"][4:])
    env_values = {k: e.get("value", "") for k, e in env.items()} | {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    conf = spark_conf(args, env_values, template_dir=str(tmp_path))
    written = Path(conf["spark.kubernetes.executor.podTemplateFile"])
    assert written.parent == tmp_path and json.loads(written.read_text()) == template
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == "executor"


def test_a_local_mode_driver_gets_no_executor_template() -> None:
    local = {**JOB, "spec": {**JOB["spec"], "spark": {"executors": 0}}}
    env = {
        e["name"]
        for e in driver_pod(local, 1, "sales.orders", OperatorConfig(job_image="i"))["spec"]["containers"][0]["env"]
    }
    assert EXECUTOR_TEMPLATE_VARIABLE not in env


def test_the_driver_uses_its_pods_account_or_where_it_has_none_the_kubeconfig(tmp_path: Path) -> None:
    """In a pod, Spark's client is given the ServiceAccount's token and CA; outside one (a driver run
    as a process), nothing is set, so Spark's client reads KUBECONFIG as every Kubernetes client does."""
    args = build_parser().parse_args(["--table", "a.b", "--type", "minor", "--job-id", "u", "--executors", "1"])
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    (tmp_path / "token").write_text("t")
    conf = spark_conf(args, env, account_dir=str(tmp_path))
    assert conf["spark.kubernetes.authenticate.oauthTokenFile"] == f"{tmp_path}/token"
    assert conf["spark.kubernetes.authenticate.caCertFile"] == f"{tmp_path}/ca.crt"
    away = spark_conf(args, env, account_dir=str(tmp_path / "none"))
    assert not [key for key in away if key.startswith("spark.kubernetes.authenticate")]


# --- a job's Spark log level (issue 40, item 8) ----------------------------------------------------


def test_a_jobs_spark_log_level_is_passed_to_its_driver_and_made_its_jvms_configuration(tmp_path: Path) -> None:
    job = {**JOB, "spec": {**JOB["spec"], "spark": {"executors": 0, "conf": {"spark.log.level": "info"}}}}
    command = driver_pod(job, 1, "sales.orders", OperatorConfig(job_image="img:1"))["spec"]["containers"][0]["command"]
    assert command[command.index("spark.log.level=info") - 1] == "--conf"
    conf = spark_conf(build_parser().parse_args(command[4:]), {}, template_dir=str(tmp_path))
    written = tmp_path / "acidtables-log4j2.properties"
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j.configurationFile=file:{written}"
    assert (
        "rootLogger.level = INFO" in written.read_text()
        and "appender.stderr.fileName = /dev/stderr" in written.read_text()
    )
    assert conf["spark.log.level"] == "info"  # Spark's own setting stays: it sets the level again at start
    own = ["--conf", "spark.log.level=DEBUG", "--conf", "spark.driver.extraJavaOptions=-Dx=1"]
    mine = spark_conf(build_parser().parse_args([*command[4:], *own]), {}, template_dir=str(tmp_path))
    assert mine["spark.driver.extraJavaOptions"] == f"-Dx=1 -Dlog4j.configurationFile=file:{written}"


def test_a_log_level_spark_does_not_know_is_refused_naming_it() -> None:
    args = build_parser().parse_args(
        ["--table", "a.b", "--type", "minor", "--job-id", "u", "--conf", "spark.log.level=LOUD"]
    )
    with pytest.raises(InvalidArgumentError, match=r"spark.log.level='LOUD': the level must be one of ALL, TRACE"):
        spark_conf(args, {})


DRIVER = """
import sys
from acidtables.jobs.compact import build_parser, spark_conf
from acidtables.spark import local_session, stop_session
args = build_parser().parse_args(["--table", "a.b", "--type", "minor", "--job-id", "u", *sys.argv[2:]])
session = local_session("log-level", memory="512m", conf=spark_conf(args, {}, template_dir=sys.argv[1]))
session.range(10).count()
stop_session(session)
"""


@pytest.mark.slow  # a JVM of its own: the level is set as the driver's JVM starts
def test_spark_log_level_info_in_a_jobs_conf_reaches_the_drivers_log(tmp_path: Path) -> None:
    """The job's driver, as `acidtables.jobs compact` starts its session: with spark.log.level=INFO its
    JVM logs Spark's INFO lines (the scheduler's "Starting task"); before, Spark said it set INFO and
    logged nothing below WARN."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path), "--conf", "spark.log.level=INFO"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r" INFO TaskSetManager: Starting task 0\.0 in stage 0\.0", done.stderr), done.stderr[-3000:]


def test_a_job_whose_spark_will_not_stop_still_writes_its_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JVM that died makes SparkSession.stop() raise: the outcome (with the real error) must still reach
    the termination log, or the operator can only say the driver ended without one."""
    from acidtables.jobs import compact

    def broken_jvm(*_: Any, **__: Any) -> None:
        raise ConnectionRefusedError("py4j: the JVM is gone")

    monkeypatch.setattr(compact, "_session", lambda args: object())
    monkeypatch.setattr(compact, "stop_session", broken_jvm)

    def lost_executors() -> None:
        raise RuntimeError("lost executors")

    monkeypatch.setattr(Catalog, "connect", staticmethod(lost_executors))
    log = tmp_path / "termination-log"
    code = compact.main(["--table", "sales.orders", "--type", "minor", "--job-id", "j", "--termination-log", str(log)])
    outcome = json.loads(log.read_text())
    assert code != 0 and outcome["phase"] == "Failed" and "RuntimeError: lost executors" in outcome["message"]
