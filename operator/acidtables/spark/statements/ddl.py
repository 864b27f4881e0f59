"""CREATE TABLE ... USING acidtables, DROP TABLE, ALTER TABLE ... ADD COLUMNS / SET TBLPROPERTIES.

Table settings a user of the Python API passes as arguments are TBLPROPERTIES here, under the names the
AcidTable resource uses (`primaryKey` also as a PRIMARY KEY constraint), plus Delta Lake's spellings of
the two it has: `delta.isolationLevel` and `delta.enableDeletionVectors`. Any other property is kept on
the table as given (`acidtables.conflictDetection` among them).
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession
from sqlglot import exp

from acidtables.core import Catalog, Column, InvalidArgumentError

from ..schema import frame_columns
from ..table import SparkTable
from .clauses import refuse_other_parts, spark_sql
from .references import DEFAULT_NAMESPACE, Tables

logger = logging.getLogger(__name__)

#: TBLPROPERTIES that are create_table arguments -> the argument
SETTINGS = {
    "primarykey": "primary_key",
    "conflictpolicy": "conflict_policy",
    "isolationlevel": "isolation_level",
    "delta.isolationlevel": "isolation_level",
    "rowlevelconcurrency": "row_level_concurrency",
    "delta.enabledeletionvectors": "row_level_concurrency",
}
#: settings fixed at creation (conflict-rules D-01 and the table layout)
FIXED = {"primary_key", "conflict_policy", "row_level_concurrency"}


def catalog_name(node: exp.Table, statement: str) -> str:
    parts = [p.name for p in node.parts]
    if len(parts) == 3 and parts[0].lower() == "acidtables":
        parts = parts[1:]
    if len(parts) == 1:
        parts = [DEFAULT_NAMESPACE, *parts]
    if len(parts) != 2:
        raise InvalidArgumentError(f"sql(): {statement} {spark_sql(node)}: name a table as namespace.name")
    return f"{parts[0]}.{parts[1]}"


def is_acidtables_create(tree: exp.Create) -> bool:
    properties = tree.args.get("properties")
    for prop in properties.expressions if properties else []:
        if isinstance(prop, exp.FileFormatProperty) and prop.name.lower() == "acidtables":
            return True
    return False


def _bool(value: str, key: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidArgumentError(f"sql(): TBLPROPERTIES ('{key}'='{value}'): use 'true' or 'false'")


def _settings(properties: list[exp.Property], statement: str) -> tuple[dict[str, Any], dict[str, str]]:
    options: dict[str, Any] = {}
    kept: dict[str, str] = {}
    for prop in properties:
        key, value = prop.name, prop.args["value"]
        text = value.name if isinstance(value, exp.Literal | exp.Var | exp.Identifier) else spark_sql(value)
        argument = SETTINGS.get(key.lower())
        if argument == "primary_key":
            options[argument] = [k.strip() for k in text.split(",") if k.strip()]
        elif argument == "row_level_concurrency":
            options[argument] = _bool(text, key)
        elif argument is not None:
            options[argument] = text
        else:
            kept[key] = text
    return options, kept


#: where a column's COMMENT is kept (table properties: the log's table definition has no comment field)
COMMENT_PROPERTY = "acidtables.comment."


def _column(item: exp.Expr, statement: str, *, added: bool) -> tuple[Column, bool, str | None]:
    """One column definition: the column, whether it is declared PRIMARY KEY, and its COMMENT."""
    if (
        not isinstance(item, exp.ColumnDef)
        or item.args.get("kind") is None
        or not isinstance(item.this, exp.Identifier)
    ):
        raise InvalidArgumentError(
            f"sql(): {statement} ({spark_sql(item)}): expected `name TYPE [NOT NULL] [COMMENT '...']`"
        )
    refuse_other_parts(item, ("this", "kind", "constraints"), f"{statement} column {item.name}")
    nullable, key, comment = True, False, None
    for constraint in item.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.CommentColumnConstraint):
            comment = kind.name
        elif isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null") and not added:
            nullable = False
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint) and not added and not kind.args.get("options"):
            key, nullable = True, False
        else:
            supported = "COMMENT (an added column is nullable)" if added else "NOT NULL, PRIMARY KEY, COMMENT"
            raise InvalidArgumentError(
                f"sql(): {statement} column {item.name}: {spark_sql(constraint)} is not supported "
                f"(supported: {supported})"
            )
    return Column(item.name, spark_sql(item.args["kind"]), nullable), key, comment


def create(spark: SparkSession, catalog: Catalog, tables: Tables, tree: exp.Create, *, commit: bool) -> Any:
    if tree.args.get("replace"):
        raise InvalidArgumentError("sql(): CREATE OR REPLACE TABLE is not supported for acidtables tables")
    if tree.expression is not None:
        return _create_as_select(spark, catalog, tables, tree, commit=commit)
    schema = tree.this
    if not isinstance(schema, exp.Schema) or not isinstance(schema.this, exp.Table):
        raise InvalidArgumentError("sql(): CREATE TABLE ... USING acidtables needs a column list")
    refuse_other_parts(tree, ("this", "kind", "exists", "properties"), "CREATE TABLE")
    refuse_other_parts(schema.this, ("this", "db", "catalog"), "CREATE TABLE")
    name = catalog_name(schema.this, "CREATE TABLE")
    columns: list[Column] = []
    keys: dict[str, list[str]] = {}
    properties: dict[str, str] = {}
    for item in schema.expressions:
        constraint = item.expressions[0] if isinstance(item, exp.Constraint) and len(item.expressions) == 1 else item
        if isinstance(constraint, exp.PrimaryKey):
            refuse_other_parts(constraint, ("expressions", "include"), "CREATE TABLE ... PRIMARY KEY")
            keys[spark_sql(item)] = [k.name for k in constraint.expressions]
            continue
        column, key, comment = _column(item, "CREATE TABLE", added=False)
        columns.append(column)
        if key:
            keys.setdefault("PRIMARY KEY on the columns", []).append(column.name)
        if comment is not None:
            properties[COMMENT_PROPERTY + column.name] = comment
    options = _options(tree, columns, keys, properties)
    if tree.args.get("exists") and _exists(catalog, name):
        return None
    prepared = catalog.prepare_create_table(name, columns, **options)
    if not commit:
        return prepared
    prepared.commit()
    return catalog.table(name)


def _exists(catalog: Catalog, name: str) -> bool:
    return name.lower() in {n.lower() for n in catalog.list_tables(name.split(".")[0])}


def _options(
    tree: exp.Create, columns: list[Column], keys: dict[str, list[str]], properties: dict[str, str]
) -> dict[str, Any]:
    """create_table's keyword arguments from the statement's properties (USING, PARTITIONED BY,
    LOCATION, COMMENT, TBLPROPERTIES) and the primary key however it was given."""
    options: dict[str, Any] = {}
    formats = 0
    for prop in tree.args["properties"].expressions:
        if isinstance(prop, exp.FileFormatProperty):
            formats += 1
        elif isinstance(prop, exp.PartitionedByProperty):
            options["partition_by"] = _partition_columns(prop, columns)
        elif isinstance(prop, exp.LocationProperty):
            options["location"] = prop.name
        elif isinstance(prop, exp.SchemaCommentProperty):
            properties["comment"] = prop.name
        elif type(prop) is exp.Property:  # one TBLPROPERTIES entry
            settings, kept = _settings([prop], "CREATE TABLE")
            if "primary_key" in settings:
                keys[f"TBLPROPERTIES {spark_sql(prop)}"] = settings.pop("primary_key")
            options.update(settings)
            properties.update(kept)
        else:
            raise InvalidArgumentError(
                f"sql(): CREATE TABLE ... {spark_sql(prop)} is not supported (supported: USING acidtables, "
                "PARTITIONED BY (columns), LOCATION, COMMENT, TBLPROPERTIES, PRIMARY KEY)"
            )
    if formats != 1:
        raise InvalidArgumentError("sql(): CREATE TABLE: give the format once, USING acidtables")
    if len({tuple(k) for k in keys.values()}) > 1:
        raise InvalidArgumentError(f"sql(): CREATE TABLE: the primary key is given twice, differently: {keys}")
    if keys:
        options["primary_key"] = next(iter(keys.values()))
    if properties:
        options["properties"] = properties
    return options


def _create_as_select(spark: SparkSession, catalog: Catalog, tables: Tables, tree: exp.Create, *, commit: bool) -> Any:
    """CREATE TABLE t USING acidtables [PARTITIONED BY (...)] [...] AS SELECT: the table takes the
    query's columns (nullable, as Spark's CTAS makes them) and its rows. Two versions, CREATE TABLE and
    INSERT INTO, where Delta Lake writes one; if the insert fails the new table is dropped again, so a
    failed statement leaves nothing."""
    target = tree.this
    if isinstance(target, exp.Schema):
        raise InvalidArgumentError(
            "sql(): CREATE TABLE ... (columns) ... AS SELECT: leave out the column list (the query gives the columns)"
        )
    if not isinstance(target, exp.Table):
        raise InvalidArgumentError("sql(): CREATE TABLE ... AS SELECT: name the table as namespace.name")
    refuse_other_parts(tree, ("this", "kind", "exists", "properties", "expression"), "CREATE TABLE ... AS SELECT")
    refuse_other_parts(target, ("this", "db", "catalog"), "CREATE TABLE ... AS SELECT")
    if not commit:
        raise InvalidArgumentError("sql(): CREATE TABLE ... AS SELECT commits at once; commit=False is not supported")
    name = catalog_name(target, "CREATE TABLE")
    try:  # resolved now: a query that does not resolve creates nothing
        rows = tables.query(tree.expression)
        columns = frame_columns(rows)
    except Exception as exc:  # AnalysisException: report it as our own error
        first = str(exc).strip().splitlines()[0]
        raise InvalidArgumentError(f"sql(): CREATE TABLE ... AS SELECT: the query does not resolve: {first}") from None
    options = _options(tree, columns, {}, {})
    if tree.args.get("exists") and _exists(catalog, name):
        return None
    table = catalog.create_table(name, columns, **options)
    try:
        SparkTable(spark, table).insert_into(rows)
    except BaseException:
        try:
            catalog.drop_table(name, delete_data=True)
        except Exception:  # the insert's error is the one to report
            logger.warning(
                "CREATE TABLE %s AS SELECT failed and the new table could not be dropped", name, exc_info=True
            )
        raise
    return catalog.table(name)


def _partition_columns(prop: exp.PartitionedByProperty, columns: list[Column]) -> list[str]:
    """PARTITIONED BY names columns of the list; Hive's typed form and transforms are not supported."""
    known = {c.name.lower() for c in columns}
    names = []
    for item in prop.this.expressions if isinstance(prop.this, exp.Schema | exp.Tuple) else [prop.this]:
        if not isinstance(item, exp.Identifier | exp.Column) or item.name.lower() not in known:
            raise InvalidArgumentError(
                f"sql(): CREATE TABLE ... PARTITIONED BY ({spark_sql(item)}): name columns of the column list "
                "(no types, no transforms such as years() or bucket())"
            )
        names.append(item.name)
    return names


