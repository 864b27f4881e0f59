"""The only module that builds etcd keys and talks to etcd (design §2).

Key space, under one prefix (default `/acidtables/v1`):

    catalog/<namespace>/<name>          -> table id, location, created_at (immutable facts)
    tables/<id>/head                    -> newest version; the key every commit compares
    tables/<id>/log/<version:020d>      -> commit record, or a pointer to an immutable commit file
    tables/<id>/txns/<txn_id>           -> version that committed the transaction (lost-answer lookup)
    tables/<id>/times/<time_us:020d>    -> version of a data commit (time travel by timestamp)
    tables/<id>/checkpoints/<v:020d>    -> checkpoint file of the active files at version v
    tables/<id>/inflight/<txn_id>       -> a running transaction, under the process's lease
    tables/<id>/archived                -> how far the log has moved to archive segments (core.log.tablelog)
    tables/<id>/retention               -> the oldest version time travel may still read (core.maintenance.retention)
    events/<id>/<time_us:020d>-<txn>    -> a conflict, abort or retry, under a short lease (operator metrics)

Every request has a deadline. A connection failure is retried until `unavailable_timeout_seconds` runs
out and then raises CoordinatorUnavailable; the commit transaction itself is never blindly re-sent,
because its answer may have been lost after it applied (the committer looks the txn id up instead).
"""

from __future__ import annotations

import json
import logging
import random
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

import grpc
import pyetcd
from pyetcd import exceptions as etcd_exceptions
from pyetcd import transactions as ops
from pyetcd import utils as etcd_utils
from pyetcd.client import KVMetadata
from pyetcd.events import DeleteEvent

from acidtables.core.coordination import etcd_txn
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer
from acidtables.core.errors import (
    AcidTablesError,
    ConfigurationError,
    CoordinatorFull,
    CoordinatorPermissionDenied,
    CoordinatorRefused,
    CoordinatorUnavailable,
    CorruptMetadataError,
)
from acidtables.core.settings import EtcdSettings

logger = logging.getLogger(__name__)

#: keys per page of a range read: an answer of ordinary log entries stays far below gRPC's 4 MiB limit
#: on one message; a page of unusually large entries is halved until it fits
RANGE_PAGE_KEYS = 1000
#: log entries a commit transaction's failure branch (or a rebase read) brings back at most: 12 of the
#: largest inline records (256 KiB) still fit one gRPC answer. A writer further behind than that reads
#: the rest in pages, one more round trip; one that lost a race to a few commits never does.
LOG_ENTRIES_IN_A_TXN = 12
#: txn-index keys deleted in one etcd transaction (etcd allows 128 operations in one)
TXN_KEYS_IN_A_TXN = 100
#: seconds a client skips an etcd member after a request to it failed, when it knows others
MEMBER_RETRY_SECONDS = 2.0
#: how long a head this process saw stays a transaction's starting point without asking etcd again
KNOWN_HEAD_SECONDS = 10.0

T = TypeVar("T")

_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    etcd_exceptions.ConnectionFailedError,
    etcd_exceptions.ConnectionTimeoutError,
    etcd_exceptions.NoServerAvailableError,
    etcd_exceptions.InternalServerError,
)


def _closed_channel(exc: BaseException) -> bool:
    """grpc's "Cannot invoke RPC on closed channel!" (a ValueError): a client let go of while this call
    was picking it up; the next attempt takes the new one."""
    text = str(exc).lower()
    return isinstance(exc, ValueError) and ("closed channel" in text or "channel closed" in text)


#: gRPC answers that say nothing about the request itself: try again (CANCELLED: the call's channel
#: was closed under it)
_RETRYABLE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


class CommitAnswerLost(AcidTablesError):
    """The commit transaction was sent and no answer came back; it may have applied."""


