"""`acidtables.spark.sql(spark, statement)`: one SQL statement over acidtables tables.

Each statement acidtables runs maps onto the one SparkTable or Catalog call that does the same thing, so
its commit, history entry and conflicts are the API's; see docs/sql.md. A statement that names no
acidtables table goes to `spark.sql` unchanged, and one that only reads acidtables tables (a query, or a
write into a Spark table) runs in Spark over pinned snapshots of them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from acidtables.core import AcidTablesError, Catalog, InvalidArgumentError, Table, TableNotFoundError

from ..datasource import session_catalog
from ..prepared import Prepared
from ..reads import history
from ..table import SparkTable
from . import ddl, describe, transaction, writes
from .clauses import column_path, refuse_other_parts, refuse_table_parts, spark_sql
from .dialect import Compact, Optimize, Restore, ShowTables
from .references import CATALOG_NAME, Tables, version_clause

#: how often a write whose source reads its own target is prepared again when a commit landed between
#: pinning the source's snapshot and starting the transaction (the source must read the version the
#: transaction starts from)
REPIN_ATTEMPTS = 5

_default_lock = threading.Lock()
_default_catalog: Catalog | None = None


def _catalog(spark: SparkSession, catalog: Catalog | None) -> Catalog:
    global _default_catalog
    if catalog is not None:
        if not isinstance(catalog, Catalog):
            raise InvalidArgumentError(f"sql(): catalog must be an acidtables Catalog, found {type(catalog).__name__}")
        return catalog
    carried = session_catalog(spark)
    if carried is not None:
        return carried
    with _default_lock:
        if _default_catalog is None:
            _default_catalog = Catalog.connect()
        return _default_catalog


def sql(spark: SparkSession, statement: str, *, catalog: Catalog | None = None, commit: bool = True) -> Any:
    """Run one statement. Queries, DESCRIBE and SHOW return a DataFrame; writes return the commit's
    CommitInfo (a list of them for a compaction, which commits group by group), or with `commit=False`
    the Prepared job, staged and not yet visible, exactly as the API's `commit=False`. CREATE TABLE
    returns the Table (PreparedCreate with commit=False), DROP TABLE its DropReport (None when nothing
    was dropped), ALTER TABLE ... ADD COLUMNS / SET TBLPROPERTIES its CommitInfo.

    `catalog` defaults to the session's (use_catalog, local_session(catalog=...)), else to
    `Catalog.connect()` (the ACIDTABLES_* environment), made once per process.

    `BEGIN` (`START TRANSACTION`) opens a transaction in this SparkSession: until `COMMIT` (which returns
    each table's CommitInfo by name) or `ROLLBACK`, every write joins it and commits with the others,
    or none does (statements.transaction says what runs in one and what is refused)."""
    if not isinstance(spark, SparkSession):
        raise InvalidArgumentError(f"sql(): expected a SparkSession, found {type(spark).__name__}")
    if not isinstance(commit, bool):
        raise InvalidArgumentError(f"sql(): commit must be True or False, found {commit!r}")
    open_transaction = transaction.current(spark)
    if open_transaction is not None:

        def run(cat: Catalog, tree: exp.Expr, check: Callable[[Tables, exp.Expr], None]) -> Any:
            return _statement(spark, cat, tree, statement, commit=False, check=check)

        return transaction.inside(spark, open_transaction, statement, catalog=catalog, commit=commit, run=run)
    tree = transaction.parse(statement)
    kind = transaction.control(tree, statement)
    if kind is not None:
        if not commit:
            raise InvalidArgumentError(f"sql(): {kind} takes no commit=False")
        transaction.outside(spark, kind, lambda: _catalog(spark, catalog))
        return None
    return _statement(spark, _catalog(spark, catalog), tree, statement, commit=commit)


def _statement(
    spark: SparkSession,
    cat: Catalog,
    tree: exp.Expr,
    statement: str,
    *,
    commit: bool,
    check: Callable[[Tables, exp.Expr], None] | None = None,
) -> Any:
    """Run one parsed statement; `check` (a transaction's) sees its tables, resolved, before it runs."""
    for _ in range(REPIN_ATTEMPTS):
        tables = Tables.of(spark, cat, tree)
        if check is not None:
            check(tables, tree)
        try:
            return _run(spark, cat, tables, tree, statement, commit=commit)
        except _Repin:
            continue
    raise AcidTablesError(
        f"sql(): {REPIN_ATTEMPTS} times a commit landed between reading the target in the statement's source "
        "and starting its transaction; run it again"
    )


class _Repin(AcidTablesError):
    """The source read an older version of the target than the transaction starts from."""


def _run(spark: SparkSession, catalog: Catalog, tables: Tables, tree: exp.Expr, statement: str, *, commit: bool) -> Any:
    if isinstance(tree, exp.Create):
        if ddl.is_acidtables_create(tree):
            return ddl.create(spark, catalog, tables, tree, commit=commit)
        return _elsewhere(spark, tables, tree, statement)
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind", "")).upper() == "TABLE":
        return _drop(spark, catalog, tables, tree, statement)
    if isinstance(tree, ShowTables):
        return _show_tables(spark, catalog, tree, statement)
    if isinstance(tree, Optimize):
        return _optimize(spark, tables, tree, commit=commit)
    if isinstance(tree, Restore):
        return _restore(spark, tables, tree, commit=commit)
    if isinstance(tree, exp.Describe) and str(tree.args.get("kind") or "TABLE").upper() == "TABLE":
        described = tables.resolve(tree.this) if isinstance(tree.this, exp.Table) else None
        if described is None:
            return _elsewhere(spark, tables, tree, statement)
        refuse_table_parts(tree.this, "DESCRIBE")
        if tree.args.get("partition") is not None:
            raise InvalidArgumentError("sql(): DESCRIBE ... PARTITION is not supported for acidtables tables")
        refuse_other_parts(tree, ("this", "style", "kind"), "DESCRIBE")
        style = str(tree.args.get("style") or "").upper()
        if style == "HISTORY":
            return history(spark, described)
        if style == "DETAIL":
            return describe.describe_detail(spark, described)
        return describe.describe_columns(spark, described)
    if isinstance(tree, exp.Alter) and str(tree.args.get("kind") or "").upper() == "TABLE":
        altered = tables.resolve(tree.this)
        if altered is None:
            return _elsewhere(spark, tables, tree, statement)
        refuse_other_parts(tree, ("this", "kind", "actions"), "ALTER TABLE")
        actions = tree.args.get("actions") or []
        if len(actions) == 1 and isinstance(actions[0], Compact):
            refuse_table_parts(tree.this, "ALTER TABLE ... COMPACT", partition=True)
            return _compact(spark, altered, tree, actions[0], commit=commit)
        if tree.this.args.get("partition") is not None:
            raise InvalidArgumentError("sql(): ALTER TABLE ... PARTITION (...) takes COMPACT MINOR | MAJOR only")
        refuse_table_parts(tree.this, "ALTER TABLE")
        return ddl.alter(catalog, altered.name, actions)
    if isinstance(tree, exp.Insert | exp.Update | exp.Delete | exp.Merge | exp.TruncateTable):
        return _write(spark, tables, tree, statement, commit=commit)
    if isinstance(tree, exp.Query):
        if _reads_acidtables(tables, tree):
            return tables.query(tree)
        return spark.sql(statement)
    return _elsewhere(spark, tables, tree, statement)


def _reads_acidtables(tables: Tables, tree: exp.Expr) -> bool:
    return any(tables.resolve(t) is not None for t in tree.find_all(exp.Table) if t.name)


#: statement kinds whose names are namespaces or functions (sqlglot parses them as tables)
_NOT_TABLES = frozenset({"DATABASE", "SCHEMA", "NAMESPACE", "FUNCTION", "CATALOG", "MACRO"})
#: dotted names in a statement sqlglot keeps as opaque text (SHOW TBLPROPERTIES t, EXPLAIN ..., MSCK ...)
_DOTTED_NAME = re.compile(r"`?([A-Za-z_][\w]*)`?\.`?([A-Za-z_][\w]*)`?")


def _elsewhere(spark: SparkSession, tables: Tables, tree: exp.Expr, statement: str) -> DataFrame:
    """A statement Spark runs: unchanged when it names no acidtables table; over pinned snapshots when
    it is a query or an insert into something else that reads them (INSERT INTO a Spark table SELECT ...
    FROM an acidtables table, INSERT OVERWRITE DIRECTORY). Anything else that names an acidtables table
    is refused: Spark would not find the table, or would keep a name that outlives its pinned snapshot
    (CREATE VIEW; use `sql(...)`'s DataFrame and createOrReplaceTempView instead)."""
    kind = str(tree.args.get("kind") or "").upper()
    if isinstance(tree, exp.Use) or kind in _NOT_TABLES:
        return spark.sql(statement)  # names a namespace or a function, never a table
    named = _reads_acidtables(tables, tree)
    if isinstance(tree, exp.Command):
        text = spark_sql(tree)
        named = any(tables.resolve(exp.table_(t, db=d)) is not None for d, t in _DOTTED_NAME.findall(text))
    if not named:
        return spark.sql(statement)
    ctas = isinstance(tree, exp.Create) and kind == "TABLE" and tree.expression is not None
    if isinstance(tree, exp.Query | exp.Insert) or ctas:  # these keep data, not the statement's text
        return tables.query(tree)
    raise InvalidArgumentError(
        f"sql(): {statement.strip()!r} names an acidtables table but is not a statement acidtables runs "
        "(see docs/sql.md for the ones it does; a view over a table: "
        "sql(spark, 'SELECT ...').createOrReplaceTempView(name))"
    )


def _drop(spark: SparkSession, catalog: Catalog, tables: Tables, tree: exp.Drop, statement: str) -> Any:
    nodes = tree.args.get("tables") or []
    try:
        named = [tables.resolve(n) for n in nodes]
    except TableNotFoundError:
        if tree.args.get("exists"):
            return None
        raise
    if not any(named):
        return _elsewhere(spark, tables, tree, statement)
    if len(nodes) != 1:
        raise InvalidArgumentError("sql(): DROP TABLE: drop one acidtables table at a time")
    refuse_other_parts(tree, ("tables", "kind", "exists", "purge"), "DROP TABLE")
    return ddl.drop(catalog, tables, tree)


def _show_tables(spark: SparkSession, catalog: Catalog, tree: ShowTables, statement: str) -> DataFrame:
    namespace = None
    if tree.this is not None:
        parts = [p.name for p in tree.this.parts]
        if len(parts) == 2 and parts[0].lower() == CATALOG_NAME:
            parts = parts[1:]
        if len(parts) != 1:
            return spark.sql(statement)  # another catalog's namespace
        namespace = parts[0]
    like = tree.args["like"].name if tree.args.get("like") is not None else None
    return describe.show_tables(spark, catalog, namespace, like)


def _optimize(spark: SparkSession, tables: Tables, tree: Optimize, *, commit: bool) -> Any:
    table = tables.require(tree.this, "OPTIMIZE")
    refuse_table_parts(tree.this, "OPTIMIZE")
    where = tree.args.get("where")
    condition = spark_sql(where.this) if where is not None else None
    zorder = tree.args.get("zorder")
    target = SparkTable(spark, table)
    if zorder is None:
        return target.compact("minor", where=condition, commit=commit)
    columns = []
    for column in zorder.expressions:
        if not isinstance(column, exp.Column) or len(column_path(column)) != 1:
            raise InvalidArgumentError(
                f"sql(): OPTIMIZE ... ZORDER BY {spark_sql(column)}: name columns of {table.name} (no struct fields)"
            )
        columns.append(column.name)
    return target.cluster(columns, where=condition, commit=commit)


def _restore(spark: SparkSession, tables: Tables, tree: Restore, *, commit: bool) -> Any:
    table = tables.require(tree.this, "RESTORE")
    refuse_table_parts(tree.this, "RESTORE")
    if not commit:
        raise InvalidArgumentError("sql(): RESTORE commits at once (Table.restore); commit=False is not supported")
    kind, value = version_clause(spark, tree.args["version"])
    return table.restore(version=int(value)) if kind == "VERSION" else table.restore(timestamp=value)


def _compact(spark: SparkSession, table: Table, tree: exp.Alter, action: Compact, *, commit: bool) -> Any:
    kind = action.this.name.lower() if action.this is not None else ""
    if kind not in ("minor", "major"):
        raise InvalidArgumentError(
            f"sql(): ALTER TABLE ... COMPACT {kind.upper() or '(nothing)'}: use COMPACT MINOR or COMPACT MAJOR"
        )
    static, dynamic = writes.partition_spec(tree.this.args.get("partition"), table.metadata, "ALTER TABLE ... COMPACT")
    if dynamic:
        raise InvalidArgumentError(f"sql(): ALTER TABLE ... PARTITION ... COMPACT: give {', '.join(dynamic)} a value")
    return SparkTable(spark, table).compact(kind, where=writes.partition_predicate(static), commit=commit)


def _write(spark: SparkSession, tables: Tables, tree: exp.Expr, statement: str, *, commit: bool) -> Any:
    node = tree.expressions[0] if isinstance(tree, exp.TruncateTable) else tree.this
    if isinstance(node, exp.Schema):
        node = node.this
    table = tables.resolve(node) if isinstance(node, exp.Table) else None
    if table is None:
        return _elsewhere(spark, tables, tree, statement)
    target = SparkTable(spark, table)
    prepared: Prepared
    if isinstance(tree, exp.Insert):
        prepared = writes.insert(target, tables, tree, commit=False)
    elif isinstance(tree, exp.TruncateTable):
        if len(tree.expressions) != 1:
            raise InvalidArgumentError("sql(): TRUNCATE TABLE takes one table")
        prepared = writes.truncate(target, tree, commit=False)
    elif isinstance(tree, exp.Update):
        prepared = writes.update(target, tables, tree, commit=False)
    elif isinstance(tree, exp.Delete):
        prepared = writes.delete(target, tables, tree, commit=False)
    else:
        assert isinstance(tree, exp.Merge)
        prepared = writes.merge(target, tables, tree, commit=False)
    pin = tables.current_pin(table)
    if pin is not None and pin.snapshot.version != prepared.read_version:
        prepared.abort()
        raise _Repin()
    return prepared.commit() if commit else prepared


__all__ = ["sql"]
