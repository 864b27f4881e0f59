"""A connection to etcd: the client, its TLS and credentials, and the one way requests are sent.

Every request has a deadline. A connection failure is retried until `unavailable_timeout_seconds` runs
out and then raises CoordinatorUnavailable; anything etcd says about the request itself (no space, no
permission, bad credentials) is final and raised at once, in words failures.py chooses. The commit
transaction is the one request never sent this way (tables.py): its answer may be lost after it applied.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc
import pyetcd
from pyetcd import exceptions as etcd_exceptions
from pyetcd.client import KVMetadata

from acidtables.core.coordination import certificates, failures
from acidtables.core.coordination.keys import KeyLayout
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer
from acidtables.core.errors import CatalogClosedError, ConfigurationError, CoordinatorUnavailable
from acidtables.core.settings import EtcdSettings

logger = logging.getLogger(__name__)

#: keys per page of a range read: an answer of ordinary log entries stays far below gRPC's 4 MiB limit
#: on one message; a page of unusually large entries is halved until it fits
RANGE_PAGE_KEYS = 1000
#: seconds a client skips an etcd member after a request to it failed, when it knows others
MEMBER_RETRY_SECONDS = 2.0

T = TypeVar("T")


class Connection:
    """The client of one catalog's etcd, shared by every concern of the coordinator. Thread-safe."""

    def __init__(self, settings: EtcdSettings, *, timer: Timer = SYSTEM_TIMER) -> None:
        self.settings = settings
        self.timer = timer
        self.prefix = settings.prefix
        self.keys = KeyLayout(settings.prefix)
        # re-entrant: granting the process lease goes through `client`, which takes the lock too
        self._lock = threading.RLock()
        self._client: pyetcd.MultiEndpointEtcd3Client | None = None
        self._closed = threading.Event()
        #: keys per range page; halves (for good) when a page of large entries overflows an answer
        self._page_keys = RANGE_PAGE_KEYS

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

    def _certificate_refusals(self) -> str:
        """gRPC says only CERTIFICATE_VERIFY_FAILED; Python's TLS names the check that failed. Empty when
        it accepts every member's certificate (or reaches none), so the general advice stands."""
        s = self.settings
        if not s.secure or s.ca_file is None:
            return ""
        found = []
        for url in s.endpoints:
            reason = certificates.refusal(
                url, s.ca_file, cert_file=s.cert_file, key_file=s.key_file, timeout_seconds=s.request_timeout_seconds
            )
            if reason is not None:
                found.append(
                    f"the certificate {url} presents is refused against ACIDTABLES_ETCD_CA_FILE={s.ca_file}: {reason}"
                )
        return "; ".join(found)

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
                if self._closed.is_set():
                    # a channel opened after close() would outlive it, and one still open when the
                    # interpreter exits can abort the process in gRPC's native threads
                    raise CatalogClosedError(
                        f"the catalog's connection to etcd at {', '.join(self.settings.endpoints)} was closed; "
                        "open a new catalog"
                    )
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
                if code not in failures.RETRYABLE_CODES:
                    raise failures.refused(self.settings, what, exc, cluster_wide=cluster_wide) from exc
                error: BaseException = exc
            except failures.CONNECTION_ERRORS as exc:
                error = exc
            except ValueError as exc:
                if not failures.closed_channel(exc):
                    raise
                error = exc
            tls = failures.tls_failure(error)
            tls_failures = tls_failures + 1 if tls is not None else 0
            if tls is not None and tls_failures >= 2:
                # a handshake that failed twice in a row fails for good (an etcd still starting answers
                # "connection refused", not a TLS error): say why now instead of waiting out the deadline
                raise ConfigurationError(
                    f"TLS with etcd at {', '.join(self.settings.endpoints)} failed during {what}: {tls}. "
                    + (self._certificate_refusals() or failures.tls_advice(self.settings, tls))
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

    @property
    def closed(self) -> bool:
        """True once close() was called: this client makes no more requests (the operator's liveness)."""
        return self._closed.is_set()

    def ping(self) -> None:
        self._call("a status request", lambda c: c.status())