def drop(catalog: Catalog, tables: Tables, tree: exp.Drop) -> Any:
    [node] = tree.args["tables"]
    return catalog.drop_table(tables.require(node, "DROP TABLE").name, delete_data=bool(tree.args.get("purge")))


def alter(catalog: Catalog, table_name: str, actions: list[exp.Expr]) -> Any:
    if len(actions) != 1:
        raise InvalidArgumentError("sql(): ALTER TABLE takes one action at a time here")
    [action] = actions
    if isinstance(action, exp.ColumnDef):  # ADD COLUMN c TYPE
        action = exp.Schema(expressions=[action])
    if isinstance(action, exp.Schema):  # ADD COLUMNS (...)
        columns, comments = [], {}
        for item in action.expressions:
            column, _, comment = _column(item, "ALTER TABLE ADD COLUMNS", added=True)
            columns.append(column)
            if comment is not None:
                comments[COMMENT_PROPERTY + column.name] = comment
        return catalog.alter_table(table_name, add_columns=columns, properties=comments or None)
    if isinstance(action, exp.AlterSet) and action.expressions and isinstance(action.expressions[0], exp.Properties):
        refuse_other_parts(action, ("expressions",), "ALTER TABLE SET")
        entries = list(action.expressions[0].expressions)
        odd = [e for e in entries if type(e) is not exp.Property]
        if odd or len(action.expressions) != 1:
            raise InvalidArgumentError(f"sql(): ALTER TABLE {spark_sql(action)}: supported: SET TBLPROPERTIES (...)")
        settings, kept = _settings(entries, "ALTER TABLE SET TBLPROPERTIES")
        fixed = sorted(FIXED & set(settings))
        if fixed:
            raise InvalidArgumentError(
                f"sql(): ALTER TABLE SET TBLPROPERTIES: {', '.join(fixed)} is fixed when the table is created"
            )
        return catalog.alter_table(table_name, properties=kept or None, isolation_level=settings.get("isolation_level"))
    raise InvalidArgumentError(
        f"sql(): ALTER TABLE ... {spark_sql(action)} is not supported (supported: ADD COLUMNS, SET TBLPROPERTIES, "
        "[PARTITION (...)] COMPACT MINOR | MAJOR)"
    )
