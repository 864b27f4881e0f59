"""Multi-table transactions and reads of several tables at one instant (issue 44).

`Catalog.transaction()` gives a MultiTableTransaction: one ordinary Transaction per table (each with its
own operation, staged files, reads and application ids), committed together by one etcd transaction
that compares every table's head and writes every new version (commit/multi_commit.py), or aborted
together. `Catalog.snapshots()` pins several tables at the versions current at one etcd revision.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType

from acidtables.core.catalog.table import Table
from acidtables.core.commit.multi_commit import GroupCommit, max_tables
from acidtables.core.commit.transaction import Transaction
from acidtables.core.errors import CommitOutcomeUnknown, InvalidArgumentError, TransactionClosedError
from acidtables.core.log.operations import Operation
from acidtables.core.log.records import CommitInfo
from acidtables.core.log.services import Services

logger = logging.getLogger(__name__)


def new_multi_txn_id() -> str:
    """An id the parts of one multi-table transaction share in their tables' histories."""
    return f"mtx-{uuid.uuid4().hex}"


class MultiTableTransaction:
    """Several tables changed together: all of them or none.

    `begin(table, operation)` gives each table's ordinary Transaction (stage files, `add_files`, `scan`,
    `set_app_transaction` as for one table); `commit()` commits every part in one etcd transaction and
    returns each table's CommitInfo; `abort()` (or an exception leaving the `with` block) deletes every
    part's staged files and commits nothing. Each table's own conflict policy judges its part against
    what won on that table; a part that must fail fails the whole with its table's named exception.
    """

    def __init__(self, services: Services, open_table: Callable[[str], Table]) -> None:
        self._services = services
        self._open_table = open_table
        self.id = new_multi_txn_id()
        self._parts: dict[str, Transaction] = {}
        self._state = "open"
        self._infos: dict[str, CommitInfo] | None = None

    @property
    def max_tables(self) -> int:
        """The most tables one multi-table transaction holds (etcd's --max-txn-ops, docs/transactions.md)."""
        return max_tables(self._services.settings.etcd)

    @property
    def parts(self) -> Mapping[str, Transaction]:
        """Each table's transaction, by table name, in the order they were begun."""
        return dict(self._parts)

    @property
    def committed(self) -> Mapping[str, CommitInfo]:
        """Each table's CommitInfo once committed (what commit() returned; also after a with block),
        else empty."""
        return dict(self._infos or {})

    @property
    def state(self) -> str:
        """ "open", "committed", "aborted", or "of unknown outcome" (CommitOutcomeUnknown)."""
        return self._state

    def _check_open(self, method: str) -> None:
        if self._state != "open":
            raise TransactionClosedError(f"{method}(): multi-table transaction {self.id} is already {self._state}")

    def begin(
        self,
        table: str | Table,
        operation: str | Operation,
        *,
        user_metadata: Mapping[str, str] | None = None,
    ) -> Transaction:
        """Begin this transaction's part on `table` (a name or a Table): an ordinary Transaction pinned to
        the table's current version, committed only together with the other parts. One part per table;
        at most `max_tables` parts, checked before anything is staged."""
        self._check_open("begin")
        self._check_room("begin")
        opened = table if isinstance(table, Table) else self._open_table(table)
        self._check_new_table("begin", opened.name)
        return self.add(opened.begin(operation, user_metadata=user_metadata))

    def add(self, part: Transaction) -> Transaction:
        """Make a transaction already begun (on a table of this catalog, nothing committed) one part of
        this one: what SparkTable's `commit=False` operations hand back (`Prepared.transaction`)."""
        self._check_open("add")
        if not isinstance(part, Transaction):
            raise InvalidArgumentError(f"add(): expected a Transaction, found {type(part).__name__}")
        if part.closed:
            raise TransactionClosedError(f"add(): {part!r} is already committed or aborted")
        if part.services is not self._services:
            raise InvalidArgumentError(
                f"add(): {part!r} was begun through another Catalog; a multi-table transaction commits through one"
            )
        self._check_room("add")
        self._check_new_table("add", part.table_name)
        part.join_group(self)
        self._parts[part.table_name] = part
        return part

    def _check_room(self, method: str) -> None:
        if len(self._parts) >= self.max_tables:
            raise InvalidArgumentError(
                f"{method}(): multi-table transaction {self.id} already holds {len(self._parts)} tables, the most "
                f"one etcd transaction always fits (--max-txn-ops={self._services.settings.etcd.max_txn_ops} allows "
                f"{self.max_tables}: ACIDTABLES_ETCD_MAX_TXN_OPS, docs/transactions.md#limits). Nothing was staged "
                "for this table; commit these tables first, or raise etcd's --max-txn-ops and the setting together"
            )

    def _check_new_table(self, method: str, name: str) -> None:
        if name in self._parts:
            raise InvalidArgumentError(
                f"{method}(): multi-table transaction {self.id} already has a part on {name}; one transaction per "
                "table (do every change of that table in it)"
            )

    def commit(self) -> dict[str, CommitInfo]:
        """Commit every part in one etcd transaction, or none: each table's CommitInfo by name. Raises
        the failing part's ConcurrentModificationException (naming this transaction; nothing was
        committed anywhere), CommitRetriesExhausted, CoordinatorUnavailable or CommitOutcomeUnknown.
        A part that changes nothing (an UPDATE matching no row at Serializable) or whose application id
        its table already has is skipped, as alone."""
        self._check_open("commit")
        names = list(self._parts)
        if not names:
            self._state = "committed"
            self._infos = {}
            return {}
        try:
            tables = tuple(names)
            pending = [self._parts[name].pending_commit(self.id, tables) for name in names]
            group = GroupCommit(self._services, pending, multi_txn_id=self.id)
        except BaseException:
            self.abort()  # a part's staged file went missing: that part is closed, the rest aborted
            raise
        try:
            infos = group.run()
        except BaseException as exc:
            self._ended_without_answer(group, exc)
            raise
        self._state = "committed"
        self._infos = dict(zip(names, infos, strict=True))
        for name, info in self._infos.items():
            self._parts[name].ended(info)
        return dict(self._infos)

    def _ended_without_answer(self, group: GroupCommit, exc: BaseException) -> None:
        """commit() raised `exc`. Nothing landed (a conflict, a refusal, an error before the request went
        out): the committer gave the parts up; make sure of it, quietly (the conflict and aborts were
        reported once). But a request was sent and may have been applied (CommitOutcomeUnknown, or an
        interrupt such as KeyboardInterrupt while the answer was awaited or being handled): every part or
        none landed, and the staged files stay for whichever it is; cleanup checks the log before it
        deletes them."""
        if group.landed:
            self._state = "committed"  # interrupted after the commit point; the CommitInfos are lost
        elif isinstance(exc, CommitOutcomeUnknown) or group.may_have_landed:
            self._state = "of unknown outcome"
        else:
            self._state = "aborted"
            for part in self._parts.values():
                part.end_uncommitted()
        for part in self._parts.values():
            part.ended(None)

    def abort(self) -> None:
        """Give up every part: nothing becomes visible and every staged file is deleted. Idempotent."""
        if self._state != "open":
            return
        self._state = "aborted"
        failed: BaseException | None = None
        for part in self._parts.values():  # every part, even when one fails to
            try:
                part.abort_alone()
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def __enter__(self) -> MultiTableTransaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif self._state == "open":
            self.commit()

    def __repr__(self) -> str:
        return f"MultiTableTransaction({self.id}, tables={list(self._parts)}, {self._state})"


__all__ = ["MultiTableTransaction", "new_multi_txn_id"]
