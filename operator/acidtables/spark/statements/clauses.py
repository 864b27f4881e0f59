"""What every statement handler shares: refusing clauses it would otherwise ignore, and reading column
references against the tables a statement names.

A parser as complete as sqlglot accepts far more than acidtables runs (RETURNING, ORDER BY ... LIMIT on
an UPDATE, TABLESAMPLE on a write target, ...). Dropping such a clause would run another statement than
the one written, so each handler lists the parts it uses and any other part that is set is refused,
named by its own text.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp

from acidtables.core import InvalidArgumentError

#: parts of a column reference, outermost first
_QUALIFIERS = ("catalog", "db", "table")


def spark_sql(node: exp.Expr) -> str:
    return node.sql(dialect="spark")


def refuse_other_parts(node: exp.Expr, used: Iterable[str], statement: str) -> None:
    """Fail naming the first part of `node` that is set and not in `used`."""
    allowed = set(used)
    for key, value in node.args.items():
        if key in allowed or value is None or value is False or value == [] or value == "":
            continue
        if isinstance(value, exp.Expr):
            shown = spark_sql(value)  # its own keywords: RETURNING id, ORDER BY id, LIMIT 1, TABLESAMPLE (...)
        elif isinstance(value, list):
            shown = " ".join(spark_sql(v) if isinstance(v, exp.Expr) else str(v) for v in value)
        else:
            label = key.rstrip("_").replace("_", " ").upper()
            shown = label if value is True else f"{label} {value}"
        raise InvalidArgumentError(f"sql(): {statement}: {shown!r} is not supported here")


def refuse_parameter_alias(node: exp.Table) -> None:
    """Delta Lake's `t@v2` time travel, which sqlglot reads as an alias: not supported, never ignored."""
    alias = node.args.get("alias")
    if alias is not None and alias.this is not None and not isinstance(alias.this, exp.Identifier):
        raise InvalidArgumentError(
            f"sql(): {spark_sql(node)}: the `table@v<version>` form is not supported; write "
            f"{node.name} VERSION AS OF <version>"
        )


def refuse_table_parts(node: exp.Table, statement: str, *, partition: bool = False) -> None:
    """A table a statement writes or alters: a name (and an alias, and a PARTITION clause where the
    statement takes one), nothing a reader would add (a version, a sample, a pivot)."""
    refuse_parameter_alias(node)
    if node.args.get("version") is not None:
        raise InvalidArgumentError(
            f"sql(): {statement}: {spark_sql(node.args['version'])}: a write acts on the table's current version; "
            "VERSION AS OF and TIMESTAMP AS OF are for reading"
        )
    refuse_other_parts(node, ("this", "db", "catalog", "alias", *(("partition",) if partition else ())), statement)


def names_of(node: exp.Expr) -> set[tuple[str, ...]]:
    """The qualifiers a column of the table `node` may carry, lower case: its alias if it has one
    (Spark then knows it by the alias only), else its name with or without its namespace and catalog."""
    alias = node.alias
    if alias:
        return {(alias.lower(),)}
    if not isinstance(node, exp.Table):
        return set()
    parts = [p.name.lower() for p in node.parts]
    return {tuple(parts[i:]) for i in range(len(parts))}


def column_path(column: exp.Column) -> list[exp.Identifier]:
    """A column reference's identifiers, outermost first: [namespace, table, column] and the like."""
    parts: list[exp.Identifier] = [column.args[k] for k in _QUALIFIERS if column.args.get(k) is not None]
    return [*parts, column.this]


def after_qualifier(column: exp.Column, names: set[tuple[str, ...]]) -> list[exp.Identifier] | None:
    """What follows the longest leading part of `column` that names the table (`names`): the column and
    any struct fields; None when no leading part names it."""
    path = column_path(column)
    for length in range(min(3, len(path) - 1), 0, -1):
        if tuple(p.name.lower() for p in path[:length]) in names:
            return path[length:]
    return None


def path_expression(qualifier: str | None, path: list[exp.Identifier]) -> exp.Expr:
    """`qualifier.column.field...` (or unqualified) as an expression, quoting kept."""
    column = exp.Column(this=path[0].copy(), table=exp.to_identifier(qualifier) if qualifier is not None else None)
    if len(path) == 1:
        return column
    return exp.Dot.build([column, *(p.copy() for p in path[1:])])


def requalify(node: exp.Expr, sides: dict[str, set[tuple[str, ...]]], statement: str) -> exp.Expr:
    """`node` with each column qualified by one of the statement's tables requalified by that table's
    new name (the key of `sides`; None for unqualified). A qualifier that names two tables is refused."""

    def visit(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Column) or len(column_path(n)) == 1:
            return n
        found = {new: rest for new, names in sides.items() if (rest := after_qualifier(n, names)) is not None}
        if len(found) > 1:
            raise InvalidArgumentError(
                f"sql(): {statement}: {spark_sql(n)} could name a column of either table; give them different aliases"
            )
        if not found:
            if n.parts[0].name.lower() in {k for k in sides if k}:
                raise InvalidArgumentError(
                    f"sql(): {statement}: {spark_sql(n)}: {n.parts[0].name} names neither of the statement's tables"
                )
            return n
        [(new, rest)] = found.items()
        return path_expression(new or None, rest)

    return node.transform(visit, copy=True)


def target_column(node: exp.Expr, names: set[tuple[str, ...]], statement: str, table: str) -> str:
    """The column a SET or an INSERT column list names: a plain column of the target, optionally
    qualified by the target; never a struct field or another table's column."""
    if isinstance(node, exp.Column):
        path = column_path(node)
        rest = path if len(path) == 1 else after_qualifier(node, names)
        if rest is not None and len(rest) == 1:
            return rest[0].name
    if isinstance(node, exp.Identifier):
        return node.name
    raise InvalidArgumentError(
        f"sql(): {statement}: {spark_sql(node)} is not a column of {table} (a struct field cannot be assigned "
        "on its own; assign the whole column)"
    )
