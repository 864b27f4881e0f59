"""INSERT INTO / OVERWRITE, TRUNCATE, UPDATE, DELETE and MERGE as the SparkTable operations they are.

Each statement becomes exactly one call of the Python API, so the log entry, the history row and the
conflict rules are the API's. What SQL adds is the mapping: positional INSERT columns onto the table's,
a statement's table names and aliases onto the API's `t` / `s`, a PARTITION clause onto a partition or a
dynamic overwrite, and the checks that make a statement acidtables cannot run fail before any job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from sqlglot import exp

from acidtables.core import InvalidArgumentError, TableMetadata

from .. import merge as merge_api
from ..prepared import Prepared
from ..schema import spark_type, table_struct
from ..table import SparkTable
from .clauses import (
    after_qualifier,
    column_path,
    names_of,
    refuse_other_parts,
    refuse_table_parts,
    requalify,
    spark_sql,
    target_column,
)
from .references import Tables

Result = Any  # CommitInfo, or Prepared with commit=False


def refuse_subqueries(node: exp.Expr | None, where: str) -> None:
    if node is not None and node.find(exp.Select, exp.Subquery):
        raise InvalidArgumentError(
            f"sql(): {where} {spark_sql(node)!r} holds a subquery, which is not supported here; "
            "write it as MERGE INTO ... USING (subquery) ON ..."
        )


def _condition(spark_table: SparkTable, tables: Tables, tree: exp.Update | exp.Delete, statement: str) -> str | None:
    """The WHERE of an UPDATE or DELETE as the API evaluates it. A subquery in it runs as Databricks
    runs it (delta-spark refuses them): Spark plans it once, as a semi-join, over pinned snapshots of
    the acidtables tables it reads. Refused by name: a subquery that reads the target itself (the
    write's own read must be the one the conflict rules judge) and one that names the target's columns
    by its name or alias (correlated that way, it would be read against the wrong table here); both are
    MERGE INTO ... USING (subquery) ON ..., which runs them."""
    where = tree.args.get("where")
    if where is None:
        return None
    subqueries = [q for q in where.this.find_all(exp.Select) if q is not where.this]
    if not subqueries:
        return _own_columns(where.this, tree.this, statement)
    target = spark_table.table
    target_names = names_of(tree.this)
    hint = "write it as MERGE INTO ... USING (subquery) ON ..."
    for query in subqueries:
        for node in query.find_all(exp.Table):
            found = tables.resolve(node) if node.name else None
            if found is not None and found.table_id == target.table_id:
                raise InvalidArgumentError(
                    f"sql(): {statement} ... WHERE: the subquery {spark_sql(query)!r} reads {target.name}, the table "
                    f"being written, which is not supported; {hint}"
                )
        for column in query.find_all(exp.Column):
            if len(column_path(column)) > 1 and after_qualifier(column, target_names) is not None:
                raise InvalidArgumentError(
                    f"sql(): {statement} ... WHERE: the subquery {spark_sql(query)!r} names {spark_sql(column)} of "
                    f"{target.name}, which is not supported (a correlated subquery); {hint}"
                )
    outside = where.this.copy()
    for query in [q for q in outside.find_all(exp.Select) if q.find_ancestor(exp.Select) is None]:
        query.replace(tables.rewrite(query))  # pins what it reads; the views exist while the job runs
    return _own_columns(outside, tree.this, statement)


def _own_columns(node: exp.Expr, target: exp.Table, statement: str) -> str:
    """An UPDATE or DELETE expression as the API evaluates it, against the table's own columns:
    columns qualified by the target (its alias, or its name with or without namespace) unqualified."""
    return spark_sql(requalify(node, {"": names_of(target)}, statement))


def partition_spec(partition: exp.Expr | None, meta: TableMetadata, statement: str) -> tuple[dict[str, Any], list[str]]:
    """A PARTITION clause: its static values {column: value} and its dynamic columns, in order."""
    if partition is None:
        return {}, []
    static: dict[str, Any] = {}
    dynamic: list[str] = []
    names = {c.lower(): c for c in meta.partition_by}
    for item in partition.expressions:
        column = item.this if isinstance(item, exp.EQ) else item
        if not isinstance(column, exp.Column) or column.name.lower() not in names:
            raise InvalidArgumentError(
                f"sql(): {statement} PARTITION ({spark_sql(item)}): {meta.name} is partitioned by "
                f"{', '.join(meta.partition_by) or 'nothing'}"
            )
        name = names[column.name.lower()]
        if isinstance(item, exp.EQ):
            static[name] = _literal(item.expression, f"{statement} PARTITION ({spark_sql(item)})")
        else:
            dynamic.append(name)
    return static, dynamic


def _literal(node: exp.Expr, where: str) -> Any:
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -_literal(node.this, where)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        text = str(node.this)
        return int(text) if text.lstrip("-").isdigit() else float(text)
    raise InvalidArgumentError(f"sql(): {where}: a partition value must be a literal, found {spark_sql(node)!r}")


def partition_predicate(static: Mapping[str, Any]) -> str | None:
    """`dt = '2026-11-01' AND region IS NULL` for a static partition spec (sqlglot prints the literals)."""
    if not static:
        return None
    parts = [
        exp.column(k).is_(exp.null()) if v is None else exp.column(k).eq(exp.convert(v)) for k, v in static.items()
    ]
    return spark_sql(exp.and_(*parts))


# --- INSERT -------------------------------------------------------------------------------------------


def _numeric(t: T.DataType) -> bool:
    return isinstance(t, T.NumericType)


def _assignable(source: T.DataType, target: T.DataType) -> bool:
    """Spark's ANSI store assignment (Cast.canANSIStoreAssign), the part that can be told from types
    alone: equal types, NULL, a number into a number (an overflow fails at run time, naming the value),
    any atomic value into a string, a date into a timestamp."""
    if source == target or isinstance(source, T.NullType):
        return True
    if _numeric(source) and _numeric(target):
        return True
    if isinstance(target, T.StringType | T.VarcharType | T.CharType):
        return isinstance(source, T.AtomicType)
    return isinstance(source, T.DateType) and isinstance(target, T.TimestampType | T.TimestampNTZType)


def check_assignments(frame: DataFrame, meta: TableMetadata, values: Mapping[str, str], statement: str) -> None:
    """Each `column = expression` of an UPDATE or a MERGE clause is assignable as in an INSERT (Spark's
    ANSI store assignment): a string into a number fails here, before any job. Expressions Spark cannot
    resolve are left to the API, whose error names them."""
    types = {c.name.lower(): c for c in meta.columns}
    for name, expression in values.items():
        column = types.get(name.lower())
        if column is None:
            continue
        try:
            given = frame.selectExpr(expression).schema.fields[0].dataType
        except Exception:  # the API reports an expression it cannot resolve, naming it
            continue
        if not _assignable(given, spark_type(column.type)):
            raise InvalidArgumentError(
                f"sql(): {statement} SET {name} = {expression}: column {column.name} is {column.type.upper()}, "
                f"the expression gives {given.simpleString().upper()}; cast it explicitly"
            )


def _with_ctes(query: exp.Expr, statement_with: exp.Expr | None) -> exp.Expr:
    """A leading `WITH c AS (...) INSERT ...` / `MERGE ...` belongs to the query the write reads."""
    if statement_with is None:
        return query
    if not isinstance(query, exp.Query):
        raise InvalidArgumentError(
            "sql(): WITH ... INSERT ... VALUES: the CTEs belong to a query; write the rows as a SELECT"
        )
    query = query.copy()
    own = query.args.get("with_")
    merged = [*(statement_with.expressions), *(own.expressions if own is not None else [])]
    query.set("with_", exp.With(expressions=[c.copy() for c in merged]))
    return query


def insert_rows(spark_table: SparkTable, tables: Tables, tree: exp.Insert, statement: str) -> DataFrame:
    """The rows of an INSERT, conformed to the target table: positional columns (the table's order less
    the static partition columns), an explicit column list, or BY NAME; static partition values added."""
    target_node = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    meta = spark_table.table.metadata
    static, _ = partition_spec(target_node.args.get("partition"), meta, statement)
    if isinstance(tree.args.get("source"), exp.Expr):
        raise InvalidArgumentError(
            f"sql(): {statement} ... TABLE {spark_sql(tree.args['source'])}: write it as "
            f"{statement} ... SELECT * FROM {spark_sql(tree.args['source'])}"
        )
    refuse_other_parts(tree, ("this", "expression", "overwrite", "by_name", "with_", "where"), statement)
    if tree.expression is None:
        raise InvalidArgumentError(f"sql(): {statement}: expected VALUES or a query")
    source = tables.query(_with_ctes(tree.expression, tree.args.get("with_")))
    written = [c for c in meta.columns if c.name not in static]
    by_name = {c.name.lower(): c for c in written}
    if isinstance(tree.this, exp.Schema):
        listed = [i.name for i in tree.this.expressions]
        where = f"{statement} ({', '.join(listed)})"
    elif tree.args.get("by_name"):
        listed = list(source.columns)
        where = f"{statement} BY NAME"
    else:
        listed = []
        where = statement
    repeated = sorted({n for n in listed if [m.lower() for m in listed].count(n.lower()) > 1})
    if repeated:
        raise InvalidArgumentError(f"sql(): {where}: {', '.join(repeated)} named more than once")
    unknown = [n for n in listed if n.lower() not in by_name]
    if unknown:
        raise InvalidArgumentError(
            f"sql(): {where}: {', '.join(unknown)} is not a column of {meta.name} "
            f"(columns: {', '.join(c.name for c in written)})"
        )
    targets = [by_name[n.lower()] for n in listed] if listed or tree.args.get("by_name") else written
    fields = source.schema.fields
    if len(fields) != len(targets):
        raise InvalidArgumentError(
            f"sql(): {statement}: the query gives {len(fields)} column(s), {meta.name} takes {len(targets)} here "
            f"({', '.join(c.name for c in targets)})"
        )
    given = {c.name for c in targets}
    missing = [c.name for c in written if c.name not in given and not c.nullable]
    if missing:
        raise InvalidArgumentError(f"sql(): {statement}: NOT NULL column(s) {', '.join(missing)} get no value")
    columns = []
    for field, column in zip(fields, targets, strict=True):
        wanted = spark_type(column.type)
        if not _assignable(field.dataType, wanted):
            raise InvalidArgumentError(
                f"sql(): {statement}: column {column.name} is {column.type.upper()}, the query gives "
                f"{field.dataType.simpleString().upper()} ({field.name!r}); cast it explicitly"
            )
        columns.append(F.col(f"`{field.name}`").cast(wanted).alias(column.name))
    for column in written:
        if column.name not in given:
            columns.append(F.lit(None).cast(spark_type(column.type)).alias(column.name))
    for name, value in static.items():
        columns.append(F.lit(value).cast(spark_type(meta.column_types[name])).alias(name))
    return source.select(*columns)


def insert(spark_table: SparkTable, tables: Tables, tree: exp.Insert, *, commit: bool) -> Result:
    overwrite = bool(tree.args.get("overwrite"))
    statement = "INSERT OVERWRITE" if overwrite else "INSERT INTO"
    target_node = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    refuse_table_parts(target_node, statement, partition=True)
    meta = spark_table.table.metadata
    static, dynamic = partition_spec(target_node.args.get("partition"), meta, statement)
    replace_where = tree.args.get("where")
    if replace_where is not None:
        if overwrite or static or dynamic:
            raise InvalidArgumentError(
                f"sql(): {statement} ... REPLACE WHERE takes no PARTITION clause and is INSERT INTO t REPLACE WHERE"
            )
        refuse_subqueries(replace_where, "INSERT INTO ... REPLACE WHERE")
        predicate = _own_columns(replace_where, target_node, statement)
    rows = insert_rows(spark_table, tables, tree, statement)
    if replace_where is not None:
        return spark_table.insert_overwrite(rows, replace_where=predicate, commit=commit)
    if not overwrite:
        return spark_table.insert_into(rows, commit=commit)
    if dynamic and static:
        raise InvalidArgumentError(
            f"sql(): {statement} PARTITION ({spark_sql(target_node.args['partition'])}): give every partition column "
            "a value (static) or none (dynamic), not some of each"
        )
    dynamic_mode = bool(dynamic) or (
        not static
        and bool(meta.partition_by)
        and str(spark_table.spark.conf.get("spark.sql.sources.partitionOverwriteMode", "static")).lower() == "dynamic"
    )
    if static and set(static) != set(meta.partition_by):
        raise InvalidArgumentError(
            f"sql(): {statement} PARTITION ({', '.join(static)}): name every partition column "
            f"({', '.join(meta.partition_by)})"
        )
    return spark_table.insert_overwrite(rows, partition=static or None, dynamic=dynamic_mode, commit=commit)


# --- TRUNCATE, UPDATE, DELETE -------------------------------------------------------------------------


def truncate(spark_table: SparkTable, tree: exp.TruncateTable, *, commit: bool) -> Result:
    refuse_other_parts(tree, ("expressions", "partition"), "TRUNCATE TABLE")
    refuse_table_parts(tree.expressions[0], "TRUNCATE TABLE")
    static, dynamic = partition_spec(tree.args.get("partition"), spark_table.table.metadata, "TRUNCATE TABLE")
    if dynamic:
        raise InvalidArgumentError(f"sql(): TRUNCATE TABLE PARTITION: give {', '.join(dynamic)} a value")
    return spark_table.truncate(partition=static or None, commit=commit)


def update(spark_table: SparkTable, tables: Tables, tree: exp.Update, *, commit: bool) -> Result:
    if tree.args.get("from_") is not None:
        raise InvalidArgumentError("sql(): UPDATE ... FROM is not supported; write it as MERGE INTO ... USING ...")
    refuse_other_parts(tree, ("this", "expressions", "where"), "UPDATE")
    refuse_table_parts(tree.this, "UPDATE")
    meta = spark_table.table.metadata
    assignments: dict[str, str] = {}
    for item in tree.expressions:
        if not isinstance(item, exp.EQ):
            raise InvalidArgumentError(f"sql(): UPDATE ... SET {spark_sql(item)}: expected column = expression")
        column = target_column(item.this, names_of(tree.this), f"UPDATE ... SET {spark_sql(item)}", meta.name)
        refuse_subqueries(item.expression, "UPDATE ... SET")
        assignments[column] = _own_columns(item.expression, tree.this, "UPDATE")
    condition = _condition(spark_table, tables, tree, "UPDATE")
    empty = spark_table.spark.createDataFrame([], table_struct(meta))
    check_assignments(empty, meta, assignments, "UPDATE")
    with tables.views():  # a subquery in the condition reads the pinned snapshots while the job runs
        return spark_table.update(condition, assignments, commit=commit)


def delete(spark_table: SparkTable, tables: Tables, tree: exp.Delete, *, commit: bool) -> Result:
    refuse_other_parts(tree, ("this", "where"), "DELETE")
    refuse_table_parts(tree.this, "DELETE")
    condition = _condition(spark_table, tables, tree, "DELETE")
    with tables.views():  # a subquery in the condition reads the pinned snapshots while the job runs
        return spark_table.delete(condition, commit=commit)


# --- MERGE --------------------------------------------------------------------------------------------


def merge(spark_table: SparkTable, tables: Tables, tree: exp.Merge, *, commit: bool) -> Prepared | Any:
    refuse_other_parts(tree, ("this", "using", "on", "whens", "with_"), "MERGE")
    target_node: exp.Table = tree.this
    refuse_table_parts(target_node, "MERGE INTO")
    using = tree.args["using"]
    if isinstance(using, exp.Table):
        source_query: exp.Expr = exp.select("*").from_(using.copy())
    elif isinstance(using, exp.Subquery) and using.alias:
        source_query = using.this
    elif isinstance(using, exp.Subquery):
        raise InvalidArgumentError("sql(): MERGE INTO ... USING (subquery): give the subquery an alias")
    else:
        raise InvalidArgumentError(f"sql(): MERGE ... USING {spark_sql(using)}: expected a table or a subquery")
    if not isinstance(tree.args.get("on"), exp.Expr):
        raise InvalidArgumentError("sql(): MERGE ... ON: expected a condition")
    # the statement's names for its two tables become the API's: the target `t`, the source `s`
    sides = {merge_api.TARGET: names_of(target_node), merge_api.SOURCE: names_of(using)}

    def aliased(node: exp.Expr | None) -> str | None:
        if node is None:
            return None
        if node.find(exp.Select, exp.Subquery):
            raise InvalidArgumentError(
                f"sql(): MERGE clause {spark_sql(node)!r} holds a subquery, which is not supported"
            )
        return spark_sql(requalify(node, sides, "MERGE"))

    source = tables.query(_with_ctes(source_query, tree.args.get("with_")))
    condition = aliased(tree.args["on"])
    assert condition is not None
    builder = spark_table.merge(source, condition)
    meta = spark_table.table.metadata
    both = (
        spark_table.spark.createDataFrame([], table_struct(meta))
        .alias(merge_api.TARGET)
        .crossJoin(source.limit(0).alias(merge_api.SOURCE))
    )

    def column(node: exp.Expr, text: str) -> str:
        return target_column(node, sides[merge_api.TARGET], f"MERGE {text}", meta.name)

    for when in tree.args["whens"].expressions:
        builder = _add_clause(
            builder, when, aliased, column, lambda values: check_assignments(both, meta, values, "MERGE")
        )
    return builder.execute(commit=commit)


def _add_clause(
    builder: merge_api.MergeBuilder, when: exp.When, aliased: Any, column: Any, check: Any
) -> merge_api.MergeBuilder:
    text = spark_sql(when)
    condition = aliased(when.args.get("condition"))
    then = when.args["then"]
    by_source = bool(when.args.get("source"))
    if when.args.get("matched") or by_source:
        if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
            if by_source:
                return builder.when_not_matched_by_source_delete(condition)
            return builder.when_matched_delete(condition)
        if isinstance(then, exp.Update):
            refuse_other_parts(then, ("expressions",), text)
            if len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star):
                if by_source:
                    raise InvalidArgumentError(
                        f"sql(): {text}: WHEN NOT MATCHED BY SOURCE has no source row to take every column from; "
                        "write UPDATE SET column = expression, ..."
                    )
                refuse_other_parts(then.expressions[0], (), text)
                return builder.when_matched_update_all(condition)
            values: dict[str, str] = {}
            for item in then.expressions:
                if not isinstance(item, exp.EQ):
                    raise InvalidArgumentError(f"sql(): {text}: expected SET column = expression")
                values[column(item.this, text)] = aliased(item.expression)
            check(values)
            if by_source:
                return builder.when_not_matched_by_source_update(values, condition)
            return builder.when_matched_update(values, condition)
    elif isinstance(then, exp.Insert):
        refuse_other_parts(then, ("this", "expression"), text)
        if isinstance(then.this, exp.Star):
            refuse_other_parts(then.this, (), text)
            return builder.when_not_matched_insert_all(condition)
        columns = then.this.expressions if isinstance(then.this, exp.Tuple) else []
        values_node = then.expression
        expressions = values_node.expressions if isinstance(values_node, exp.Tuple) else []
        if not columns or len(columns) != len(expressions):
            raise InvalidArgumentError(f"sql(): {text}: INSERT (columns) VALUES (values) must name as many of each")
        inserted = {column(c, text): aliased(v) for c, v in zip(columns, expressions, strict=True)}
        check(inserted)
        return builder.when_not_matched_insert(inserted, condition)
    raise InvalidArgumentError(
        f"sql(): {text} is not supported; supported: WHEN MATCHED [AND ...] THEN UPDATE SET ... / UPDATE SET * / "
        "DELETE, WHEN NOT MATCHED [BY TARGET] [AND ...] THEN INSERT * / INSERT (...) VALUES (...), WHEN NOT MATCHED "
        "BY SOURCE [AND ...] THEN UPDATE SET ... / DELETE"
    )
