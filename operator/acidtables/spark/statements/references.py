"""Which tables of a statement are acidtables tables, and one pinned snapshot of each for the statement.

A name resolves to acidtables when the catalog has it: `acidtables.ns.t` always, `ns.t` when the
catalog has `ns.t` (it wins over a Spark table of the same name), and a one-part `t` as `default.t`
unless the statement defines `t` as a CTE or Spark knows `t` (a temporary view, a session table).

Every reference to the same table and the same version clause reads one snapshot, pinned once: a self
join, a CTE used twice, or a MERGE whose source reads its own target all see one version. Each pinned
snapshot is a temporary view over exactly its files (SparkTable.read's plan), and the references are
rewritten to the view, so Spark plans the rest of the query as it would any other; the views are dropped
once Spark has analysed the statement (the analysed plan holds the files, not the name).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from acidtables.core import Catalog, InvalidArgumentError, Snapshot, Table, TableNotFoundError

from ..reads import read_snapshot
from .clauses import column_path, path_expression, refuse_parameter_alias

#: the catalog part that names acidtables explicitly: `acidtables.sales.orders`
CATALOG_NAME = "acidtables"
DEFAULT_NAMESPACE = "default"


@dataclass
class Pin:
    table: Table
    snapshot: Snapshot
    view: str


@dataclass
class Tables:
    """The acidtables tables one statement names, resolved once and pinned once per version clause."""

    spark: SparkSession
    catalog: Catalog
    #: CTE names of the statement: a one-part name that is a CTE is never a table
    ctes: frozenset[str] = frozenset()
    _resolved: dict[tuple[str, ...], Table | None] = field(default_factory=dict)
    _pins: dict[tuple[str, str, str], Pin] = field(default_factory=dict)
    _names: list[str] | None = None
    #: an open SQL transaction's reads (by table id): a read of a table without a version clause reads
    #: the snapshot the transaction first read it at, and a first read is recorded here (repeatable reads)
    fixed: dict[str, Snapshot] | None = None

    @staticmethod
    def of(spark: SparkSession, catalog: Catalog, tree: exp.Expr) -> Tables:
        ctes = frozenset(c.alias_or_name.lower() for c in tree.find_all(exp.CTE))
        return Tables(spark, catalog, ctes)

    def resolve(self, node: exp.Table) -> Table | None:
        """The acidtables table `node` names, or None for a name Spark resolves."""
        parts = tuple(p.name for p in node.parts)
        if parts not in self._resolved:
            self._resolved[parts] = self._lookup(parts)
        return self._resolved[parts]

    def _lookup(self, parts: tuple[str, ...]) -> Table | None:
        if len(parts) == 3:
            if parts[0].lower() != CATALOG_NAME:
                return None  # another Spark catalog
            found = self._find(parts[1], parts[2])
            if found is None:  # named as acidtables' explicitly: it must exist
                raise TableNotFoundError(f"sql(): {'.'.join(parts)}: the acidtables catalog has no such table")
            return found
        if len(parts) == 2:
            return self._find(parts[0], parts[1])
        if len(parts) != 1 or parts[0].lower() in self.ctes or self.spark.catalog.tableExists(parts[0]):
            return None
        return self._find(DEFAULT_NAMESPACE, parts[0])

    def _find(self, namespace: str, name: str) -> Table | None:
        """The table, its name matched without regard to case as Spark matches names; None when there is
        none, or when the name cannot be an acidtables name at all (Spark's `parquet.`/path``)."""
        try:
            return self.catalog.table(f"{namespace}.{name}")
        except TableNotFoundError:
            pass
        except InvalidArgumentError:
            return None
        if self._names is None:
            self._names = self.catalog.list_tables()
        wanted = f"{namespace}.{name}".lower()
        matches = [n for n in self._names if n.lower() == wanted]
        if len(matches) > 1:
            raise InvalidArgumentError(
                f"sql(): {namespace}.{name} matches {', '.join(matches)}, which differ only in case; "
                "quote the name as the catalog spells it"
            )
        return self.catalog.table(matches[0]) if matches else None

    def require(self, node: exp.Table, statement: str) -> Table:
        """The target of a statement acidtables runs: it must be an acidtables table."""
        table = self.resolve(node)
        if table is None:
            raise TableNotFoundError(f"{statement}: {node.sql(dialect='spark')} is not an acidtables table")
        return table

    def pin(self, table: Table, version: exp.Version | None = None) -> Pin:
        """The one snapshot of `table` for this statement at `version` (a VERSION / TIMESTAMP AS OF clause)."""
        kind, value = version_clause(self.spark, version)
        key = (table.table_id, kind, value)
        if key not in self._pins:
            if kind == "VERSION":
                snapshot = table.snapshot(version=int(value))
            elif kind == "TIMESTAMP":
                snapshot = table.snapshot(timestamp=value)
            elif self.fixed is not None and table.table_id in self.fixed:
                snapshot = self.fixed[table.table_id]
            else:
                snapshot = table.snapshot()
                if self.fixed is not None:
                    self.fixed[table.table_id] = snapshot
            self._pins[key] = Pin(table, snapshot, f"_acid_pin_{uuid.uuid4().hex[:12]}")
        return self._pins[key]

    def current_pin(self, table: Table) -> Pin | None:
        """The unversioned pin of `table`, if the statement read it (a write reading its own target)."""
        return self._pins.get((table.table_id, "", ""))

    def rewrite(self, tree: exp.Expr) -> exp.Expr:
        """A copy of `tree` with each acidtables table reference pointing at its pinned view. Only the
        name changes: the alias, a column alias list, TABLESAMPLE, PIVOT and the rest of the reference
        stay. An unaliased reference keeps answering to its full name (`sales.orders.id`) and, when no
        other table of the statement has that short name, to its short name (`orders.id`); a qualified
        column that could mean either of two tables fails to resolve in Spark rather than being read
        from the wrong one."""
        rewritten = tree.copy()
        tables = [t for t in rewritten.find_all(exp.Table) if t.name and not _is_write_target(t)]
        short_names = Counter(t.name.lower() for t in tables)
        paths = Counter(tuple(p.name.lower() for p in t.parts) for t in tables)
        full_names: dict[tuple[str, ...], str] = {}
        for number, node in enumerate(tables):
            table = self.resolve(node)
            if table is None:
                continue
            refuse_parameter_alias(node)
            pin = self.pin(table, node.args.get("version"))
            alias = node.alias
            parts = tuple(p.name.lower() for p in node.parts)
            for part in ("db", "catalog", "version"):
                node.set(part, None)
            node.set("this", exp.to_identifier(pin.view))
            if alias:
                continue
            # its short name, unless another table of the statement has it too: then a name of its own,
            # reachable through the full name only (and not even that when the full name repeats)
            own = parts[-1] if short_names[parts[-1]] == 1 else f"_acid_ref{number}"
            node.set("alias", exp.TableAlias(this=exp.to_identifier(own)))
            if paths[parts] == 1:
                for i in range(len(parts) - 1):
                    full_names[parts[i:]] = own
        if full_names:
            for column in list(rewritten.find_all(exp.Column)):
                path = column_path(column)
                for length in (3, 2):
                    qualifier = full_names.get(tuple(p.name.lower() for p in path[:length]))
                    if qualifier is not None and len(path) > length:
                        column.replace(path_expression(qualifier, path[length:]))
                        break
        return rewritten

    @contextmanager
    def views(self) -> Iterator[None]:
        """The pinned snapshots as temporary views while Spark analyses the rewritten statement."""
        created: list[str] = []
        try:
            for pin in list(self._pins.values()):
                latest = pin is self.current_pin(pin.table)
                read_snapshot(self.spark, pin.table, pin.snapshot, latest=latest).createOrReplaceTempView(pin.view)
                created.append(pin.view)
            yield
        finally:
            for view in created:
                self.spark.catalog.dropTempView(view)

    def query(self, tree: exp.Expr) -> DataFrame:
        """A query over acidtables tables (and anything else Spark knows) as one analysed DataFrame."""
        text = self.rewrite(tree).sql(dialect="spark")
        with self.views():
            return self.spark.sql(text)


def version_clause(spark: SparkSession, version: exp.Version | None) -> tuple[str, str]:
    """("VERSION", "n") or ("TIMESTAMP", an ISO instant) for a time-travel clause; ("", "") for none."""
    if version is None:
        return "", ""
    kind = str(version.name).upper()
    if str(version.args.get("kind", "")).upper() != "AS OF":
        raise InvalidArgumentError(
            f"sql(): {version.sql(dialect='spark')}: only VERSION AS OF n and TIMESTAMP AS OF '...' are supported"
        )
    value: Any = version.expression
    if kind == "VERSION":
        if not (isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit()):
            raise InvalidArgumentError(
                f"sql(): VERSION AS OF {value.sql(dialect='spark')}: the version must be a whole number 0 or more"
            )
        return kind, str(value.this)
    if kind == "TIMESTAMP":
        # Spark reads the literal (or an expression such as current_timestamp() - INTERVAL 1 HOUR) as it
        # would anywhere else, in the session time zone; acidtables takes the instant it names
        text = value.sql(dialect="spark")
        try:
            row = spark.sql(f"SELECT unix_micros(CAST({text} AS TIMESTAMP)) AS t").first()
        except Exception as exc:
            first = str(exc).strip().splitlines()[0]
            raise InvalidArgumentError(f"sql(): TIMESTAMP AS OF {text}: {first}") from None
        if row is None or row[0] is None:
            raise InvalidArgumentError(f"sql(): TIMESTAMP AS OF {text} is not a timestamp")
        instant = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(row[0]))
        return kind, instant.isoformat()
    raise InvalidArgumentError(f"sql(): {version.sql(dialect='spark')}: use VERSION AS OF or TIMESTAMP AS OF")


def _is_write_target(node: exp.Table) -> bool:
    """The table an INSERT writes (not part of the query's scope)."""
    parent = node.parent
    if isinstance(parent, exp.Schema):
        parent = parent.parent
    return isinstance(parent, exp.Insert) and parent.this in (node, node.parent)
