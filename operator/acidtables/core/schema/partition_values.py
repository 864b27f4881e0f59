"""How the log spells a partition value: one spelling per value, whoever gives it.

Partition values are compared as they are in the log (conflict detection's partitions, a primary-key
table's merge groups, pruning), so `2026` and `"2026"` of an INT column must be one value. The spelling
is what Spark's Hive-style directory names read back as: numbers and booleans typed, DATE, TIMESTAMP
and DECIMAL as Spark writes them, text as text. The core API (`add_files`) and the Spark writers both
spell values through here.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.expressions import Literal
from acidtables.core.log.records import TableMetadata

#: SQL names of the text types: a partition value of these is its directory name's text
TEXT_TYPES = frozenset({"STRING", "VARCHAR", "CHAR", "TEXT"})

#: SQL names of the integer types (partition values of these columns are Python ints in the log)
INTEGRAL_TYPES = frozenset({"BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT", "LONG", "SHORT", "BYTE"})

FLOATING_TYPES = frozenset({"DOUBLE", "FLOAT", "REAL"})


def _column_type(meta: TableMetadata, column: str) -> str:
    return next(c.type for c in meta.columns if c.name == column).upper()


def typed_partition_value(meta: TableMetadata, column: str, raw: str | None) -> Literal:
    """A partition value from its Hive-style directory name, typed as the column is."""
    if raw is None:
        return None
    type_ = _column_type(meta, column)
    if type_ in INTEGRAL_TYPES:
        return int(raw)
    if type_ in FLOATING_TYPES:
        return float(raw)
    if type_ == "BOOLEAN":
        return raw.lower() == "true"
    return raw


def log_partition_value(meta: TableMetadata, column: str, value: object) -> Literal:
    """A partition value given by a user or collected from a DataFrame, as the log keeps it: what
    `typed_partition_value` makes of the directory Spark would write for it (DATE, TIMESTAMP and
    DECIMAL as Spark spells them, numbers and booleans typed, text as text). Raises
    InvalidArgumentError for a value the column cannot hold."""
    if value is None:
        return None
    type_ = _column_type(meta, column)
    try:
        if isinstance(value, datetime) and type_ == "TIMESTAMP":
            fraction = f".{value.microsecond:06d}".rstrip("0") if value.microsecond else ""
            return value.strftime("%Y-%m-%d %H:%M:%S") + fraction
        if isinstance(value, date) and type_ == "DATE":
            return (value.date() if isinstance(value, datetime) else value).isoformat()
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, bool) and type_ in INTEGRAL_TYPES | FLOATING_TYPES:
            raise ValueError("a boolean is not a number")
        if isinstance(value, bool | int | float | str):
            if isinstance(value, str) or type_.startswith(("DECIMAL", "DATE", "TIMESTAMP")):
                return typed_partition_value(meta, column, str(value))
            if type_ in INTEGRAL_TYPES and isinstance(value, float):
                if not value.is_integer():
                    raise ValueError("not a whole number")
                return int(value)
            if type_ in FLOATING_TYPES:
                return float(value)
            if type_.split("(")[0] in TEXT_TYPES:
                return str(value).lower() if isinstance(value, bool) else str(value)
            return value
    except ValueError as exc:
        raise InvalidArgumentError(
            f"partition value {value!r} for column {column} ({type_}) is not a {type_} value ({exc})"
        ) from None
    raise InvalidArgumentError(
        f"partition value {value!r} for column {column} ({type_}) is a {type(value).__name__}; give a string, "
        "number, boolean, date or datetime"
    )


__all__ = ["INTEGRAL_TYPES", "TEXT_TYPES", "log_partition_value", "typed_partition_value"]
