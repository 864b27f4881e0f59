"""The operator's own settings, from the environment (design §7), and what it hands to job pods.

Job pods get the etcd endpoints, prefix and warehouse as plain values; credentials only by reference
(`valueFrom.secretKeyRef` of the Secret named by ACIDTABLES_ETCD_CREDENTIALS_SECRET), never copied into
a pod spec in clear.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version

#: settings a job pod needs from the operator's environment, passed on as plain values
PASSED_TO_JOBS = (
    "ACIDTABLES_ETCD_ENDPOINTS",
    "ACIDTABLES_ETCD_PREFIX",
    "ACIDTABLES_WAREHOUSE",
    "ACIDTABLES_ETCD_REQUEST_TIMEOUT_SECONDS",
    "ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS",
    "ACIDTABLES_S3_ENDPOINT",
)


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
    driver_start_timeout: timedelta = timedelta(minutes=5)
    job_env: Mapping[str, str] = field(default_factory=dict)
    #: how often automatic compaction looks at each table
    autocompact_interval_seconds: float = 30.0
    #: the first wait after an automatic compaction lost a conflict; doubles per conflict in a row
    autocompact_backoff: timedelta = timedelta(minutes=1)

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if env is None else env
        timeout = float(env.get("ACIDTABLES_DRIVER_START_TIMEOUT_SECONDS") or 300)
        return OperatorConfig(
            job_image=env.get("ACIDTABLES_JOB_IMAGE") or f"ghcr.io/acidtables/spark:{_package_version()}",
            job_service_account=env.get("ACIDTABLES_JOB_SERVICE_ACCOUNT") or None,
            credentials_secret=env.get("ACIDTABLES_ETCD_CREDENTIALS_SECRET") or None,
            driver_start_timeout=timedelta(seconds=timeout),
            job_env={name: env[name] for name in PASSED_TO_JOBS if env.get(name)},
            autocompact_interval_seconds=float(env.get("ACIDTABLES_AUTOCOMPACT_INTERVAL_SECONDS") or 30),
            autocompact_backoff=timedelta(seconds=float(env.get("ACIDTABLES_AUTOCOMPACT_BACKOFF_SECONDS") or 60)),
        )
