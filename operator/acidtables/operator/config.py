"""The operator's own settings, from the environment (design §7), and what it hands to job pods.

Job pods get the etcd endpoints, prefix and warehouse as plain values; secrets only by reference,
never copied into a pod spec in clear: etcd's user and password from the Secret named by
ACIDTABLES_ETCD_CREDENTIALS_SECRET (keys `user`, `password`), etcd's CA and client certificate from the
Secret named by ACIDTABLES_ETCD_TLS_SECRET mounted at ETCD_TLS_DIR (keys `ca.crt`, and `tls.crt` /
`tls.key` when the operator itself uses a client certificate), the object store's keys from the Secret
named by ACIDTABLES_S3_CREDENTIALS_SECRET (keys `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).

A warehouse on a shared file system instead of an object store: ACIDTABLES_WAREHOUSE_VOLUME holds a
Kubernetes volume source as JSON (`{"persistentVolumeClaim": {"claimName": "lake"}}`, a hostPath, an NFS
export), which job pods mount at the ACIDTABLES_WAREHOUSE path, so every pod sees a table's files at the
location recorded in etcd (the chart mounts the same volume at the same path in the operator).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from acidtables.core import InvalidArgumentError

#: settings a job pod needs from the operator's environment, passed on as plain values
PASSED_TO_JOBS = (
    "ACIDTABLES_ETCD_ENDPOINTS",
    "ACIDTABLES_ETCD_PREFIX",
    "ACIDTABLES_WAREHOUSE",
    "ACIDTABLES_ETCD_REQUEST_TIMEOUT_SECONDS",
    "ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS",
    "ACIDTABLES_ETCD_MAX_TXN_OPS",
    "ACIDTABLES_ETCD_MAX_REQUEST_BYTES",
    "ACIDTABLES_S3_ENDPOINT",
    "AWS_REGION",
)

#: where job pods mount the etcd TLS Secret (the chart mounts it at the same place in the operator)
ETCD_TLS_DIR = "/etc/acidtables/etcd-tls"

WAREHOUSE_VOLUME_VARIABLE = "ACIDTABLES_WAREHOUSE_VOLUME"


def _package_version() -> str:
    try:
        return version("acidtables")
    except PackageNotFoundError:  # running from a source tree
        return "0.0.0"


@dataclass(frozen=True)
class OperatorConfig:
    job_image: str
    job_service_account: str | None = None
    credentials_secret: str | None = None
    #: a Secret with etcd's ca.crt (and tls.crt/tls.key), mounted into job pods at ETCD_TLS_DIR
    tls_secret: str | None = None
    #: a Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, given to job pods by reference
    s3_credentials_secret: str | None = None
    driver_start_timeout: timedelta = timedelta(minutes=5)
    #: a CompactionJob whose AcidTable is not Ready waits this long for it before it fails with NoTable
    table_wait_timeout: timedelta = timedelta(minutes=5)
    #: a running driver's executors not started by then: the job fails (none started) or goes on without them
    executor_start_timeout: timedelta = timedelta(minutes=5)
    job_env: Mapping[str, str] = field(default_factory=dict)
    #: how often automatic compaction looks at each table
    autocompact_interval_seconds: float = 30.0
    #: the first wait after an automatic compaction lost a conflict; doubles per conflict in a row
    autocompact_backoff: timedelta = timedelta(minutes=1)
    #: an automatic CompactionJob's ttlSecondsAfterFinished: a table compacted every few minutes for days
    #: (a stream's) would otherwise gather thousands of finished jobs and their driver pods
    autocompact_job_ttl_seconds: int = 3600
    #: how often the maintenance timer looks at each table (operator.maintenance decides what is due)
    maintenance_check_seconds: float = 60.0
    #: expire and vacuum of a table with spec.retention run this often (jittered per table)
    maintenance_interval_seconds: float = 3600.0
    #: a table without commits for this long (and nothing in flight) keeps one log entry in etcd
    archive_quiet_seconds: float = 600.0
    #: how often the mirror timer catches each mirrored table's Delta log up (spec.mirror)
    mirror_check_seconds: float = 30.0
    #: a table whose mirror has been behind for longer than this is Degraded (MirrorBehind)
    mirror_lag_threshold_seconds: float = 300.0
    #: a volume source (Kubernetes' shape) job pods mount at `warehouse_path`; None: an object store
    warehouse_volume: Mapping[str, Any] | None = None
    #: the warehouse's path in every pod, when it is a mounted volume
    warehouse_path: str | None = None
    #: create `job_service_account` (with Spark's Role and RoleBinding) in a job's namespace when it is
    #: not there (ACIDTABLES_JOB_ACCOUNTS_CREATE; the chart sets it when it watches all namespaces)
    create_job_accounts: bool = False
    #: CPU requests of a job's driver pod and of each executor pod, unless the job names its own: small
    #: enough that a driver and two executors fit a kind node beside the control plane (requests only
    #: reserve; with no limit a pod uses whatever CPU is free)
    driver_core_request: str = "250m"
    executor_core_request: str = "250m"

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if env is None else env
        timeout = float(env.get("ACIDTABLES_DRIVER_START_TIMEOUT_SECONDS") or 300)
        tls_secret = env.get("ACIDTABLES_ETCD_TLS_SECRET") or None
        job_env = {name: env[name] for name in PASSED_TO_JOBS if env.get(name)}
        if tls_secret:
            job_env["ACIDTABLES_ETCD_CA_FILE"] = f"{ETCD_TLS_DIR}/ca.crt"
            if env.get("ACIDTABLES_ETCD_CERT_FILE"):
                job_env["ACIDTABLES_ETCD_CERT_FILE"] = f"{ETCD_TLS_DIR}/tls.crt"
                job_env["ACIDTABLES_ETCD_KEY_FILE"] = f"{ETCD_TLS_DIR}/tls.key"
        volume, path = _warehouse_volume(env)
        return OperatorConfig(
            job_image=env.get("ACIDTABLES_JOB_IMAGE") or f"ghcr.io/acidtables/acidtables:{_package_version()}",
            job_service_account=env.get("ACIDTABLES_JOB_SERVICE_ACCOUNT") or None,
            credentials_secret=env.get("ACIDTABLES_ETCD_CREDENTIALS_SECRET") or None,
            tls_secret=tls_secret,
            s3_credentials_secret=env.get("ACIDTABLES_S3_CREDENTIALS_SECRET") or None,
            driver_start_timeout=timedelta(seconds=timeout),
            table_wait_timeout=timedelta(seconds=float(env.get("ACIDTABLES_TABLE_WAIT_TIMEOUT_SECONDS") or 300)),
            executor_start_timeout=timedelta(
                seconds=float(env.get("ACIDTABLES_EXECUTOR_START_TIMEOUT_SECONDS") or 300)
            ),
            job_env=job_env,
            autocompact_interval_seconds=float(env.get("ACIDTABLES_AUTOCOMPACT_INTERVAL_SECONDS") or 30),
            autocompact_backoff=timedelta(seconds=float(env.get("ACIDTABLES_AUTOCOMPACT_BACKOFF_SECONDS") or 60)),
            autocompact_job_ttl_seconds=int(env.get("ACIDTABLES_AUTOCOMPACT_JOB_TTL_SECONDS") or 3600),
            maintenance_check_seconds=float(env.get("ACIDTABLES_MAINTENANCE_CHECK_SECONDS") or 60),
            maintenance_interval_seconds=float(env.get("ACIDTABLES_MAINTENANCE_INTERVAL_SECONDS") or 3600),
            archive_quiet_seconds=float(env.get("ACIDTABLES_ARCHIVE_QUIET_SECONDS") or 600),
            mirror_check_seconds=float(env.get("ACIDTABLES_MIRROR_CHECK_SECONDS") or 30),
            mirror_lag_threshold_seconds=float(env.get("ACIDTABLES_MIRROR_LAG_THRESHOLD_SECONDS") or 300),
            warehouse_volume=volume,
            warehouse_path=path,
            create_job_accounts=(env.get("ACIDTABLES_JOB_ACCOUNTS_CREATE") or "").lower() in ("1", "true", "yes"),
            driver_core_request=_cpu(env, "ACIDTABLES_JOB_DRIVER_CORE_REQUEST"),
            executor_core_request=_cpu(env, "ACIDTABLES_JOB_EXECUTOR_CORE_REQUEST"),
        )


_CPU = re.compile(r"^([0-9]+m|[0-9]+(\.[0-9]+)?)$")


def _cpu(env: Mapping[str, str], name: str) -> str:
    """A CPU quantity from the environment (250m, 1, 0.5), checked where it is received."""
    value = (env.get(name) or "").strip() or "250m"
    if not _CPU.match(value) or value in ("0", "0m"):
        raise InvalidArgumentError(f"{name} must be a CPU quantity above zero such as 250m or 1, found {value!r}")
    return value


def _warehouse_volume(env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """ACIDTABLES_WAREHOUSE_VOLUME read and checked where it is received: one volume source, and an
    absolute ACIDTABLES_WAREHOUSE to mount it at."""
    raw = env.get(WAREHOUSE_VOLUME_VARIABLE, "").strip()
    if not raw:
        return None, None
    try:
        volume = json.loads(raw)
    except ValueError as exc:
        raise InvalidArgumentError(f"{WAREHOUSE_VOLUME_VARIABLE} must be a volume source as JSON: {exc}") from None
    if not isinstance(volume, dict) or len(volume) != 1:
        raise InvalidArgumentError(
            f"{WAREHOUSE_VOLUME_VARIABLE} must be one volume source such as "
            f'{{"persistentVolumeClaim": {{"claimName": "lake"}}}}, found {raw[:200]!r}'
        )
    path = env.get("ACIDTABLES_WAREHOUSE", "")
    if not path.startswith("/"):
        raise InvalidArgumentError(
            f"{WAREHOUSE_VOLUME_VARIABLE} is set, so ACIDTABLES_WAREHOUSE must be the absolute path to mount it at, "
            f"found {path!r}"
        )
    return volume, path.rstrip("/") or "/"
