"""What etcd's and gRPC's failures mean, and the errors users get for them.

Two questions are asked of every failed request: may it be sent again (a connection that failed says
nothing about the request), and if not, what should the user do about it (a full database, a missing
role, a TLS mismatch, bad credentials). The answers name the endpoints, the user and the prefix, so
whoever reads them knows what to fix without reading this code.
"""

from __future__ import annotations

import grpc
from pyetcd import exceptions as etcd_exceptions

from acidtables.core.errors import (
    AcidTablesError,
    ConfigurationError,
    CoordinatorFull,
    CoordinatorPermissionDenied,
    CoordinatorRefused,
)
from acidtables.core.settings import EtcdSettings


class CommitAnswerLost(AcidTablesError):
    """The commit transaction was sent and no answer came back; it may have applied."""


#: pyetcd's errors for a connection that failed: the request may be sent again
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    etcd_exceptions.ConnectionFailedError,
    etcd_exceptions.ConnectionTimeoutError,
    etcd_exceptions.NoServerAvailableError,
    etcd_exceptions.InternalServerError,
)

#: gRPC answers that say nothing about the request itself: try again (CANCELLED: the call's channel
#: was closed under it)
RETRYABLE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)

#: what etcd answers every write with once its database reached its quota (the NOSPACE alarm)
_NO_SPACE = "database space exceeded"

_TLS_WORDS = ("ssl", "tls", "handshake", "certificate", "wrong version number")


def closed_channel(exc: BaseException) -> bool:
    """grpc's "Cannot invoke RPC on closed channel!" (a ValueError): a client let go of while this call
    was picking it up; the next attempt takes the new one."""
    text = str(exc).lower()
    return isinstance(exc, ValueError) and ("closed channel" in text or "channel closed" in text)


def no_space(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and _NO_SPACE in (exc.details() or "")


def over_limits(exc: BaseException) -> bool:
    """etcd's refusal of a transaction with more operations than its --max-txn-ops ("too many operations
    in txn request") or larger than its --max-request-bytes ("request is too large"): checked before
    anything is applied, so a definite answer."""
    if not isinstance(exc, grpc.RpcError):
        return False
    details = (exc.details() or "").lower()
    return "too many operations" in details or "request is too large" in details


def over_limits_error(settings: EtcdSettings, what: str, exc: grpc.RpcError) -> CoordinatorRefused:
    return CoordinatorRefused(
        f"etcd at {', '.join(settings.endpoints)} refused {what}: {exc.details()}. Nothing was committed. etcd "
        "bounds one transaction's operations (--max-txn-ops) and size (--max-request-bytes); acidtables assumes "
        f"etcd's --max-txn-ops is {settings.max_txn_ops} (ACIDTABLES_ETCD_MAX_TXN_OPS={settings.max_txn_ops}): set it "
        "to etcd's value, or raise etcd's (docs/transactions.md#limits)"
    )


def permission_denied(exc: BaseException) -> bool:
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


def tls_failure(exc: BaseException) -> str | None:
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


def tls_advice(settings: EtcdSettings, failure: str) -> str:
    """What to check after a TLS handshake failed for good."""
    s = settings
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


def full(settings: EtcdSettings, what: str) -> CoordinatorFull:
    return CoordinatorFull(
        f"etcd at {', '.join(settings.endpoints)} is full: its database reached its quota "
        f"(--quota-backend-bytes; the NOSPACE alarm is raised), so it refuses {what} and every other write, of "
        "every table. Nothing was committed; reads keep working and nothing committed is lost. To free space: "
        "`acidtables etcd-usage` shows what each table holds and the quota; `acidtables expire TABLE` moves old "
        "log entries out of etcd; then compact etcd's history, defragment every member and disarm the alarm "
        "(etcdctl compact, etcdctl defrag, etcdctl alarm disarm)"
    )


def refused(settings: EtcdSettings, what: str, exc: grpc.RpcError, *, cluster_wide: bool = False) -> AcidTablesError:
    """The error for a final refusal of `what`. `cluster_wide`: the request acts beyond the prefix
    (compaction, alarms), so a permission refusal says it needs the root role."""
    if no_space(exc):
        return full(settings, what)
    details = exc.details() or str(exc.code())
    if permission_denied(exc):
        return _denied(settings, what, details, cluster_wide=cluster_wide)
    if exc.code() is grpc.StatusCode.UNAUTHENTICATED or "user name" in details or "auth" in details.lower():
        return ConfigurationError(
            f"etcd refused {what}: {details}. Check ACIDTABLES_ETCD_USER and ACIDTABLES_ETCD_PASSWORD "
            "(an etcd with authentication enabled needs both)."
        )
    return CoordinatorRefused(f"etcd refused {what}: {details}")


def _denied(settings: EtcdSettings, what: str, details: str, *, cluster_wide: bool) -> CoordinatorPermissionDenied:
    """Whom etcd refused and where: the user and the prefix, so an operator knows which role to fix."""
    s = settings
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
