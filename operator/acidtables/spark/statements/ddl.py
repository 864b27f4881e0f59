"""CREATE TABLE ... USING acidtables, DROP TABLE, ALTER TABLE ... ADD COLUMNS / SET TBLPROPERTIES.

Table settings a user of the Python API passes as arguments are TBLPROPERTIES here, under the names the
AcidTable resource uses (`primaryKey` also as a PRIMARY KEY constraint), plus Delta Lake's spellings of
the two it has: `delta.isolationLevel` and `delta.enableDeletionVectors`. Any other property is kept on
the table as given (`acidtables.conflictDetection` among them).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from acidtables.core import Catalog, Column, InvalidArgumentError

from .references import DEFAULT_NAMESPACE, Tables

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


def _spark(node: exp.Expr) -> str:
    return node.sql(dialect="spark")


def catalog_name(node: exp.Table, statement: str) -> str:
    parts = [p.name for p in node.parts]
    if len(parts) == 3 and parts[0].lower() == "acidtables":
        parts = parts[1:]
    if len(parts) == 1:
        parts = [DEFAULT_NAMESPACE, *parts]
    if len(parts) != 2:
        raise InvalidArgumentError(f"sql(): {statement} {_spark(node)}: name a table as namespace.name")
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
        text = value.name if isinstance(value, exp.Literal | exp.Var | exp.Identifier) else _spark(value)
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


def create(catalog: Catalog, tree: exp.Create, *, commit: bool) -> Any:
    schema = tree.this
    if tree.expression is not None:
        raise InvalidArgumentError(
            "sql(): CREATE TABLE ... USING acidtables AS SELECT is not supported; CREATE the table, then INSERT INTO it"
        )
    if not isinstance(schema, exp.Schema) or not isinstance(schema.this, exp.Table):
        raise InvalidArgumentError("sql(): CREATE TABLE ... USING acidtables needs a column list")
    if tree.args.get("replace"):
        raise InvalidArgumentError("sql(): CREATE OR REPLACE TABLE is not supported for acidtables tables")
    name = catalog_name(schema.this, "CREATE TABLE")
    if tree.args.get("exists") and name in catalog.list_tables(name.split(".")[0]):
        return None
    columns: list[Column] = []
    options: dict[str, Any] = {}
    for item in schema.expressions:
        if isinstance(item, exp.PrimaryKey):
            options["primary_key"] = [k.name for k in item.expressions]
            continue
        if not isinstance(item, exp.ColumnDef) or item.args.get("kind") is None:
            raise InvalidArgumentError(f"sql(): CREATE TABLE ({_spark(item)}): expected `name TYPE [NOT NULL]`")
        nullable = True
        for constraint in item.args.get("constraints") or []:
            kind = constraint.args.get("kind")
            if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
                nullable = False
            elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                options["primary_key"] = [*options.get("primary_key", []), item.name]
                nullable = False
            elif not isinstance(kind, exp.CommentColumnConstraint):
                raise InvalidArgumentError(
                    f"sql(): CREATE TABLE column {item.name}: {_spark(constraint)} is not supported "
                    "(supported: NOT NULL, PRIMARY KEY, COMMENT)"
                )
        columns.append(Column(item.name, _spark(item.args["kind"]), nullable))
    properties: dict[str, str] = {}
    for prop in tree.args["properties"].expressions:
        if isinstance(prop, exp.FileFormatProperty):
            continue
        if isinstance(prop, exp.PartitionedByProperty):
            options["partition_by"] = [c.name for c in prop.this.expressions]
        elif isinstance(prop, exp.LocationProperty):
            options["location"] = prop.name
        elif isinstance(prop, exp.Property):
            settings, kept = _settings([prop], "CREATE TABLE")
            options.update(settings)
            properties.update(kept)
        else:
            raise InvalidArgumentError(
                f"sql(): CREATE TABLE ... {_spark(prop)} is not supported (supported: USING acidtables, "
                "PARTITIONED BY, LOCATION, TBLPROPERTIES, PRIMARY KEY)"
            )
    if properties:
        options["properties"] = properties
    prepared = catalog.prepare_create_table(name, columns, **options)
    if not commit:
        return prepared
    prepared.commit()
    return catalog.table(name)


def drop(catalog: Catalog, tables: Tables, tree: exp.Drop) -> Any:
    [node] = tree.args["tables"]
    table = tables.resolve(node)
    if table is None:
        if tree.args.get("exists"):
            return None
        return tables.require(node, "DROP TABLE")
    return catalog.drop_table(table.name, delete_data=bool(tree.args.get("purge")))


def alter(catalog: Catalog, table_name: str, actions: list[exp.Expr]) -> Any:
    if len(actions) != 1:
        raise InvalidArgumentError("sql(): ALTER TABLE takes one action at a time here")
    [action] = actions
    if isinstance(action, exp.Schema):  # ADD COLUMNS (...)
        columns = []
        for item in action.expressions:
            if not isinstance(item, exp.ColumnDef) or item.args.get("kind") is None:
                raise InvalidArgumentError(f"sql(): ALTER TABLE ADD COLUMNS ({_spark(item)}): expected `name TYPE`")
            if item.args.get("constraints"):
                raise InvalidArgumentError(
                    f"sql(): ALTER TABLE ADD COLUMNS ({_spark(item)}): an added column is nullable, without constraints"
                )
            columns.append(Column(item.name, _spark(item.args["kind"]), True))
        return catalog.alter_table(table_name, add_columns=columns)
    if isinstance(action, exp.AlterSet) and action.expressions and isinstance(action.expressions[0], exp.Properties):
        settings, kept = _settings(list(action.expressions[0].expressions), "ALTER TABLE SET TBLPROPERTIES")
        fixed = sorted(FIXED & set(settings))
        if fixed:
            raise InvalidArgumentError(
                f"sql(): ALTER TABLE SET TBLPROPERTIES: {', '.join(fixed)} is fixed when the table is created"
            )
        return catalog.alter_table(table_name, properties=kept or None, isolation_level=settings.get("isolation_level"))
    raise InvalidArgumentError(
        f"sql(): ALTER TABLE ... {_spark(action)} is not supported (supported: ADD COLUMNS, SET TBLPROPERTIES, "
        "[PARTITION (...)] COMPACT MINOR | MAJOR)"
    )