class WatchCompacted(AcidTablesError):
    """etcd compacted away the revision a watch was to start from: read the state again."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"etcd compacted its history up to revision {compact_revision}")
        self.compact_revision = compact_revision


class WatchLost(AcidTablesError):
    """A watch ended for another reason (the connection dropped): start it again where it was."""


class RawKey(NamedTuple):
    """One key as a watch sees it: its path under the prefix, its value (None: deleted), its revision."""

    key: str
    value: bytes | None
    revision: int


def _pad(number: int) -> str:
    return f"{number:020d}"


def _object(value: bytes, key: str) -> dict[str, Any]:
    """A JSON object read back from etcd; anything else is damage, named by its key."""
    try:
        data = json.loads(value)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        raise CorruptMetadataError(f"etcd key {key} does not hold readable JSON ({exc})", key=key) from None
    if not isinstance(data, dict):
        raise CorruptMetadataError(f"etcd key {key} holds a JSON {type(data).__name__}, not an object", key=key)
    return data


def _versioned(value: bytes, key: str) -> dict[str, Any]:
    """A head or log entry: a JSON object with an integer `version`."""
    data = _object(value, key)
    if isinstance(data.get("version"), bool) or not isinstance(data.get("version"), int):
        raise CorruptMetadataError(f"etcd key {key} has no integer version: {str(data)[:200]}", key=key)
    return data


def _integer(value: bytes, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise CorruptMetadataError(
            f"etcd key {key} should hold a version number, found {value[:80]!r}", key=key
        ) from None


def _versioned_field(data: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    """A JSON object whose `name` must be a non-negative integer."""
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptMetadataError(f"etcd key {key} has no integer {name}: {str(data)[:200]}", key=key)
    return data


def _catalog_entry(value: bytes, key: str) -> dict[str, Any]:
    data = _object(value, key)
    missing = [field for field in ("table_id", "name", "location") if not isinstance(data.get(field), str)]
    if missing:
        raise CorruptMetadataError(f"catalog entry {key} lacks {', '.join(missing)}: {str(data)[:200]}", key=key)
    return data


def _time_entry(value: bytes, meta: Any) -> tuple[int, int]:
    """A time-index key and value: (time version, ID version)."""
    key = meta.key.decode(errors="replace")
    return _integer(key.rsplit("/", 1)[1].encode(), key), _integer(value, key)


def _checkpoint_entry(value: bytes, meta: Any) -> tuple[int, str]:
    """A checkpoint key and value: (version, path of the checkpoint file)."""
    key = meta.key.decode(errors="replace")
    return _integer(key.rsplit("/", 1)[1].encode(), key), value.decode()


def _log_entry(value: bytes, key: str) -> dict[str, Any]:
    """A log entry, which names the version its key names: a damaged digit would otherwise move it."""
    data = _versioned(value, key)
    if key.rsplit("/", 1)[-1] != _pad(data["version"]):
        raise CorruptMetadataError(f"etcd key {key} holds a log entry of version {data['version']}", key=key)
    return data


def _log_entries(kvs: Any) -> list[dict[str, Any]]:
    return sorted(
        (_log_entry(v, m.key.decode(errors="replace")) for v, m in kvs), key=lambda entry: int(entry["version"])
    )


#: what etcd answers every write with once its database reached its quota (the NOSPACE alarm)
_NO_SPACE = "database space exceeded"


def _no_space(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and _NO_SPACE in (exc.details() or "")


_TLS_WORDS = ("ssl", "tls", "handshake", "certificate", "wrong version number")


def _permission_denied(exc: BaseException) -> bool:
    """etcd's refusal of a request the user's roles do not cover: PERMISSION_DENIED ("etcdserver:
    permission denied") on keys, UNKNOWN "auth: permission denied" on maintenance calls such as defragment.
    Checked before anything is applied, so it is a definite answer, never a lost one."""
    if not isinstance(exc, grpc.RpcError):
        return False
    return exc.code() is grpc.StatusCode.PERMISSION_DENIED or "permission denied" in (exc.details() or "")


def _client_certificate_refused(text: str) -> bool:
    """A TLS alert from etcd about our certificate (none sent, or one it does not trust): the server
    demands client certificates (--client-cert-auth). Not CERTIFICATE_VERIFY_FAILED, which is us
    refusing etcd's certificate."""
    upper = text.upper()
    return "ALERT" in upper and ("CERTIFICATE" in upper or "UNKNOWN_CA" in upper)


def _tls_failure(exc: BaseException) -> str | None:
    """gRPC's account of a TLS failure (a handshake with a plaintext server, an unknown CA) found in the
    error or its causes (pyetcd wraps gRPC's error in its own), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        details = seen.details() if isinstance(seen, grpc.RpcError) and hasattr(seen, "details") else None
        text = str(details or seen)
        if any(word in text.lower() for word in _TLS_WORDS):
            return text
        seen = seen.__cause__ or seen.__context__
    return None


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class HeadState:
    """The head record and its etcd mod revision, which the commit compares."""

    value: dict[str, Any]
    mod_revision: int


@dataclass(frozen=True)
class ArchiveMarker:
    """How far a table's log has moved out of etcd into archive segments (design §2). Everything at or
    before `upto` is in a segment; etcd may still hold some of it (an archiver that has not yet deleted)."""

    #: newest archived version; -1 while nothing is
    upto: int = -1
    #: newest time version among the archived versions (None: no archived data commit)
    time_upto: int | None = None
    #: the newest checkpoint at or before `upto`, whose key left etcd with its version: (version, path)
    checkpoint: tuple[int, str] | None = None
    #: the marker key's mod revision, which the next archiving compares (0: no marker yet)
    revision: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"upto": self.upto, "time_upto": self.time_upto, "checkpoint": self.checkpoint}


@dataclass(frozen=True)
class ArchiveBatch:
    """What one archiving step moves out of etcd: the log entries, time-index entries and checkpoint
    keys at or before its last version."""

    entries: list[dict[str, Any]]
    #: (time version, ID version)
    times: list[tuple[int, int]]
    #: (version, checkpoint path)
    checkpoints: list[tuple[int, str]]


@dataclass(frozen=True)
class EndpointUsage:
    """One etcd member's database against its quota, from its own /metrics (etcd-usage, the operator)."""

    endpoint: str
    db_size_bytes: int | None = None
    #: the part of the database holding live data; the rest is free pages a defragmentation returns
    db_in_use_bytes: int | None = None
    quota_bytes: int | None = None
    #: why the member could not be asked (None: it answered)
    error: str | None = None

    @property
    def used_fraction(self) -> float | None:
        if self.db_size_bytes is None or not self.quota_bytes:
            return None
        return self.db_size_bytes / self.quota_bytes


@dataclass(frozen=True)
class CasResult:
    """Outcome of one compare-and-swap. On a lost compare, the new head and the log since the read
    version come back in the same round trip (the etcd STM shape), so a rebase needs no extra read."""

    succeeded: bool
    head: HeadState | None
    log: list[dict[str, Any]]


#: how long commit durations gather before their batch is written (record_commit_duration)
DURATION_BATCH_SECONDS = 1.0


class Coordinator:
    """A connection to etcd for one catalog. Thread-safe; one per process is enough."""

    def __init__(self, settings: EtcdSettings, *, timer: Timer = SYSTEM_TIMER) -> None:
        self.settings = settings
        self.timer = timer
        self.prefix = settings.prefix
        # re-entrant: granting the process lease goes through `client`, which takes the lock too
        self._lock = threading.RLock()
        self._client: pyetcd.MultiEndpointEtcd3Client | None = None
        self._lease: Any = None
        self._lease_ttl = 30
        #: (granted at, lease) shared by this process's recorded events (record_event)
        #: per event TTL: (granted at, lease) shared by this process's events of that TTL
        self._events_leases: dict[int, tuple[float, Any]] = {}
        self._keepalive: threading.Thread | None = None
        self._closed = threading.Event()
        #: keys per range page; halves (for good) when a page of large entries overflows an answer
        self._page_keys = RANGE_PAGE_KEYS
        #: table id -> the newest head this process has seen (its own commits, lost races, reads) and
        #: when: where a transaction starts without a round trip; the compare-and-swap judges whatever is
        #: newer. Only for KNOWN_HEAD_SECONDS: a process that last saw a table long ago asks again, so a
        #: transaction never starts from a snapshot whose files retention may have let vacuum delete
        self._heads: dict[str, tuple[HeadState, float]] = {}
        #: each table's commit transaction parts, made at its first commit through this coordinator
        self._prepared: dict[str, etcd_txn.CommitRequests] = {}
        #: events waiting to be recorded by the recorder thread (off the commit path)
        self._events: list[tuple[str, dict[str, Any], int]] = []
        #: commit durations waiting for their batch: (table id, ttl) -> the batch event being filled
        self._durations: dict[tuple[str, int], dict[str, Any]] = {}
        self._durations_timer: threading.Timer | None = None
        self._events_ready = threading.Condition(self._lock)
        self._recorder: threading.Thread | None = None

    # --- connection ----------------------------------------------------------------------------------

    def _connect(self, endpoints: Sequence[str] | None = None) -> pyetcd.MultiEndpointEtcd3Client:
        """A client of the configured endpoints (failing over between them), or of just `endpoints`."""
        s = self.settings
        credentials = None
        if s.secure:
            if s.ca_file is None:
                raise ConfigurationError("https etcd endpoints need ACIDTABLES_ETCD_CA_FILE (the CA that signed etcd)")
            for variable, path in (
                ("ACIDTABLES_ETCD_CA_FILE", s.ca_file),
                ("ACIDTABLES_ETCD_CERT_FILE", s.cert_file),
                ("ACIDTABLES_ETCD_KEY_FILE", s.key_file),
            ):
                if path is not None:
                    try:
                        with open(path, "rb") as handle:
                            handle.read(1)
                    except OSError as exc:
                        raise ConfigurationError(
                            f"TLS for etcd at {', '.join(s.endpoints)}: {variable}={path} cannot be read "
                            f"({exc.strerror or exc})"
                        ) from None
            self._check_tls_files()
            credentials = pyetcd.MultiEndpointEtcd3Client.get_secure_creds(s.ca_file, s.key_file, s.cert_file)
        urls = s.endpoints if endpoints is None else endpoints
        # how long pyetcd skips a member after a request to it failed (its default, 300 s, would turn an
        # etcd restart into minutes of errors): never with one member, which is all there is; a moment
        # with several, so the next request goes to a live member rather than the dead one again
        time_retry = 0.0 if len(urls) == 1 else MEMBER_RETRY_SECONDS
        members = []
        for url in urls:
            parts = urlsplit(url)
            # a connection of its own per client (gRPC otherwise shares one among channels to the same
            # target): a client replaced after a lost answer must not reuse the connection that lost it,
            # while the old client stays open for calls other threads still have in flight on it
            members.append(
                pyetcd.Endpoint(
                    parts.hostname,
                    parts.port,
                    secure=s.secure,
                    creds=credentials,
                    time_retry=time_retry,
                    opts=[("grpc.use_local_subchannel_pool", 1)],
                )
            )
        try:
            client = pyetcd.MultiEndpointEtcd3Client(
                endpoints=members,
                timeout=s.request_timeout_seconds,
                user=s.user,
                password=s.password,
                failover=True,
            )
            if not s.secure:
                # grpc refuses call credentials on an insecure channel; pyetcd also sends the token as
                # plain metadata on every call, which etcd accepts, so drop the credentials there
                client.call_credentials = None
            return client
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise etcd_exceptions.ConnectionFailedError() from exc
            raise ConfigurationError(f"etcd refused the credentials of ACIDTABLES_ETCD_USER: {exc.details()}") from exc

    def _check_tls_files(self) -> None:
        """Load the CA and the client certificate and key as Python's TLS does: gRPC, given files it cannot
        use, only logs "Invalid private key" to stderr and fails every connection attempt without saying
        which file is wrong."""
        s = self.settings
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_verify_locations(cafile=s.ca_file)
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"TLS for etcd at {', '.join(s.endpoints)}: ACIDTABLES_ETCD_CA_FILE={s.ca_file} holds no PEM "
                f"certificate ({exc.reason or exc})"
            ) from None
        if s.cert_file is None or s.key_file is None:
            return
        try:
            # an encrypted key: fail (gRPC cannot use one) instead of OpenSSL prompting on the terminal
            context.load_cert_chain(s.cert_file, s.key_file, password=lambda: b"")
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"TLS for etcd at {', '.join(s.endpoints)}: ACIDTABLES_ETCD_CERT_FILE={s.cert_file} and "
                f"ACIDTABLES_ETCD_KEY_FILE={s.key_file} are not a PEM certificate and its unencrypted private key "
                f"({exc.reason or exc})"
            ) from None

    @property
    def client(self) -> pyetcd.MultiEndpointEtcd3Client:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _reset_client(self, *, close: bool = False) -> None:
        """Connect afresh at the next request. The old client is closed only when the coordinator is
        (`close`): other threads (the lease keep-alive, the event recorder, the archiver, a commit) may
        have calls in flight on it, and closing its channel would cancel them -- a commit among them
        would then not know whether it landed. It goes when its last caller lets go of it."""
        with self._lock:
            if self._client is not None and close:
                try:
                    self._client.close()
                except Exception:  # closing a broken channel can fail; we are replacing it anyway
                    logger.debug("closing the old etcd client failed", exc_info=True)
            self._client = None

    def _call(self, what: str, fn: Callable[[pyetcd.MultiEndpointEtcd3Client], T], *, cluster_wide: bool = False) -> T:
        """Run one idempotent request, retrying connection failures until the unavailable deadline.

        Anything else etcd says (a refused login, a request too large, no permission) is final and raised
        at once. `cluster_wide`: the request acts beyond the prefix (compaction, alarms), so a refusal
        says it needs the root role."""
        deadline = self.timer.now() + self.settings.unavailable_timeout_seconds
        delay = 0.05
        relogged = False
        tls_failures = 0
        while True:
            try:
                return fn(self.client)
            except grpc.RpcError as exc:
                code = exc.code()
                if code is grpc.StatusCode.UNAUTHENTICATED and not relogged:
                    # the auth token expired (etcd's simple tokens live 5 minutes): log in again, once
                    relogged = True
                    self._reset_client()
                    continue
                if code not in _RETRYABLE_CODES:
                    raise self._refused(what, exc, cluster_wide=cluster_wide) from exc
                error: BaseException = exc
            except _CONNECTION_ERRORS as exc:
                error = exc
            except ValueError as exc:
                if not _closed_channel(exc):
                    raise
                error = exc
            tls = _tls_failure(error)
            tls_failures = tls_failures + 1 if tls is not None else 0
            if tls is not None and tls_failures >= 2:
                # a handshake that failed twice in a row fails for good (an etcd still starting answers
                # "connection refused", not a TLS error): say why now instead of waiting out the deadline
                raise ConfigurationError(
                    f"TLS with etcd at {', '.join(self.settings.endpoints)} failed during {what}: {tls}. "
                    + self._tls_advice(tls)
                ) from error
            self._reset_client()
            remaining = deadline - self.timer.now()
            if remaining <= 0:
                raise CoordinatorUnavailable(
                    f"etcd at {', '.join(self.settings.endpoints)} did not answer {what} within "
                    f"{self.settings.unavailable_timeout_seconds:g} s ({error}). Nothing was committed. Check that "
                    "etcd is running and reachable; ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS sets how long to wait."
                ) from error
            logger.info("etcd unreachable during %s (%s); retrying in %.2f s", what, error, min(delay, remaining))
            self.timer.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)

    def _tls_advice(self, failure: str) -> str:
        s = self.settings
        if not s.secure:
            return "The endpoints say http: does etcd expect TLS (https://)?"
        if not _client_certificate_refused(failure):
            return "The endpoints say https: is etcd serving TLS, and did ACIDTABLES_ETCD_CA_FILE sign its certificate?"
        if s.cert_file is None:
            return (
                "etcd demands a client certificate (--client-cert-auth): set ACIDTABLES_ETCD_CERT_FILE and "
                "ACIDTABLES_ETCD_KEY_FILE to one signed by a CA etcd trusts (its --trusted-ca-file)."
            )
        return (
            f"etcd refused the client certificate ACIDTABLES_ETCD_CERT_FILE={s.cert_file}: is it signed by a CA "
            "etcd trusts (its --trusted-ca-file) and made for client authentication (extendedKeyUsage clientAuth)?"
        )

    def _full(self, what: str) -> CoordinatorFull:
        return CoordinatorFull(
            f"etcd at {', '.join(self.settings.endpoints)} is full: its database reached its quota "
            f"(--quota-backend-bytes; the NOSPACE alarm is raised), so it refuses {what} and every other write, of "
            "every table. Nothing was committed; reads keep working and nothing committed is lost. To free space: "
            "`acidtables etcd-usage` shows what each table holds and the quota; `acidtables expire TABLE` moves old "
            "log entries out of etcd; then compact etcd's history, defragment every member and disarm the alarm "
            "(etcdctl compact, etcdctl defrag, etcdctl alarm disarm)"
        )

    def _refused(self, what: str, exc: grpc.RpcError, *, cluster_wide: bool = False) -> AcidTablesError:
        if _no_space(exc):
            return self._full(what)
        details = exc.details() or str(exc.code())
        if _permission_denied(exc):
            return self._denied(what, details, cluster_wide=cluster_wide)
        if exc.code() is grpc.StatusCode.UNAUTHENTICATED or "user name" in details or "auth" in details.lower():
            return ConfigurationError(
                f"etcd refused {what}: {details}. Check ACIDTABLES_ETCD_USER and ACIDTABLES_ETCD_PASSWORD "
                "(an etcd with authentication enabled needs both)."
            )
        return CoordinatorRefused(f"etcd refused {what}: {details}")

    def _denied(self, what: str, details: str, *, cluster_wide: bool = False) -> CoordinatorPermissionDenied:
        """Whom etcd refused and where: the user and the prefix, so an operator knows which role to fix."""
        s = self.settings
        if s.user is not None:
            who = f"etcd user {s.user!r} (ACIDTABLES_ETCD_USER)"
        elif s.cert_file is not None:
            who = f"the etcd user named by the common name of ACIDTABLES_ETCD_CERT_FILE={s.cert_file}"
        else:
            who = "this client"
        if cluster_wide:
            advice = (
                f"That acts on the whole etcd cluster, not only on the keys under {s.prefix}, so etcd allows it only "
                "to a user with the root role: run it as root"
            )
        else:
            advice = (
                f"The user's roles do not cover this request on the keys under {s.prefix} (ACIDTABLES_ETCD_PREFIX); "
                "acidtables needs readwrite on the whole prefix. Nothing was committed. Grant it (etcdctl role "
                f"grant-permission --prefix=true ROLE readwrite {s.prefix}/) or set ACIDTABLES_ETCD_PREFIX to the "
                "prefix the user's role covers"
            )
        return CoordinatorPermissionDenied(
            f"etcd refused {what} to {who}: {details}. {advice}.", user=s.user, prefix=s.prefix
        )

    def close(self) -> None:
        self.flush_events()
        self._closed.set()
        with self._lock:
            self._events_ready.notify_all()
        if self._lease is not None:
            try:
                self._lease.revoke()
            except Exception:  # best effort: the lease expires on its own
                logger.debug("revoking the process lease failed", exc_info=True)
        self._reset_client(close=True)

    @property
    def closed(self) -> bool:
        """True once close() was called: this client makes no more requests (the operator's liveness)."""
        return self._closed.is_set()

    def ping(self) -> None:
        self._call("a status request", lambda c: c.status())

    # --- keys ----------------------------------------------------------------------------------------

    def catalog_key(self, namespace: str, name: str) -> str:
        return f"{self.prefix}/catalog/{namespace}/{name}"

    def table_prefix(self, table_id: str) -> str:
        return f"{self.prefix}/tables/{table_id}/"

    def _key(self, table_id: str, *parts: str) -> str:
        return self.table_prefix(table_id) + "/".join(parts)

    def head_key(self, table_id: str) -> str:
        return self._key(table_id, "head")

    def log_key(self, table_id: str, version: int) -> str:
        return self._key(table_id, "log", _pad(version))

    def _log_range(self, table_id: str, after: int, upto: int | None) -> tuple[str, str]:
        start = self.log_key(table_id, after + 1)
        end = self.log_key(table_id, upto + 1) if upto is not None else self._key(table_id, "log0")
        return start, end

    # --- catalog -------------------------------------------------------------------------------------

    def create_table(
        self,
        namespace: str,
        name: str,
        entry: dict[str, Any],
        table_id: str,
        record: dict[str, Any],
        head: dict[str, Any],
    ) -> bool:
        """Create the catalog entry, version 0 and the head in one transaction; False if the name exists."""
        key = self.catalog_key(namespace, name)
        succeeded, _ = self._call(
            "create_table",
            lambda c: c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[
                    c.transactions.put(key, _dumps(entry)),
                    c.transactions.put(self.log_key(table_id, 0), _dumps(record)),
                    c.transactions.put(self.head_key(table_id), _dumps(head)),
                    c.transactions.put(self._key(table_id, "txns", record["txn_id"]), b"0"),
                ],
                failure=[],
            ),
        )
        return bool(succeeded)

    def get_catalog_entry(self, namespace: str, name: str) -> dict[str, Any] | None:
        key = self.catalog_key(namespace, name)
        value, _ = self._call("a catalog read", lambda c: c.get(key))
        return _catalog_entry(value, key) if value is not None else None

    def list_catalog(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every catalog entry under the prefix; a damaged one is listed as {"name", "damaged": reason}
        so one damaged table does not hide the others."""
        prefix = f"{self.prefix}/catalog/" + (f"{namespace}/" if namespace else "")
        values = self._call("a catalog listing", lambda c: list(c.get_prefix(prefix, sort_order="ascend")))
        out = []
        for value, meta in values:
            key = meta.key.decode(errors="replace")
            try:
                out.append(_catalog_entry(value, key))
            except CorruptMetadataError as exc:
                out.append({"name": ".".join(key.rsplit("/", 2)[-2:]), "damaged": str(exc), "key": key})
        return out

    def drop_table(self, namespace: str, name: str, table_id: str) -> bool:
        """Remove the catalog entry and every key of the table in one transaction."""
        key = self.catalog_key(namespace, name)
        prefix = self.table_prefix(table_id)
        end = etcd_utils.prefix_range_end(prefix.encode())
        succeeded, _ = self._call(
            "drop_table",
            lambda c: c.transaction(
                compare=[c.transactions.version(key) > 0],
                success=[c.transactions.delete(key), ops.Delete(prefix, range_end=end)],
                failure=[],
            ),
        )
        self.forget_head(table_id)
        return bool(succeeded)

    # --- head and log --------------------------------------------------------------------------------

    def read_head(self, table_id: str, *, serializable: bool = False) -> HeadState:
        """The table's head. `serializable`: from whichever member answers, without a quorum read (it
        may be a little behind, which is fine where the compare-and-swap judges what is newer)."""
        key = self.head_key(table_id)
        value, meta = self._call("a head read", lambda c: c.get(key, serializable=serializable))
        if value is None:
            self.forget_head(table_id)
            raise LookupError(f"table {table_id} has no head")
        return self._remember(table_id, HeadState(_versioned(value, key), meta.mod_revision))

    def known_head(self, table_id: str) -> HeadState | None:
        """The newest head of the table this process has seen in the last KNOWN_HEAD_SECONDS, without
        asking etcd."""
        with self._lock:
            known = self._heads.get(table_id)
        if known is None or time.monotonic() - known[1] > KNOWN_HEAD_SECONDS:
            return None
        return known[0]

    def forget_head(self, table_id: str) -> None:
        with self._lock:
            self._heads.pop(table_id, None)

    def _remember(self, table_id: str, head: HeadState) -> HeadState:
        with self._lock:
            known = self._heads.get(table_id)
            if known is None or head.mod_revision >= known[0].mod_revision:
                self._heads[table_id] = (head, time.monotonic())
        return head

    def read_log(self, table_id: str, after: int, upto: int | None = None) -> list[dict[str, Any]]:
        """Log entries with after < version <= upto (all newer ones when upto is None), oldest first,
        read in pages. The key range itself is bounded: etcd 3.5 reads every key of a range it is asked
        to sort, whatever the limit, so readers never ask for "newest first, limit n"."""
        start, end = self._log_range(table_id, after, upto)
        values = self._paged_range("a log read", start, end)
        return [_log_entry(v, m.key.decode(errors="replace")) for v, m in values]

    def _paged_range(self, what: str, start: str, end: str) -> list[tuple[bytes, Any]]:
        """Every key in [start, end), in key order, RANGE_PAGE_KEYS at a time: no answer approaches
        gRPC's message limit however long the range (a table's log, its time index). Unsorted pages
        read only the keys they return. Log and index entries never change once written, so pages
        read at different revisions still add up to the range."""
        out: list[tuple[bytes, Any]] = []
        cursor: bytes = start.encode()
        while True:
            response = self._range_page(what, cursor, end, self._page_keys)
            if response is None:  # this page of large entries is too big for one answer: smaller from now on
                self._page_keys //= 2
                continue
            out.extend((kv.value, KVMetadata(kv, response.header)) for kv in response.kvs)
            if not response.more or not response.kvs:
                return out
            cursor = response.kvs[-1].key + b"\0"

    def _range_page(self, what: str, cursor: bytes, end: str, page: int) -> Any:
        """One page of a range read, or None when it is too large for a gRPC answer and can shrink."""

        def read(client: pyetcd.MultiEndpointEtcd3Client) -> Any:
            try:
                return client.get_range_response(cursor, end, limit=page)
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and page > 1:
                    return None
                raise

        return self._call(what, read)

    def compare_and_swap(
        self,
        table_id: str,
        expected_head_revision: int,
        read_after: int,
        version: int,
        entry: bytes,
        head: dict[str, Any],
        txn_id: str,
        time_version: int | None,
    ) -> CasResult:
        """The commit point: if the head is unchanged, write log/<version>, the head, the txn index and
        the time index in one etcd transaction. Raises CommitAnswerLost when the answer did not come."""
        client = self.client
        request = self._commit_requests(table_id).build(
            expected_head_revision=expected_head_revision,
            read_after=read_after,
            window=LOG_ENTRIES_IN_A_TXN,
            version=version,
            entry=entry,
            head=_dumps(head),
            txn_id=txn_id,
            time_version=time_version,
        )
        try:
            response = etcd_txn.send(client, request)
        except (grpc.RpcError, *_CONNECTION_ERRORS, ValueError) as exc:
            if isinstance(exc, ValueError) and not _closed_channel(exc):
                raise
            if _no_space(exc):  # etcd may have applied it (see the committer): look it up
                raise self._full("the commit") from exc
            if isinstance(exc, grpc.RpcError) and _permission_denied(exc):
                # etcd checks the user's rights before applying anything: a definite refusal, not a lost
                # answer to look up (nor a lost race to rebase and retry)
                raise self._refused("the commit", exc) from exc
            self._reset_client()
            raise CommitAnswerLost(str(exc)) from exc
        if response.succeeded:
            return CasResult(True, self._remember(table_id, HeadState(head, response.header.revision)), [])
        head_kvs, log_kvs = etcd_txn.range_kvs(response, 0), etcd_txn.range_kvs(response, 1)
        return self._rebase_state(table_id, read_after, head_kvs, log_kvs)

    def _commit_requests(self, table_id: str) -> etcd_txn.CommitRequests:
        prepared = self._prepared.get(table_id)
        if prepared is None:
            prepared = self._prepared[table_id] = etcd_txn.CommitRequests(
                head=self.head_key(table_id),
                log=self._key(table_id, "log", ""),
                txns=self._key(table_id, "txns", ""),
                inflight=self._key(table_id, "inflight", ""),
                times=self._key(table_id, "times", ""),
            )
        return prepared

    def _rebase_state(self, table_id: str, after: int, head_kvs: Any, log_kvs: Any) -> CasResult:
        """The head and every log entry after `after` up to it: the first LOG_ENTRIES_IN_A_TXN came
        with the head, the rest (a writer far behind) are read in pages."""
        head = self._head_state(table_id, head_kvs)
        log = _log_entries(log_kvs)
        if head is None:
            self.forget_head(table_id)
        else:
            self._remember(table_id, head)
            received = int(log[-1].get("version", after)) if log else after
            newest = int(head.value["version"])
            if newest > received:
                log += self.read_log(table_id, received, newest)
        return CasResult(False, head, log)

    def read_head_and_log(self, table_id: str, after: int) -> CasResult:
        """The head and the log after `after`: what a committer needs to rebase. One round trip unless
        more than LOG_ENTRIES_IN_A_TXN commits landed since."""
        start, end = self._log_range(table_id, after, after + LOG_ENTRIES_IN_A_TXN)
        _, responses = self._call(
            "a head and log read",
            lambda c: c.transaction(
                compare=[], success=[ops.Get(self.head_key(table_id)), ops.Get(start, range_end=end)], failure=[]
            ),
        )
        head_kvs, log_kvs = responses
        return self._rebase_state(table_id, after, head_kvs, log_kvs)

    def _head_state(self, table_id: str, head_kvs: Any) -> HeadState | None:
        if not head_kvs:
            return None
        return HeadState(_versioned(head_kvs[0][0], self.head_key(table_id)), head_kvs[0][1].mod_revision)

    def find_txn(self, table_id: str, txn_id: str) -> int | None:
        key = self._key(table_id, "txns", txn_id)
        value, _ = self._call("a transaction lookup", lambda c: c.get(key))
        return _integer(value, key) if value is not None else None

    def version_at_time(self, table_id: str, time_us: int, *, newer_than: int | None = None) -> tuple[int, int] | None:
        """The newest data commit at or before `time_us` in etcd's time index: (time version, ID version).
        `newer_than`: the index holds nothing at or before this time (it was archived), so look no lower.

        etcd 3.5 ignores `limit` on a sorted range (it reads and sorts every key in it), so a
        newest-first read of the whole time index costs one key per data commit ever made. Instead read
        unsorted (ascending key order) windows ending at `time_us`, each 8 times wider than the last,
        starting at one second. At or after the newest data commit (the usual "as of now"), the head
        names it, and one more read gives its ID version."""
        head = self.read_head(table_id)
        newest = head.value.get("time_version")
        if newest is not None and not isinstance(newest, int):
            raise CorruptMetadataError(
                f"etcd key {self.head_key(table_id)} has a time_version that is not a number",
                key=self.head_key(table_id),
            )
        if newest is not None and time_us >= int(newest):
            newest_key = self._key(table_id, "times", _pad(int(newest)))
            value, _ = self._call("a time lookup", lambda c: c.get(newest_key))
            if value is not None:
                return int(newest), _integer(value, newest_key)
        end = self._key(table_id, "times", _pad(time_us + 1))
        floor = 0 if newer_than is None else newer_than + 1
        width = 1_000_000
        while True:
            low = max(floor, time_us + 1 - width)
            values = self._time_window(table_id, low, end)
            if values:
                value, meta = values[-1]
                return _time_entry(value, meta)
            if low == floor:
                return None
            width *= 8

    def _time_window(self, table_id: str, low_us: int, end: str) -> list[tuple[bytes, Any]]:
        start = self._key(table_id, "times", _pad(low_us))
        return self._paged_range("a time lookup", start, end)

    def versions_between_times(self, table_id: str, start_us: int, end_us: int) -> list[tuple[int, int]]:
        """Data commits with start_us <= time version <= end_us: (time version, ID version) pairs, in
        time order (the keys' order: padded numbers)."""
        start = self._key(table_id, "times", _pad(start_us))
        end = self._key(table_id, "times", _pad(end_us + 1))
        values = self._paged_range("a time range read", start, end)
        return [_time_entry(v, m) for v, m in values]

    # --- checkpoints ---------------------------------------------------------------------------------

    def put_checkpoint(self, table_id: str, version: int, path: str) -> None:
        key = self._key(table_id, "checkpoints", _pad(version))
        self._call("a checkpoint registration", lambda c: c.put(key, path.encode()))

    def checkpoints(self, table_id: str, first: int = 0, upto: int | None = None) -> list[tuple[int, str]]:
        """The checkpoints registered in etcd at versions first..upto (all when upto is None): (version, path)."""
        start = self._key(table_id, "checkpoints", _pad(first))
        end = self._key(table_id, "checkpoints0" if upto is None else f"checkpoints/{_pad(upto + 1)}")
        values = self._paged_range("a checkpoint listing", start, end)
        return [_checkpoint_entry(v, m) for v, m in values]

    def checkpoint_at_or_before(
        self, table_id: str, version: int, *, within: int | None = None
    ) -> tuple[int, str] | None:
        """The newest checkpoint at or before `version`. With `within`, look among the versions
        (version - within, version] first: etcd 3.5 ignores `limit` on a sorted range (it reads every
        key of the range, sorts, then truncates), so the unbounded newest-first read costs one key per
        checkpoint the table ever wrote. An unsorted range comes back in ascending key order anyway."""
        end = self._key(table_id, "checkpoints", _pad(version + 1))
        if within is not None:
            near = self._key(table_id, "checkpoints", _pad(max(0, version - within + 1)))
            values = self._call("a checkpoint lookup", lambda c: list(c.get_range(near, end)))
            if values:
                return _checkpoint_entry(*values[-1])
        start = self._key(table_id, "checkpoints", _pad(0))
        values = self._call(
            "a checkpoint lookup", lambda c: list(c.get_range(start, end, sort_order="descend", limit=1))
        )
        return _checkpoint_entry(*values[0]) if values else None

    # --- the archive marker and retention (core.log.tablelog, core.maintenance.retention) ---

    def archive_marker(self, table_id: str) -> ArchiveMarker:
        key = self._key(table_id, "archived")
        value, meta = self._call("an archive marker read", lambda c: c.get(key))
        if value is None:
            return ArchiveMarker()
        data = _object(value, key)
        try:
            checkpoint = data.get("checkpoint")
            time_upto = data.get("time_upto")
            return ArchiveMarker(
                upto=int(data["upto"]),
                time_upto=None if time_upto is None else int(time_upto),
                checkpoint=None if checkpoint is None else (int(checkpoint[0]), str(checkpoint[1])),
                revision=meta.mod_revision,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptMetadataError(
                f"etcd key {key} is not an archive marker ({exc}): {str(data)[:200]}", key=key
            ) from None

    def archive_batch(self, table_id: str, seen: ArchiveMarker, upto: int) -> ArchiveBatch:
        """The log entries after the marker `seen` up to `upto`, with their time-index entries and
        checkpoint keys. Every range starts where the marker says etcd's part begins: deleted keys stay
        in etcd's index until its history is compacted, so a range from the start of a prefix would walk
        minutes of them at every step."""
        entries = self.read_log(table_id, seen.upto, upto)
        first_time = 0 if seen.time_upto is None else seen.time_upto + 1
        times = [
            pair
            for pair in (
                _time_entry(v, m)
                for v, m in self._paged_range(
                    "a time index read",
                    self._key(table_id, "times", _pad(first_time)),
                    self._key(table_id, "times0"),
                )
            )
            if pair[1] <= upto
        ]
        checkpoints = self.checkpoints(table_id, seen.upto + 1, upto)
        return ArchiveBatch(entries, times, checkpoints)

    def advance_archive(
        self, table_id: str, seen: ArchiveMarker, marker: ArchiveMarker, txn_ids: Sequence[str] = ()
    ) -> ArchiveMarker | None:
        """Move the marker from `seen` to `marker` and delete, in the same transaction, the log entries,
        time-index entries and checkpoint keys it now covers (their segment is written already), and the
        txn-index keys `txn_ids` (at most TXN_KEYS_IN_A_TXN: one delete each). The marker as stored (its
        new revision), or None when another archiver moved it first. The other deletes are three ranges:
        etcd's limit on operations per transaction (128 by default) never binds, however many versions
        the batch holds."""
        if len(txn_ids) > TXN_KEYS_IN_A_TXN:
            raise ValueError(f"advance_archive(): at most {TXN_KEYS_IN_A_TXN} txn keys, got {len(txn_ids)}")
        key = self._key(table_id, "archived")
        # from where `seen` ends, not from the prefix's start: etcd walks deleted keys in a range until
        # its history is compacted, and every earlier step's keys are deleted already
        deletes = [
            ops.Delete(self.log_key(table_id, seen.upto + 1), range_end=self.log_key(table_id, marker.upto + 1)),
            ops.Delete(
                self._key(table_id, "checkpoints", _pad(seen.upto + 1)),
                range_end=self._key(table_id, "checkpoints", _pad(marker.upto + 1)),
            ),
        ]
        if marker.time_upto is not None:
            first_time = 0 if seen.time_upto is None else seen.time_upto + 1
            deletes.append(
                ops.Delete(
                    self._key(table_id, "times", _pad(first_time)),
                    range_end=self._key(table_id, "times", _pad(marker.time_upto + 1)),
                )
            )
        deletes += [ops.Delete(self._key(table_id, "txns", t)) for t in txn_ids]
        succeeded, responses = self._call(
            "an archiving step",
            lambda c: c.transaction(
                compare=[c.transactions.mod(key) == seen.revision],
                success=[ops.Put(key, _dumps(marker.to_json())), *deletes],
                failure=[],
            ),
        )
        if not succeeded:
            return None
        return replace(marker, revision=responses[0].response_put.header.revision)

    def delete_txn_keys(self, table_id: str, txn_ids: Sequence[str]) -> None:
        """Delete txn index keys, TXN_KEYS_IN_A_TXN per transaction (etcd allows 128 operations in one)."""

        def delete(deletes: list[Any]) -> Callable[[pyetcd.MultiEndpointEtcd3Client], Any]:
            return lambda c: c.transaction(compare=[], success=deletes, failure=[])

        for start in range(0, len(txn_ids), TXN_KEYS_IN_A_TXN):
            batch = [ops.Delete(self._key(table_id, "txns", t)) for t in txn_ids[start : start + TXN_KEYS_IN_A_TXN]]
            self._call("a txn index deletion", delete(batch))

    def read_retention(self, table_id: str) -> tuple[dict[str, Any] | None, int]:
        """The table's retention record and its mod revision (None, 0 when it has none)."""
        key = self._key(table_id, "retention")
        value, meta = self._call("a retention read", lambda c: c.get(key))
        if value is None:
            return None, 0
        return _versioned_field(_object(value, key), "oldest_version", key), meta.mod_revision

    def put_retention(self, table_id: str, record: dict[str, Any], seen_revision: int) -> bool:
        """Replace the retention record if nobody changed it since `seen_revision`."""
        key = self._key(table_id, "retention")
        succeeded, _ = self._call(
            "a retention update",
            lambda c: c.transaction(
                compare=[c.transactions.mod(key) == seen_revision],
                success=[ops.Put(key, _dumps(record))],
                failure=[],
            ),
        )
        return bool(succeeded)

    def table_usage(self, table_id: str) -> tuple[int, int]:
        """Keys and bytes (keys plus values) the table holds in etcd now."""
        prefix = self.table_prefix(table_id)
        values = self._paged_range("a usage count", prefix, etcd_utils.prefix_range_end(prefix.encode()).decode())
        return len(values), sum(len(v) + len(m.key) for v, m in values)

    def endpoint_usage(self) -> list[EndpointUsage]:
        """Each endpoint's database size, in-use size and quota, read from its /metrics page (etcd's
        gRPC status answer carries no quota)."""
        out = []
        for url in self.settings.endpoints:
            try:
                metrics = self._metrics(url)
            except (OSError, ValueError) as exc:
                out.append(EndpointUsage(url, error=str(exc)))
                continue
            out.append(
                EndpointUsage(
                    url,
                    db_size_bytes=metrics.get("etcd_mvcc_db_total_size_in_bytes"),
                    db_in_use_bytes=metrics.get("etcd_mvcc_db_total_size_in_use_in_bytes"),
                    quota_bytes=metrics.get("etcd_server_quota_backend_bytes"),
                )
            )
        return out

    def _metrics(self, url: str) -> dict[str, int]:
        context = None
        if url.startswith("https://"):
            context = ssl.create_default_context(cafile=self.settings.ca_file)
            if self.settings.cert_file:
                context.load_cert_chain(self.settings.cert_file, self.settings.key_file)
        timeout = self.settings.request_timeout_seconds
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout, context=context) as answer:
            text = answer.read().decode()
        wanted = ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes")
        found: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in (*wanted, "etcd_server_quota_backend_bytes"):
                found[name] = int(float(value))
        return found

    def reclaim_space(self) -> list[EndpointUsage]:
        """Give a full etcd its space back: compact its key history up to now, defragment every member
        (a database file only shrinks that way), then lift the NOSPACE alarm if every member is below its
        quota again. etcd takes only reads and deletes while the alarm is raised, so this comes first;
        archiving (expire) after it frees the log itself. Returns the usage after."""
        revision = self._call("a revision read", lambda c: c.get_response(self.prefix + "/").header.revision)
        try:
            self._call("a history compaction", lambda c: c.compact(revision, physical=True), cluster_wide=True)
        except CoordinatorRefused as exc:  # already compacted at or past this revision
            if "compacted" not in str(exc):
                raise
        for url in self.settings.endpoints:
            member = self._connect(endpoints=(url,))
            try:
                member.defragment()
            except grpc.RpcError as exc:
                raise self._refused(f"a defragmentation of {url}", exc, cluster_wide=True) from exc
            finally:
                member.close()
        usage = self.endpoint_usage()
        if all(u.error is None and (u.used_fraction or 0) < 1 for u in usage):
            # as `etcdctl alarm disarm` does: each raised alarm, by the member that raised it
            for alarm in self._call("an alarm listing", lambda c: list(c.list_alarms())):
                member = int(alarm.member_id)
                self._call("an alarm disarm", lambda c, m=member: c.disarm_alarm(member_id=m), cluster_wide=True)  # type: ignore[misc]
        return usage

    def alarms(self) -> list[str]:
        """The cluster's raised alarms (NOSPACE: a member's database reached its quota)."""
        raised = self._call("an alarm listing", lambda c: list(c.list_alarms()))
        names = {1: "NOSPACE", 2: "CORRUPT"}
        return sorted({names.get(int(a.alarm_type), str(a.alarm_type)) for a in raised if int(a.alarm_type)})

    # --- leases: in-flight transactions and events ---------------------------------------------------

    def _process_lease(self, ttl: int) -> Any:
        with self._lock:
            if self._lease is None:
                self._lease_ttl = ttl
                self._lease = self._call("a lease grant", lambda c: c.lease(ttl))
                self._keepalive = threading.Thread(target=self._keep_alive, name="acidtables-lease", daemon=True)
                self._keepalive.start()
            return self._lease

    def _keep_alive(self) -> None:
        # Refresh at a third of the TTL so one missed refresh does not expire running transactions.
        while not self._closed.wait(self._lease_ttl / 3):
            lease = self._lease
            if lease is None:
                return
            try:
                responses = lease.refresh()
                if responses and responses[0].TTL <= 0:
                    logger.warning("the in-flight lease expired (etcd was unreachable too long); granting a new one")
                    with self._lock:
                        self._lease = self.client.lease(self._lease_ttl)
            except Exception as exc:  # etcd down: keep trying, running transactions are unaffected
                logger.info("refreshing the in-flight lease failed (%s); will retry", exc)
                self._reset_client()

    def process_lease_id(self, ttl: int) -> int:
        """This process's lease (granted on first use, kept alive until close): its transactions'
        ids carry it (core.commit.txn_ids) and their registrations live under it."""
        return int(self._process_lease(ttl).id)

    def register_inflight(self, table_id: str, txn_id: str, info: dict[str, Any], ttl: int) -> bool:
        """Register a running transaction under the process lease, unless it has committed meanwhile
        (its txn index key exists): a registration made late can never outlive its commit. False when
        it had committed."""
        lease = self._process_lease(ttl)
        inflight = self._key(table_id, "inflight", txn_id)
        committed = self._key(table_id, "txns", txn_id)
        succeeded, _ = self._call(
            "an in-flight registration",
            lambda c: c.transaction(
                compare=[c.transactions.version(committed) == 0],
                success=[ops.Put(inflight, _dumps(info), lease)],
                failure=[],
            ),
        )
        return bool(succeeded)

    def live_leases(self, lease_ids: Iterable[int]) -> set[int]:
        """Which of these leases etcd still keeps alive (a writer process that has not died)."""
        return {lease_id for lease_id in set(lease_ids) if self._lease_ttl_left(lease_id) > 0}

    def _lease_ttl_left(self, lease_id: int) -> int:
        answer = self._call("a lease lookup", lambda c: c.get_lease_info(lease_id))
        return int(answer.TTL)

    def unregister_inflight(self, table_id: str, txn_id: str) -> None:
        key = self._key(table_id, "inflight", txn_id)
        self._call("an in-flight removal", lambda c: c.delete(key))

    def list_inflight(self, table_id: str) -> dict[str, dict[str, Any]]:
        prefix = self._key(table_id, "inflight", "")
        values = self._call("an in-flight listing", lambda c: list(c.get_prefix(prefix)))
        # an unreadable registration still names a live transaction: keep it, whatever its value says
        out: dict[str, dict[str, Any]] = {}
        for value, meta in values:
            key = meta.key.decode(errors="replace")
            try:
                out[key.rsplit("/", 1)[1]] = _object(value, key)
            except CorruptMetadataError as exc:
                out[key.rsplit("/", 1)[1]] = {"damaged": str(exc)}
        return out

    # --- leader election (core.coordination.leader) ---------------------------------------------------------------

    def try_lead(self, name: str, identity: str, ttl: int) -> tuple[Any, str | None]:
        """Put `leaders/<name>` = identity under a new lease of `ttl` seconds if nobody holds it.
        Returns (the lease, None) when this process now leads, else (None, the current holder)."""
        key = f"{self.prefix}/leaders/{name}"
        lease = self._call("a leader lease grant", lambda c: c.lease(ttl))
        won, responses = self._call(
            "a leader campaign",
            lambda c: c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, identity.encode(), lease)],
                failure=[c.transactions.get(key)],
            ),
        )
        if won:
            return lease, None
        try:
            lease.revoke()
        except Exception:  # it expires by itself
            logger.debug("revoking an unused leader lease failed", exc_info=True)
        held = responses[0] if responses else []
        return None, held[0][0].decode(errors="replace") if held else None

    def refresh_lead(self, lease: Any) -> bool | None:
        """Keep a leader lease alive: True when refreshed, False once it has expired (someone else may
        lead now), None when etcd did not answer (the caller decides how long it may still lead)."""
        try:
            responses = lease.refresh()
        except Exception as exc:
            logger.info("refreshing the leader lease failed: %s", exc)
            self._reset_client()
            return None
        return bool(responses) and responses[0].TTL > 0

    def resign(self, lease: Any) -> None:
        try:
            lease.revoke()
        except Exception:  # expiry does the same, later
            logger.debug("revoking the leader lease failed", exc_info=True)

    # --- watching: what a change feed starts from and follows (core.coordination.feed) ------------------------------

    def watched_state(self) -> tuple[int, list[RawKey]]:
        """Catalog entries, table heads, in-flight registrations and recorded events, all read at one
        store revision, which is returned with them (a feed watches from the next one)."""

        def read(client: pyetcd.MultiEndpointEtcd3Client) -> tuple[int, list[RawKey]]:
            catalog = client.get_prefix_response(f"{self.prefix}/catalog/")
            revision = int(catalog.header.revision)
            out = [self._raw(kv.key, kv.value, kv.mod_revision) for kv in catalog.kvs]
            events = client.get_prefix_response(f"{self.prefix}/events/", revision=revision)
            out += [self._raw(kv.key, kv.value, kv.mod_revision) for kv in events.kvs]
            for kv in catalog.kvs:
                try:
                    table_id = _catalog_entry(kv.value, kv.key.decode(errors="replace"))["table_id"]
                except CorruptMetadataError:
                    continue  # listed as it is; a damaged entry names no table to follow
                head = client.get_response(self.head_key(table_id), revision=revision)
                out += [self._raw(h.key, h.value, h.mod_revision) for h in head.kvs]
                inflight = client.get_prefix_response(self._key(table_id, "inflight", ""), revision=revision)
                out += [self._raw(i.key, i.value, i.mod_revision) for i in inflight.kvs]
            return revision, out

        return self._call("reading the watched state", read)

    def watch(
        self, start_revision: int, on_change: Callable[[list[RawKey] | AcidTablesError], None]
    ) -> Callable[[], None]:
        """Follow every change under the prefix from `start_revision` on. `on_change` gets each
        response's changes in revision order (value None for a delete), or the error that ended the
        watch (RevisionCompactedError when `start_revision` is gone). Returns the cancel function."""

        def deliver(response: Any) -> None:  # on pyetcd's watch thread
            if isinstance(response, etcd_exceptions.RevisionCompactedError):
                on_change(WatchCompacted(int(response.compacted_revision)))
                return
            if isinstance(response, BaseException):
                on_change(WatchLost(f"the etcd watch ended: {response!r}"))
                return
            on_change(
                [
                    self._raw(e.key, None if isinstance(e, DeleteEvent) else e.value, e.mod_revision)
                    for e in response.events
                ]
            )

        try:
            client = self.client
            watch_id = client.add_watch_prefix_callback(f"{self.prefix}/", deliver, start_revision=start_revision)
        except etcd_exceptions.RevisionCompactedError as exc:
            raise WatchCompacted(int(exc.compacted_revision)) from None
        except (grpc.RpcError, *_CONNECTION_ERRORS, etcd_exceptions.WatchTimedOut) as exc:
            raise WatchLost(f"could not start an etcd watch: {exc!r}") from None

        def cancel() -> None:
            try:
                client.cancel_watch(watch_id)
            except Exception:  # the connection is already gone: nothing left to cancel
                logger.debug("cancelling an etcd watch failed", exc_info=True)

        return cancel

    def _raw(self, key: bytes, value: bytes | None, mod_revision: int) -> RawKey:
        return RawKey(key.decode(errors="replace").removeprefix(self.prefix + "/"), value, int(mod_revision))

    def record_event(self, table_id: str, txn_id: str, event: dict[str, Any], ttl: int) -> None:
        """Store a conflict, retry, exhaustion or abort for the operator to count: queued and written by
        a thread of its own, so a rebase costs no round trip for it; best effort, it never fails a job
        (close() flushes what is queued). Every event of this process shares one lease per `ttl / 2`
        window (one grant per window, not per event), so an event lives between `ttl / 2` and `ttl`
        seconds."""
        key = f"{self.prefix}/events/{table_id}/{_pad(time.time_ns() // 1000)}-{txn_id}-{random.randrange(1 << 16)}"
        with self._lock:
            self._events.append((key, event, ttl))
            if self._recorder is None:
                self._recorder = threading.Thread(target=self._record_events, name="acidtables-events", daemon=True)
                self._recorder.start()
            self._events_ready.notify_all()

    def record_commit_duration(self, table_id: str, table: str, operation: str, seconds: float, ttl: int) -> None:
        """A landed commit's whole duration, for the operator's commit-duration histogram. Durations are
        batched per table and written at most once per `DURATION_BATCH_SECONDS` by the event recorder:
        one etcd write a second per busy table and process, however many commits, so the commit path
        keeps its one round trip and etcd its one proposal per commit."""
        with self._lock:
            batch = self._durations.setdefault((table_id, ttl), {"kind": "committed", "table": table, "durations": []})
            batch["durations"].append([operation, seconds])
            if self._durations_timer is None:
                self._durations_timer = threading.Timer(DURATION_BATCH_SECONDS, self._flush_durations)
                self._durations_timer.daemon = True
                self._durations_timer.start()

    def _flush_durations(self) -> None:
        with self._lock:
            batches, self._durations = self._durations, {}
            timer, self._durations_timer = self._durations_timer, None
        if timer is not None:
            timer.cancel()
        for (table_id, ttl), event in batches.items():
            self.record_event(table_id, "durations", event, ttl)

    def flush_events(self, timeout_seconds: float = 5.0) -> None:
        """Wait until the queued events (and batched commit durations) are written (or `timeout_seconds`
        passed)."""
        self._flush_durations()
        deadline = time.monotonic() + timeout_seconds
        with self._lock:
            while self._events and self._recorder is not None and time.monotonic() < deadline:
                self._events_ready.wait(0.05)

    def _record_events(self) -> None:
        while True:
            with self._lock:
                while not self._events and not self._closed.is_set():
                    self._events_ready.wait()
                if not self._events:
                    self._recorder = None
                    return
                key, event, ttl = self._events[0]
            try:
                lease = self._event_lease(ttl)
                self.client.put(key, _dumps(event), lease=lease)
            except Exception as exc:  # metrics must never turn a result into a failure
                with self._lock:
                    self._events_leases.pop(ttl, None)  # a lost or revoked lease: grant a new one next time
                logger.info("could not record a %s event in etcd: %s", event.get("kind"), exc)
            with self._lock:
                self._events.pop(0)
                self._events_ready.notify_all()

    def _event_lease(self, ttl: int) -> Any:
        with self._lock:
            granted_at, lease = self._events_leases.get(ttl, (0.0, None))
            if lease is None or self.timer.now() - granted_at >= ttl / 2:
                lease = self.client.lease(ttl)
                self._events_leases[ttl] = (self.timer.now(), lease)
            return lease

    def list_events(self, table_id: str | None = None) -> list[dict[str, Any]]:
        prefix = f"{self.prefix}/events/" + (f"{table_id}/" if table_id else "")
        values = self._call("an event listing", lambda c: list(c.get_prefix(prefix, sort_order="ascend")))
        events = []
        for value, meta in values:
            try:
                events.append(_object(value, meta.key.decode(errors="replace")))
            except CorruptMetadataError as exc:  # events only feed metrics: skip a damaged one, say so
                logger.warning("skipping an unreadable event: %s", exc)
        return events


__all__: Sequence[str] = [
    "CasResult",
    "CommitAnswerLost",
    "Coordinator",
    "HeadState",
    "RawKey",
    "WatchCompacted",
    "WatchLost",
]
