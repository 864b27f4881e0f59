"""Settings from `ACIDTABLES_*` environment variables (design §7).

Pods and clusters configure acidtables only through the environment, so the operator, Spark jobs and the
CLI all read the same names. Nothing here is ever logged whole: it holds a password.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from acidtables.core.errors import ConfigurationError

ENDPOINTS = "ACIDTABLES_ETCD_ENDPOINTS"
WAREHOUSE = "ACIDTABLES_WAREHOUSE"
DEFAULT_PREFIX = "/acidtables/v1"
#: every variable `Settings.from_env` reads (the Spark data source takes each as an option too: drop the
#: ACIDTABLES_ prefix, lower-case, and write '.' for the first '_', e.g. etcd.endpoints, commit.max_attempts)
VARIABLES = (
    ENDPOINTS,
    WAREHOUSE,
    "ACIDTABLES_ETCD_PREFIX",
    "ACIDTABLES_ETCD_CA_FILE",
    "ACIDTABLES_ETCD_CERT_FILE",
    "ACIDTABLES_ETCD_KEY_FILE",
    "ACIDTABLES_ETCD_USER",
    "ACIDTABLES_ETCD_PASSWORD",
    "ACIDTABLES_ETCD_REQUEST_TIMEOUT_SECONDS",
    "ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS",
    "ACIDTABLES_ETCD_MAX_TXN_OPS",
    "ACIDTABLES_ETCD_MAX_REQUEST_BYTES",
    "ACIDTABLES_COMMIT_MAX_ATTEMPTS",
    "ACIDTABLES_CHECKPOINT_INTERVAL",
    "ACIDTABLES_CHECKPOINT_ACTIONS",
    "ACIDTABLES_COMMIT_REGISTER_AFTER_SECONDS",
    "ACIDTABLES_LOG_WINDOW_VERSIONS",
    "ACIDTABLES_RETENTION_MINIMUM_SECONDS",
    "ACIDTABLES_COMMIT_DURATION_EVENT_TTL_SECONDS",
)


def _float(env: Mapping[str, str], name: str, default: float, *, zero_allowed: bool = False) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a number of seconds") from None
    if zero_allowed and not value >= 0:
        raise ConfigurationError(f"{name}={raw!r} must be 0 or more seconds")
    if not zero_allowed and not value > 0:
        raise ConfigurationError(f"{name}={raw!r} must be positive")
    return value


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a whole number") from None
    if value < 1:
        raise ConfigurationError(f"{name}={raw!r} must be at least 1")
    return value


def _without_credentials(url: str) -> str:
    """`url` with what lies between its scheme and its last '@' (a user and password) replaced by `***`."""
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", url)
    return f"{scheme.group(0) if scheme else ''}***@{url.rsplit('@', 1)[1]}"


@dataclass(frozen=True)
class EtcdSettings:
    """How to reach etcd. `endpoints` are URLs: `http://host:2379`, or `https://` with TLS files."""

    endpoints: tuple[str, ...]
    prefix: str = DEFAULT_PREFIX
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    #: deadline of one etcd request
    request_timeout_seconds: float = 5.0
    #: how long to keep trying an unreachable etcd before raising CoordinatorUnavailable
    unavailable_timeout_seconds: float = 15.0
    #: etcd's --max-txn-ops and --max-request-bytes (its defaults; the chart sets them explicitly): they
    #: bound how many tables one multi-table commit may hold (docs/transactions.md#limits)
    max_txn_ops: int = 128
    max_request_bytes: int = 1536 * 1024

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ConfigurationError(f"no etcd endpoints; set {ENDPOINTS}=http://host:2379")
        for url in self.endpoints:
            if "@" in url:
                # http://user:password@host would be echoed by every error that names the endpoint
                raise ConfigurationError(
                    f"etcd endpoint {_without_credentials(url)!r} carries credentials; give them as "
                    f"ACIDTABLES_ETCD_USER and ACIDTABLES_ETCD_PASSWORD instead ({ENDPOINTS})"
                )
            if not (url.startswith("http://") or url.startswith("https://")) or ":" not in url.split("//", 1)[1]:
                raise ConfigurationError(
                    f"etcd endpoint {url!r} must look like http://host:2379 or https://host:2379 ({ENDPOINTS})"
                )
        if (self.user is None) != (self.password is None):
            raise ConfigurationError("etcd authentication needs both ACIDTABLES_ETCD_USER and ACIDTABLES_ETCD_PASSWORD")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigurationError(
                "an etcd client certificate needs both ACIDTABLES_ETCD_CERT_FILE and ACIDTABLES_ETCD_KEY_FILE"
            )
        if not self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise ConfigurationError(f"ACIDTABLES_ETCD_PREFIX={self.prefix!r} must start with / and not end with /")

    @property
    def secure(self) -> bool:
        return any(url.startswith("https://") for url in self.endpoints) or self.ca_file is not None


@dataclass(frozen=True)
class CommitSettings:
    """Bounds of the commit loop (conflict-rules D-30; style: the error names the setting that stopped it)."""

    #: attempts at the compare-and-swap before CommitRetriesExhausted (ACIDTABLES_COMMIT_MAX_ATTEMPTS)
    max_attempts: int = 50
    #: the pause's ceiling after a second lost compare-and-swap in a row (the first retry goes at once);
    #: doubles per further loss, with full jitter
    backoff_seconds: float = 0.002
    backoff_max_seconds: float = 0.25
    #: a checkpoint of the active file set is written every this many versions
    checkpoint_interval: int = 100
    #: and sooner once a process has committed this many file adds and removes to a table since it last
    #: asked for one: a reader then replays a bounded number of entries, not only of versions (issue 32)
    checkpoint_actions: int = 100_000
    #: commit records larger than this go to an immutable commit file, etcd keeps a pointer (etcd's
    #: request limit is 1.5 MiB)
    inline_record_max_bytes: int = 256 * 1024
    #: lease of the in-flight registrations; a process that dies loses them after this long
    lease_ttl_seconds: int = 30
    #: a transaction still running after this long registers in etcd (its operation, read version and
    #: partitions, for the operator and retention); one that commits sooner never does, so its only
    #: round trip is the compare-and-swap. 0: register at once (still off the commit path)
    register_after_seconds: float = 1.0
    #: conflicts and aborts recorded in etcd for the operator expire after this long
    event_ttl_seconds: int = 3600
    #: each commit's duration, recorded in etcd after its compare-and-swap landed (the log record cannot
    #: hold the round trip that wrote it) for the operator's commit-duration histogram, lives this long:
    #: long enough for a following operator, short so etcd holds only a few minutes of commits. 0: none
    #: are recorded (ACIDTABLES_COMMIT_DURATION_EVENT_TTL_SECONDS)
    duration_event_ttl_seconds: int = 120
    #: the newest log entries kept in etcd; older ones move to archive segments in the table location
    #: (design §2), after every `log_window_versions // 2` commits, off the commit path
    log_window_versions: int = 100
    #: expire and vacuum refuse a shorter retain_duration unless forced: a job running longer than the
    #: retention could lose the files it reads
    retention_minimum_seconds: float = 168 * 3600.0

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> CommitSettings:
        """The commit bounds set in the environment; every catalog, the embedded one too, reads them."""
        env = os.environ if env is None else env
        return CommitSettings(
            max_attempts=_int(env, "ACIDTABLES_COMMIT_MAX_ATTEMPTS", CommitSettings.max_attempts),
            checkpoint_interval=_int(env, "ACIDTABLES_CHECKPOINT_INTERVAL", CommitSettings.checkpoint_interval),
            checkpoint_actions=_int(env, "ACIDTABLES_CHECKPOINT_ACTIONS", CommitSettings.checkpoint_actions),
            log_window_versions=_int(env, "ACIDTABLES_LOG_WINDOW_VERSIONS", CommitSettings.log_window_versions),
            duration_event_ttl_seconds=int(
                _float(
                    env,
                    "ACIDTABLES_COMMIT_DURATION_EVENT_TTL_SECONDS",
                    CommitSettings.duration_event_ttl_seconds,
                    zero_allowed=True,
                )
            ),
            retention_minimum_seconds=_float(
                env,
                "ACIDTABLES_RETENTION_MINIMUM_SECONDS",
                CommitSettings.retention_minimum_seconds,
                zero_allowed=True,
            ),
            register_after_seconds=_float(
                env,
                "ACIDTABLES_COMMIT_REGISTER_AFTER_SECONDS",
                CommitSettings.register_after_seconds,
                zero_allowed=True,
            ),
        )


@dataclass(frozen=True)
class Settings:
    etcd: EtcdSettings
    warehouse: str
    commit: CommitSettings = field(default_factory=CommitSettings)

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        endpoints = tuple(e.strip() for e in env.get(ENDPOINTS, "").split(",") if e.strip())
        warehouse = env.get(WAREHOUSE, "").strip()
        missing = [name for name, value in ((ENDPOINTS, endpoints), (WAREHOUSE, warehouse)) if not value]
        if missing:
            raise ConfigurationError(
                f"Catalog.connect() needs {' and '.join(missing)}: set {ENDPOINTS} to your etcd endpoints "
                f"(e.g. http://etcd:2379) and {WAREHOUSE} to the table location root (e.g. s3a://bucket/warehouse "
                "or /data/warehouse). For local development use Catalog.local(), which runs an embedded etcd."
            )
        etcd = EtcdSettings(
            endpoints=endpoints,
            prefix=env.get("ACIDTABLES_ETCD_PREFIX", DEFAULT_PREFIX) or DEFAULT_PREFIX,
            ca_file=env.get("ACIDTABLES_ETCD_CA_FILE") or None,
            cert_file=env.get("ACIDTABLES_ETCD_CERT_FILE") or None,
            key_file=env.get("ACIDTABLES_ETCD_KEY_FILE") or None,
            user=env.get("ACIDTABLES_ETCD_USER") or None,
            password=env.get("ACIDTABLES_ETCD_PASSWORD") or None,
            request_timeout_seconds=_float(env, "ACIDTABLES_ETCD_REQUEST_TIMEOUT_SECONDS", 5.0),
            unavailable_timeout_seconds=_float(env, "ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS", 15.0),
            max_txn_ops=_int(env, "ACIDTABLES_ETCD_MAX_TXN_OPS", EtcdSettings.max_txn_ops),
            max_request_bytes=_int(env, "ACIDTABLES_ETCD_MAX_REQUEST_BYTES", EtcdSettings.max_request_bytes),
        )
        return Settings(etcd=etcd, warehouse=warehouse, commit=CommitSettings.from_env(env))
