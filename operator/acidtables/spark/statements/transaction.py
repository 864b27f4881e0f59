"""`BEGIN` ... `COMMIT` / `ROLLBACK` in `sql()`: several write statements committed together (issue 44).

A transaction belongs to the SparkSession, as the catalog `use_catalog` gives it does: `BEGIN` (`BEGIN
TRANSACTION`, `BEGIN WORK`, `START TRANSACTION`) opens one on the session's catalog (or `catalog=`'s);
each INSERT, UPDATE, DELETE, MERGE or TRUNCATE TABLE on an acidtables table then runs as with
`commit=False` and joins one MultiTableTransaction (`Prepared.join`), and `COMMIT` commits every table
in one etcd transaction, or none (`ROLLBACK` aborts them all). Queries run as they do outside.

What is refused, each naming the problem: any other statement (DDL, OPTIMIZE, RESTORE, SET, ...: as
Databricks, only SELECT and the writes run in a transaction); a write into a table that is not an
acidtables table (Spark would write it at once); a second write to a table the transaction already
writes (core takes one part per table) and a read of it (it would not see the transaction's own
writes); `BEGIN` inside an open transaction; `COMMIT` or `ROLLBACK` with none open.

Reads are repeatable: every statement reads a table at the version the transaction first read it at. A
write of a table an earlier statement read, after another job committed to it since, fails with
ConcurrentModificationException (naming that commit): it would act on rows the transaction never read,
as a DELETE of a staging table whose rows an INSERT ... SELECT copied would delete rows appended since
without copying them. Any statement that
fails inside a transaction aborts it, as Databricks does: its staged writes are deleted at once, the
error says so, and the session runs nothing but `ROLLBACK` until it is ended.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import SparkSession
from sqlglot import exp

from acidtables.core import (
    AcidTablesError,
    Catalog,
    CommitInfo,
    ConcurrentModificationException,
    InvalidArgumentError,
    MultiTableTransaction,
    Snapshot,
)
from acidtables.errors import TransactionClosedError

from ..prepared import Prepared
from .clauses import spark_sql
from .dialect import parse_statement
from .references import Tables

BEGIN, COMMIT, ROLLBACK = "BEGIN", "COMMIT", "ROLLBACK"
#: the statements that change a table inside a transaction (each joins it as one part)
WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.TruncateTable)
_WRITE_NAMES: dict[type[exp.Expr], str] = {
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.TruncateTable: "TRUNCATE TABLE",
}
#: sqlglot's Spark dialect reads `START TRANSACTION` as a column alias
_START = re.compile(r"^\s*START\s+TRANSACTION\s*;?\s*$", re.IGNORECASE)
_SUPPORTED = (
    "inside a transaction sql() runs queries and INSERT, UPDATE, DELETE, MERGE and TRUNCATE TABLE on "
    "acidtables tables, then COMMIT or ROLLBACK"
)


def parse(statement: str) -> exp.Expr:
    """`parse_statement`, plus `START TRANSACTION`."""
    if isinstance(statement, str) and _START.match(statement):
        return exp.Transaction()
    return parse_statement(statement)


def control(tree: exp.Expr, statement: str) -> str | None:
    """BEGIN, COMMIT or ROLLBACK for a transaction statement, else None. Isolation modes, `AND CHAIN`
    and savepoints are refused by name (each table's own isolation level applies)."""
    text = statement.strip().rstrip(";").strip()
    if isinstance(tree, exp.Transaction):
        if tree.args.get("this") is not None or tree.args.get("modes"):
            raise InvalidArgumentError(
                f"sql(): {text!r}: transaction modes are not supported (each table keeps its own isolation level); "
                "write BEGIN [TRANSACTION]"
            )
        return BEGIN
    if isinstance(tree, exp.Commit):
        if tree.args.get("chain"):
            raise InvalidArgumentError(f"sql(): {text!r}: AND CHAIN is not supported; write COMMIT, then BEGIN")
        return COMMIT
    if isinstance(tree, exp.Rollback):
        if tree.args.get("savepoint") is not None:
            raise InvalidArgumentError(f"sql(): {text!r}: savepoints are not supported; ROLLBACK aborts it all")
        return ROLLBACK
    return None


def write_target(tree: exp.Expr) -> exp.Expr | None:
    """The table node a write statement writes (as statements._write finds it)."""
    if isinstance(tree, exp.TruncateTable):
        return tree.expressions[0] if tree.expressions else None
    node: exp.Expr | None = tree.this
    return node.this if isinstance(node, exp.Schema) else node


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


@dataclass
class SqlTransaction:
    """The transaction a session's `BEGIN` opened: its catalog, the multi-table transaction its writes
    join, and the Prepared job of each table written, by table name."""

    catalog: Catalog
    group: MultiTableTransaction
    prepared: dict[str, Prepared] = field(default_factory=dict)
    #: the snapshot each table was first read at by a statement of this transaction, by table id
    read_at: dict[str, Snapshot] = field(default_factory=dict)
    #: why it was aborted (the first line of the error), while the session waits for ROLLBACK
    failure: str | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def id(self) -> str:
        return self.group.id

    def _tables(self) -> str:
        return f" on {', '.join(self.prepared)}" if self.prepared else ""

    def check(self, tables: Tables, tree: exp.Expr, statement: str) -> None:
        """Refuse, before anything runs, what a transaction does not run (module docstring)."""
        shown = statement.strip().rstrip(";").strip()
        tables.fixed = self.read_at
        target = write_target(tree) if isinstance(tree, WRITES) else None
        if isinstance(tree, WRITES):
            table = tables.resolve(target) if isinstance(target, exp.Table) else None
            if table is None:
                raise InvalidArgumentError(
                    f"sql(): {shown!r} inside transaction {self.id}: "
                    f"{spark_sql(target) if target is not None else 'its target'} is not an acidtables table, so "
                    f"the write could not be rolled back; {_SUPPORTED}"
                )
            if table.name in self.prepared:
                raise InvalidArgumentError(
                    f"sql(): {shown!r}: transaction {self.id} already writes {table.name} "
                    f"({self.prepared[table.name].transaction.operation.display}); a transaction writes each table "
                    "once (one statement per table: MERGE can insert, update and delete together), or COMMIT "
                    "first"
                )
            self.refuse_if_moved(table.name, table.table_id, table.version, _WRITE_NAMES[type(tree)])
        elif not isinstance(tree, exp.Query):
            raise InvalidArgumentError(
                f"sql(): {shown[:80]!r} is not supported inside transaction {self.id}: {_SUPPORTED}"
            )
        for node in tree.find_all(exp.Table):
            if node is target or not node.name:
                continue
            read = tables.resolve(node)
            if read is not None and read.name in self.prepared:
                raise InvalidArgumentError(
                    f"sql(): {shown!r} reads {read.name}, which transaction {self.id} already writes; a read "
                    "would not see the transaction's own uncommitted write. Read it before writing it, or "
                    "COMMIT first"
                )

    def refuse_if_moved(self, name: str, table_id: str, version: int, operation: str) -> None:
        """`operation` would write table `name` at `version`: refused when an earlier statement of this
        transaction read it at an older one (another job committed since)."""
        read = self.read_at.get(table_id)
        if read is None or read.version == version:
            return
        winner = self.catalog.table(name).commits(read.version + 1, read.version + 1)[0]
        raise ConcurrentModificationException(
            table=name,
            operation=operation,
            read_version=read.version,
            winning_version=winner.version,
            winning_operation=winner.operation.display,
            detail=(
                f"transaction {self.id} read {name} at version {read.version} in an earlier statement; this "
                f"{operation} would act on rows it did not read"
            ),
        )

    def joined(self, result: Any) -> Any:
        """A write's Prepared becomes a part of the transaction (refused, once joined so the abort deletes
        its staged files, when it began after a commit the transaction's earlier reads did not see)."""
        if not isinstance(result, Prepared):
            return result  # a query's DataFrame
        result.join(self.group)
        part = result.transaction
        self.prepared[part.table_name] = result
        self.refuse_if_moved(part.table_name, part.metadata.table_id, part.read_version, part.operation.display)
        return result

    def commit(self) -> dict[str, CommitInfo]:
        """Every table's commit, with what its statement counted (metrics), by table name."""
        infos = self.group.commit()
        return {
            name: replace(info, metrics=dict(self.prepared[name].metrics))
            if name in self.prepared and self.prepared[name].metrics
            else info
            for name, info in infos.items()
        }

    def fail(self, exc: BaseException) -> None:
        """A statement failed: abort everything, keep the reason, and say so in the error."""
        tables = self._tables()
        self.group.abort()
        self.failure = _first_line(exc)
        said = (
            f"(Transaction {self.id} is aborted because of this error: nothing of it was committed and its staged "
            f"writes{tables} are deleted; run ROLLBACK to end it.)"
        )
        if isinstance(exc, AcidTablesError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
            exc.args = (f"{exc.args[0]} {said}",)
        elif isinstance(exc, Exception):
            exc.add_note(f"sql(): {said}")

    def refuse_while_aborted(self, statement: str) -> TransactionClosedError:
        shown = statement.strip().rstrip(";").strip()
        return TransactionClosedError(
            f"sql(): {shown[:80]!r} not run: transaction {self.id} was aborted by an earlier error "
            f"({self.failure}); nothing of it was committed. Run ROLLBACK to end it; until then this session "
            "runs no other statement"
        )


#: each session's open (or aborted, awaiting ROLLBACK) transaction
_open: weakref.WeakKeyDictionary[SparkSession, SqlTransaction] = weakref.WeakKeyDictionary()
_opening = threading.Lock()


def current(spark: SparkSession) -> SqlTransaction | None:
    """The session's transaction, if `BEGIN` opened one that has not ended."""
    with _opening:
        return _open.get(spark)


def _end(spark: SparkSession, transaction: SqlTransaction) -> None:
    with _opening:
        if _open.get(spark) is transaction:
            del _open[spark]


def outside(spark: SparkSession, kind: str, catalog_of: Callable[[], Catalog]) -> None:
    """BEGIN, COMMIT or ROLLBACK with no transaction open in the session; `catalog_of` gives the catalog
    BEGIN opens it on."""
    if kind != BEGIN:
        raise InvalidArgumentError(f"sql(): {kind}: no transaction is open in this session (BEGIN opens one)")
    catalog = catalog_of()
    with _opening:
        if spark in _open:  # another thread of this session began one meanwhile
            raise InvalidArgumentError(
                f"sql(): BEGIN: transaction {_open[spark].id} is already open in this session; nested "
                "transactions are not supported: COMMIT or ROLLBACK it first"
            )
        _open[spark] = SqlTransaction(catalog, catalog.transaction())


def inside(
    spark: SparkSession,
    transaction: SqlTransaction,
    statement: str,
    *,
    catalog: Catalog | None,
    commit: bool,
    run: Callable[[Catalog, exp.Expr, Callable[[Tables, exp.Expr], None]], Any],
) -> Any:
    """One statement while `transaction` is the session's: `run(catalog, tree, check)` runs a statement
    that may run in it, with commit=False, calling `check` once its tables are resolved."""
    with transaction.lock:
        if transaction.failure is None and transaction.group.state != "open":
            # its group ended behind sql()'s back (a returned Prepared's abort() aborts it all)
            transaction.failure = f"multi-table transaction {transaction.id} is {transaction.group.state}"
        if transaction.failure is not None:
            try:
                kind = control(parse(statement), statement)
            except AcidTablesError:
                kind = None
            if kind == ROLLBACK:
                _end(spark, transaction)
                return None
            raise transaction.refuse_while_aborted(statement)
        try:
            tree = parse(statement)
            kind = control(tree, statement)
        except BaseException as exc:
            transaction.fail(exc)
            raise
        if kind == COMMIT:
            _end(spark, transaction)  # COMMIT ends it whatever the outcome (a failed one commits nothing)
            return transaction.commit()
        if kind == ROLLBACK:
            _end(spark, transaction)
            transaction.group.abort()
            return None
        try:
            if kind == BEGIN:
                raise InvalidArgumentError(
                    f"sql(): BEGIN: transaction {transaction.id} is already open in this session; nested "
                    "transactions are not supported: COMMIT or ROLLBACK it first"
                )
            if not commit:
                raise InvalidArgumentError(
                    f"sql(): commit=False inside transaction {transaction.id}: its writes commit at COMMIT"
                )
            if catalog is not None and catalog is not transaction.catalog:
                raise InvalidArgumentError(
                    f"sql(): catalog= names another catalog than transaction {transaction.id} was begun on; "
                    "a transaction commits through one catalog"
                )

            def check(tables: Tables, tree: exp.Expr) -> None:
                transaction.check(tables, tree, statement)

            return transaction.joined(run(transaction.catalog, tree, check))
        except BaseException as exc:
            transaction.fail(exc)
            raise


def abandon(spark: SparkSession) -> None:
    """Abort and forget the session's transaction, if any (what ROLLBACK does; for a session being
    stopped, or a test cleaning up after itself)."""
    transaction = current(spark)
    if transaction is not None:
        _end(spark, transaction)
        transaction.group.abort()


__all__ = [
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SqlTransaction",
    "abandon",
    "control",
    "current",
    "inside",
    "outside",
    "parse",
]
