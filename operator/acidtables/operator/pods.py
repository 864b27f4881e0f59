"""The Spark driver pod of one CompactionJob attempt, as a manifest (created through the Kubernetes API:
no spark-submit JVM in the operator). `executors: 0` runs Spark in local mode inside the pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .compactions import pod_name
from .config import ETCD_TLS_DIR, OperatorConfig
from .context import quantity_bytes
from .executors import attach_executor_template

JOB_LABEL = "acidtables.io/compaction-job"
ATTEMPT_LABEL = "acidtables.io/attempt"
#: the job image's user (the Spark image's `spark`): driver pods run as it, and so does the operator
#: when the warehouse is a shared volume (the chart), so each can write in the other's directories
JOB_USER = 185


#: Spark's memory overhead on Kubernetes (spark.driver.memoryOverheadFactor and its minimum): what
#: the JVM needs beyond its heap, which Spark adds to the executor pods' requests and the driver pod
#: must count too
OVERHEAD_FACTOR, MINIMUM_OVERHEAD_MIB = 0.10, 384
_MIB_PER_UNIT = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def spark_memory_mib(spark_memory: str) -> int:
    """Spark's `2g` in MiB: Spark's units are binary, and a bare number is MiB (the CRD checked the form)."""
    unit = spark_memory[-1:].lower()
    if not unit.isalpha():
        return int(spark_memory)
    return max(1, int(int(spark_memory[:-1]) * _MIB_PER_UNIT[unit]))


def driver_memory_request(spark_memory: str) -> str:
    """The driver pod's memory request: the driver's heap plus Spark's overhead, as Spark sizes pods."""
    heap = spark_memory_mib(spark_memory)
    return f"{heap + max(MINIMUM_OVERHEAD_MIB, int(heap * OVERHEAD_FACTOR))}Mi"


def driver_pod(job: Mapping[str, Any], attempt: int, table: str, config: OperatorConfig) -> dict[str, Any]:
    meta, spec = job["metadata"], job["spec"]
    spark = spec.get("spark") or {}
    command = [
        "python", "-m", "acidtables.jobs", "compact",
        "--table", table, "--type", spec["type"], "--job-id", meta["uid"],
    ]  # fmt: skip
    if spec.get("where"):
        command += ["--where", spec["where"]]
    if spec.get("clusterBy"):
        command += ["--cluster-by", ",".join(spec["clusterBy"])]
    if spec.get("targetFileBytes") is not None:
        command += ["--target-file-bytes", str(quantity_bytes(spec["targetFileBytes"], 128 << 20))]
    executors = int(spark.get("executors") or 0)
    conf = dict(spark.get("conf") or {})
    if executors:
        command += ["--executors", str(executors), "--executor-memory", spark.get("executorMemory", "4g")]
        # Spark requests a whole CPU per executor core unless told less: a kind node fits no second one
        conf.setdefault(
            "spark.kubernetes.executor.request.cores", spark.get("executorCoreRequest") or config.executor_core_request
        )
    for key, value in sorted(conf.items()):
        command += ["--conf", f"{key}={value}"]
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(config.job_env.items())]
    by_reference = []
    if config.credentials_secret:
        by_reference += [
            ("ACIDTABLES_ETCD_USER", config.credentials_secret, "user"),
            ("ACIDTABLES_ETCD_PASSWORD", config.credentials_secret, "password"),
        ]
    if config.s3_credentials_secret:
        by_reference += [
            (key, config.s3_credentials_secret, key) for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        ]
    for variable, secret, key in by_reference:
        env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    env.append({"name": "SPARK_DRIVER_MEMORY", "value": spark.get("driverMemory", "2g")})
    # Spark on Kubernetes in client mode: the driver names itself and its address from the downward
    # API, so executors are owned by this pod and reach it; they run the driver's own image
    for variable, path in (
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_IP", "status.podIP"),
    ):
        env.append({"name": variable, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    env.append({"name": "ACIDTABLES_JOB_IMAGE", "value": spark.get("image") or config.job_image})
    memory = spark.get("driverMemory", "2g")
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"], attempt),
            "namespace": meta["namespace"],
            "labels": {JOB_LABEL: meta["name"], ATTEMPT_LABEL: str(attempt), "app.kubernetes.io/name": "acidtables"},
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": JOB_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "driver",
                    "image": spark.get("image") or config.job_image,
                    "command": command,
                    "env": env,
                    "resources": {
                        "requests": {
                            "cpu": spark.get("driverCoreRequest") or config.driver_core_request,
                            "memory": driver_memory_request(memory),
                        }
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    if config.job_service_account:
        pod["spec"]["serviceAccountName"] = config.job_service_account
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if config.tls_secret:
        volumes.append({"name": "etcd-tls", "secret": {"secretName": config.tls_secret}})
        mounts.append({"name": "etcd-tls", "mountPath": ETCD_TLS_DIR, "readOnly": True})
    if config.warehouse_volume is not None and config.warehouse_path:
        # the tables' files live at the paths etcd records: the same volume at the same path as the operator
        volumes.append({"name": "warehouse", **config.warehouse_volume})
        mounts.append({"name": "warehouse", "mountPath": config.warehouse_path})
        pod["spec"]["securityContext"]["fsGroup"] = JOB_USER
    if volumes:
        pod["spec"]["volumes"] = volumes
        pod["spec"]["containers"][0]["volumeMounts"] = mounts
    if executors:
        attach_executor_template(pod)
    return pod
