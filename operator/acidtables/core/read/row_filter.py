"""A read's `where` (Spark SQL text) as a pyarrow compute expression, evaluated on every row read.

Pruning by partition values and file statistics (`Snapshot.prune`) only narrows which files are opened;
this is what decides which rows come back, so it must mean what Spark means or refuse. sqlglot parses
the text in Spark's dialect; the translation covers what filters are made of (comparisons, `<=>`,
AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL, [NOT] LIKE, + - * and unary minus, typed DATE/TIMESTAMP
literals) and refuses anything else by name, instead of guessing at a function's semantics.

Literals take the column's type, as Spark's implicit casts give them: `dt = '2026-11-01'` on a DATE
compares dates. A TIMESTAMP literal without an offset is read in UTC, the zone the library's Spark
sessions run in. NULL compares as Spark's WHERE does: a row whose condition is NULL is not returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple, cast

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import expressions as exp
from sqlglot.errors import SqlglotError

from acidtables.core.errors import AcidTablesError, InvalidArgumentError

SUPPORTED = (
    "comparisons (= == != <> < <= > >= <=>), AND, OR, NOT, IN, BETWEEN, IS [NOT] NULL, [NOT] LIKE, "
    "+ - *, and literals (numbers, strings, TRUE/FALSE/NULL, DATE '...', TIMESTAMP '...')"
)

_COMPARE: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
}
_ARITHMETIC: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.Add: pc.add_checked,
    exp.Sub: pc.subtract_checked,
    exp.Mul: pc.multiply_checked,
}


_NULL_BOOL = pc.scalar(pa.scalar(None, pa.bool_()))


class _Refused(AcidTablesError):
    """Control flow: the text uses something the translation does not cover (never escapes)."""


class _Literal:
    """A literal not yet given a type: the column it is compared with decides (Spark's implicit cast)."""

    def __init__(self, value: Any, arrow_type: pa.DataType | None = None) -> None:
        self.value = value
        self.arrow_type = arrow_type

    def typed(self, target: pa.DataType | None) -> Any:
        if self.value is None:
            return pa.scalar(None, target or pa.null())
        if isinstance(self.value, str) and target is not None:
            return _cast_text(self.value, target)
        if self.arrow_type is not None and target is not None and _temporal(target):
            return pc.cast(pa.scalar(self.value, self.arrow_type), _naive(target)).cast(target)
        if self.arrow_type is not None:
            return pa.scalar(self.value, self.arrow_type)
        if isinstance(self.value, Decimal) and target is not None and pa.types.is_integer(target):
            return pa.scalar(self.value)  # Spark compares an integer with a decimal literal as decimals: exact
        if isinstance(self.value, Decimal) and (target is None or not pa.types.is_decimal(target)):
            return pa.scalar(float(self.value))  # Spark compares a decimal literal with a double as doubles
        integer = isinstance(self.value, int) and not isinstance(self.value, bool)
        if integer and target is not None and pa.types.is_decimal(target):
            return pa.scalar(Decimal(self.value))  # Spark makes it a DECIMAL(n, 0) beside a decimal: exact
        return pa.scalar(self.value)


def _number(text: str) -> int | float | Decimal:
    """A numeric literal as Spark types it: an integer (a DECIMAL past BIGINT's range), a decimal for
    `1.5` (Spark's DECIMAL literal, compared exactly with DECIMAL columns), a double with an exponent."""
    if text.lstrip("-").isdigit():
        value = int(text)
        return value if -(2**63) <= value < 2**63 else Decimal(text)
    if "e" in text.lower():
        return float(text)
    return Decimal(text)


def _temporal(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type))


def _naive(arrow_type: pa.DataType) -> pa.DataType:
    """A zoned timestamp type without its zone: text and dates become instants in UTC through it."""
    return pa.timestamp(arrow_type.unit) if pa.types.is_timestamp(arrow_type) and arrow_type.tz else arrow_type


def _cast_text(text: str, target: pa.DataType) -> Any:
    if pa.types.is_float32(target):  # Spark compares text with a FLOAT as doubles: '0.1' is not 0.1F
        target = pa.float64()
    try:
        if pa.types.is_timestamp(target):
            return pc.cast(pa.scalar(text), _naive(target)).cast(target)
        if pa.types.is_boolean(target):
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(text)
            return pa.scalar(lowered == "true")
        return pc.cast(pa.scalar(text), target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        raise _Refused(f"the literal '{text}' is not a {target}") from None


class _Translator:
    def __init__(self, types: Mapping[str, pa.DataType], table: str) -> None:
        self.types = types
        self.by_lower = {name.lower(): name for name in types}
        self.table = table
        self.columns: set[str] = set()
        #: whether a column's values are cast to DOUBLE (see RowFilter.prunable)
        self.casts_columns = False

    # --- operands: a field with its type, or a literal waiting for one ------------------------------

    def operand(self, node: exp.Expression) -> tuple[Any, pa.DataType | None] | _Literal:
        if isinstance(node, exp.Paren):
            return self.operand(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return _Literal(node.this)
            return _Literal(_number(node.this))
        if isinstance(node, exp.Boolean):
            return _Literal(bool(node.this), pa.bool_())
        if isinstance(node, exp.Null):
            return _Literal(None)
        if isinstance(node, exp.Neg):
            inner = self.operand(node.this)
            if (
                isinstance(inner, _Literal)
                and isinstance(inner.value, int | float | Decimal)
                and (inner.arrow_type is None or pa.types.is_floating(inner.arrow_type))
            ):
                return _Literal(-inner.value, inner.arrow_type)  # -0.1F is still a FLOAT
            value, value_type = self.value(inner, None)
            return pc.negate_checked(value), value_type
        if isinstance(node, exp.Cast | exp.TryCast) and isinstance(node.this, exp.Literal):
            return self.typed_literal(node)
        if type(node) in _ARITHMETIC:
            left, right = self.operand(node.this), self.operand(node.expression)
            left_value, left_type = self.value(left, _type_of(right))
            right_value, right_type = self.value(right, left_type)
            left_type, right_type = _value_type(left_value, left_type), _value_type(right_value, right_type)
            if _compared_in_double(left_type, right_type):
                # Spark computes a FLOAT or DOUBLE with any other number as DOUBLE (f + 1 is a DOUBLE):
                # Arrow would stay in FLOAT, whose rounding makes other rows match
                left_value, right_value = self.as_double(left_value), self.as_double(right_value)
                return _ARITHMETIC[type(node)](left_value, right_value), pa.float64()
            return _ARITHMETIC[type(node)](left_value, right_value), left_type or right_type
        raise _Refused(f"{node.sql(dialect='spark')} ({type(node).__name__})")

    def column(self, node: exp.Column) -> tuple[Any, pa.DataType]:
        parts = [p.name for p in node.parts]
        name = self.by_lower.get(parts[0].lower())
        if name is None:
            raise InvalidArgumentError(
                f"{self.table}: where names column {parts[0]!r}, which the table does not have; its columns: "
                + ", ".join(self.types)
            )
        self.columns.add(name)
        arrow_type, path = self.types[name], [name]
        for part in parts[1:]:  # a STRUCT's field: `address.city`
            if not pa.types.is_struct(arrow_type):
                raise _Refused(f"{'.'.join(parts)} (field access on a {arrow_type} column)")
            names = {arrow_type.field(i).name.lower(): i for i in range(arrow_type.num_fields)}
            if part.lower() not in names:
                raise InvalidArgumentError(
                    f"{self.table}: where names {'.'.join(parts)}, and {name} has no field {part}"
                )
            child = arrow_type.field(names[part.lower()])
            path.append(child.name)
            arrow_type = child.type
        return pc.field(*path), arrow_type

    def typed_literal(self, node: exp.Cast | exp.TryCast) -> _Literal:
        target = node.to.this
        text = node.this.this
        if target == exp.DataType.Type.DATE:
            return _Literal(_cast_text(text, pa.date32()).as_py(), pa.date32())
        if target in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ):
            return _Literal(_cast_text(text, pa.timestamp("us", tz="UTC")).as_py(), pa.timestamp("us", tz="UTC"))
        if target == exp.DataType.Type.TIMESTAMPNTZ:
            return _Literal(_cast_text(text, pa.timestamp("us")).as_py(), pa.timestamp("us"))
        try:
            if target in (exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT):
                return _Literal(int(Decimal(str(text).strip())))  # Spark truncates: CAST(1.5 AS INT) is 1
            if target == exp.DataType.Type.FLOAT:  # `0.1F`: a FLOAT beside a FLOAT column, widened beside a DOUBLE
                return _Literal(pa.scalar(float(text), pa.float32()).as_py(), pa.float32())
            if target == exp.DataType.Type.DOUBLE:  # `0.1D`: a FLOAT column beside it is compared as doubles
                return _Literal(float(text), pa.float64())
            if target == exp.DataType.Type.DECIMAL:
                return _Literal(text, None)
        except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
            raise _Refused(f"{node.sql(dialect='spark')} (the literal {text!r} is not a number)") from None
        raise _Refused(node.sql(dialect="spark"))

    def value(self, operand: tuple[Any, pa.DataType | None] | _Literal, other: pa.DataType | None) -> tuple[Any, Any]:
        if isinstance(operand, _Literal):
            if isinstance(operand.value, str) and other is not None and pa.types.is_decimal(other):
                return _cast_text(operand.value, other), other
            return operand.typed(other), other if isinstance(operand.value, str) or operand.value is None else None
        return operand

    def as_double(self, value: Any) -> Any:
        """A column's expression or a typed literal, as a DOUBLE: rounded past 2**53 as Spark rounds, not
        refused as Arrow's checked cast would."""
        if not isinstance(value, pa.Scalar):
            self.casts_columns = True
        return value.cast(pa.float64(), safe=False)

    # --- conditions ----------------------------------------------------------------------------------

    def condition(self, node: exp.Expression) -> Any:
        if isinstance(node, exp.Paren):
            return self.condition(node.this)
        if isinstance(node, exp.And):
            return self.condition(node.this) & self.condition(node.expression)
        if isinstance(node, exp.Or):
            return self.condition(node.this) | self.condition(node.expression)
        if isinstance(node, exp.Not):
            return ~self.condition(node.this)
        if type(node) in _COMPARE or isinstance(node, exp.NullSafeEQ):
            left, right = self.operand(node.this), self.operand(node.expression)
            _check_comparable(left, right, node)
            left_value, left_type = self.value(left, _type_of(right))
            right_value, _ = self.value(right, left_type)
            if _compared_in_double(
                _value_type(left_value, _type_of(left)), _value_type(right_value, _type_of(right))
            ):  # i = 1.0F, f = i, f = 0.1, b = 1e15: Spark compares in DOUBLE (Arrow: in FLOAT, or refuses)
                left_value, right_value = self.as_double(left_value), self.as_double(right_value)
                # and in DOUBLE's NaN order: `i < CAST('NaN' AS DOUBLE)` holds for every number
                left = left if isinstance(left, _Literal) else (left_value, pa.float64())
                right = right if isinstance(right, _Literal) else (right_value, pa.float64())
            nan_aware = _nan_ordered(node, left, right, left_value, right_value)
            if nan_aware is not None:
                return nan_aware
            if isinstance(node, exp.NullSafeEQ):
                both_null = pc.is_null(left_value) & pc.is_null(right_value)
                neither = pc.is_valid(left_value) & pc.is_valid(right_value)
                return both_null | (neither & pc.coalesce(pc.equal(left_value, right_value), pc.scalar(False)))
            return _COMPARE[type(node)](left_value, right_value)
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            value, _ = self.value(self.operand(node.this), None)
            return pc.is_null(value)
        if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
            field, field_type = self.value(self.operand(node.this), None)
            options = [self.operand(e) for e in node.expressions]
            if not all(isinstance(o, _Literal) for o in options):
                raise _Refused(f"{node.sql(dialect='spark')} (IN takes literals here)")
            values = [o.typed(field_type) for o in options if isinstance(o, _Literal)]
            present = [v.as_py() for v in values if v.is_valid]
            with_null = len(present) < len(values)
            if _compared_as_double(field_type, [v.type for v in values]):
                field, field_type = self.as_double(field), pa.float64()
                present = [float(v) for v in present]
            elif field_type is not None and pa.types.is_integer(field_type):
                # a decimal value compares exactly: 2.5 is no integer's, 2.0 is 2's
                present = [int(v) for v in present if v == int(v)]
            try:
                value_set = pa.array(present, field_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                raise _Refused(f"{node.sql(dialect='spark')} (a value that is not of {field_type})") from None
            found = pc.is_in(field, value_set=value_set) if present else pc.scalar(False)
            # Spark's three-valued IN: NULL IN (...) is NULL, and x IN (1, NULL) is true or NULL, never
            # false, so that NOT IN returns neither
            unknown = pc.is_null(field) | pc.scalar(with_null)
            return pc.if_else(found, pc.scalar(True), pc.if_else(unknown, _NULL_BOOL, pc.scalar(False)))
        if isinstance(node, exp.Between):  # Spark's x >= low AND x <= high: their types, their NaN order
            low = exp.GTE(this=node.this.copy(), expression=node.args["low"].copy())
            high = exp.LTE(this=node.this.copy(), expression=node.args["high"].copy())
            return self.condition(low) & self.condition(high)
        if isinstance(node, exp.Like) and isinstance(node.expression, exp.Literal) and node.expression.is_string:
            value, value_type = self.value(self.operand(node.this), None)
            if value_type is None or not pa.types.is_string(value_type):
                raise _Refused(f"{node.sql(dialect='spark')} (LIKE on a non-string value)")
            matched = pc.match_like(value, pattern=node.expression.this)
            return ~matched if node.args.get("negate") else matched
        if isinstance(node, exp.Boolean):
            return pc.scalar(bool(node.this))
        if isinstance(node, exp.Column):
            value, value_type = self.column(node)
            if not pa.types.is_boolean(value_type):
                raise InvalidArgumentError(f"{self.table}: where is the column {node.sql()}, which is not BOOLEAN")
            return value
        raise _Refused(f"{node.sql(dialect='spark')} ({type(node).__name__})")


def _value_type(value: Any, declared: pa.DataType | None) -> pa.DataType | None:
    """An operand's type: what it was declared, else a typed literal's own."""
    return declared if declared is not None else getattr(value, "type", None)


def _numeric(arrow_type: pa.DataType | None) -> bool:
    return arrow_type is not None and (
        pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)
    )


def _compared_in_double(left: pa.DataType | None, right: pa.DataType | None) -> bool:
    """Whether Spark computes or compares two numbers as DOUBLE where Arrow would not: a FLOAT or DOUBLE
    beside any other number (ANSI widens INT with FLOAT to DOUBLE; Arrow casts a BIGINT past 2**53 to
    DOUBLE only with an error, and an INT to FLOAT)."""
    if not (_numeric(left) and _numeric(right)) or left == right:
        return False
    return bool(pa.types.is_floating(left) or pa.types.is_floating(right))


def _compared_as_double(field_type: pa.DataType | None, value_types: list[pa.DataType]) -> bool:
    """Whether Spark's IN compares a field with these values as doubles: when `=` would with any one of
    them (0.1, 0.1D or '0.1' beside a FLOAT; a FLOAT or DOUBLE beside an integer or a DECIMAL)."""
    return any(_compared_in_double(field_type, value_type) for value_type in value_types)


def _kind(operand: tuple[Any, pa.DataType | None] | _Literal) -> str | None:
    """What Spark would compare an operand as: number, text, date, timestamp, boolean, or None (anything)."""
    if isinstance(operand, _Literal):
        if operand.value is None:
            return None
        if isinstance(operand.value, bool):
            return "boolean"
        if operand.arrow_type is not None:
            if pa.types.is_date(operand.arrow_type):
                return "date"
            if pa.types.is_timestamp(operand.arrow_type):
                return "timestamp"
            if pa.types.is_floating(operand.arrow_type):  # 0.1F, 0.1D
                return "number"
            return None
        return "text" if isinstance(operand.value, str) else "number"
    arrow_type = operand[1]
    if arrow_type is None:
        return None
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "text"
    if _numeric(arrow_type):
        return "number"
    if pa.types.is_date(arrow_type):
        return "date"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    return None


#: pairs Spark compares with a cast this translation does not make the same way: refused, not guessed
_INCOMPARABLE = frozenset(
    {
        ("text", "number"),
        ("number", "text"),
        ("number", "date"),
        ("date", "number"),
        ("number", "timestamp"),
        ("timestamp", "number"),
        ("date", "timestamp"),
        ("timestamp", "date"),
        ("text", "date"),
        ("date", "text"),
        ("text", "timestamp"),
        ("timestamp", "text"),
        # Spark's analyzer refuses a boolean beside anything but a boolean (or a string literal)
        *((kind, "boolean") for kind in ("number", "text", "date", "timestamp")),
        *(("boolean", kind) for kind in ("number", "text", "date", "timestamp")),
    }
)


def _check_comparable(
    left: tuple[Any, pa.DataType | None] | _Literal, right: tuple[Any, pa.DataType | None] | _Literal, node: Any
) -> None:
    kinds = (_kind(left), _kind(right))
    string_literal = any(isinstance(o, _Literal) and isinstance(o.value, str) for o in (left, right))
    if kinds in _INCOMPARABLE and not string_literal:  # a string literal takes the other side's type
        raise _Refused(f"{node.sql(dialect='spark')} (a {kinds[0]} compared with a {kinds[1]})")


_FLIPPED: dict[type[Any], type[Any]] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def _nan_ordered(
    node: Any,
    left: tuple[Any, pa.DataType | None] | _Literal,
    right: tuple[Any, pa.DataType | None] | _Literal,
    left_value: Any,
    right_value: Any,
) -> Any:
    """A comparison of a FLOAT/DOUBLE column with a literal in Spark's NaN order (NaN equals NaN and sorts
    above every other number), where Arrow's IEEE comparison differs; None where they agree."""
    op = type(node)
    if not isinstance(left, _Literal) and not isinstance(right, _Literal):
        return _nan_ordered_columns(op, left_value, left[1], right_value, right[1])
    if isinstance(left, _Literal) and not isinstance(right, _Literal):
        left, right, left_value, right_value = right, left, right_value, left_value
        op = _FLIPPED.get(op, op)
    if isinstance(left, _Literal) or not isinstance(right, _Literal) or left[1] is None:
        return None
    if not pa.types.is_floating(left[1]) or not isinstance(right_value, pa.Scalar) or not right_value.is_valid:
        return None
    literal = float(right_value.as_py())
    is_nan = pc.is_nan(left_value)
    if math.isnan(literal):  # only NaN equals NaN, and nothing is above it
        by_op = {
            exp.EQ: is_nan,
            exp.NullSafeEQ: pc.coalesce(is_nan, pc.scalar(False)),
            exp.NEQ: ~is_nan,
            exp.GTE: is_nan,
            exp.GT: pc.scalar(False),
            exp.LT: ~is_nan,
            exp.LTE: pc.is_valid(left_value),
        }
        return by_op.get(op)
    if op in (exp.GT, exp.GTE):
        return _COMPARE[op](left_value, right_value) | is_nan
    return None


def _nan_ordered_columns(
    op: type[Any], left: Any, left_type: pa.DataType | None, right: Any, right_type: pa.DataType | None
) -> Any:
    """Two values of which one at least is FLOAT/DOUBLE compared in Spark's NaN order (NaN equals NaN and
    sorts above every other number; a NULL side stays NULL); None where Arrow's comparison agrees."""
    floating = [t is not None and pa.types.is_floating(t) for t in (left_type, right_type)]
    if not any(floating):
        return None
    nan_left = pc.is_nan(left) if floating[0] else pc.scalar(False)
    nan_right = pc.is_nan(right) if floating[1] else pc.scalar(False)
    equal = pc.equal(left, right) | (nan_left & nan_right)
    by_op = {
        exp.EQ: equal,
        exp.NullSafeEQ: (pc.is_null(left) & pc.is_null(right)) | (pc.is_valid(left) & pc.is_valid(right) & equal),
        exp.NEQ: ~equal,
        exp.GT: pc.greater(left, right) | (nan_left & ~nan_right),
        exp.GTE: pc.greater_equal(left, right) | (nan_left & pc.is_valid(right)),
        exp.LT: pc.less(left, right) | (nan_right & ~nan_left),
        exp.LTE: pc.less_equal(left, right) | (nan_right & pc.is_valid(left)),
    }
    return by_op.get(op)


def _type_of(operand: tuple[Any, pa.DataType | None] | _Literal) -> pa.DataType | None:
    if isinstance(operand, _Literal):
        return operand.arrow_type
    return operand[1]


class RowFilter(NamedTuple):
    expression: pc.Expression
    #: the columns it reads
    columns: frozenset[str]
    #: whether Arrow may prune row groups by it: not where it casts a column to DOUBLE, since Arrow's
    #: pruning casts the column's statistics with a checked cast and fails on a BIGINT past 2**53
    prunable: bool


def row_filter(where: str, types: Mapping[str, pa.DataType], *, table: str) -> RowFilter:
    """`where` as an expression over the columns named in `types` (the table's read schema), with the
    columns it reads. InvalidArgumentError names an unknown column, a literal that is not of its
    column's type, a syntax error, or what the translation does not cover (with what it does)."""
    if not isinstance(where, str) or not where.strip():
        raise InvalidArgumentError(f"{table}: where must be a non-empty SQL condition, found {where!r}")
    try:
        tree = sqlglot.parse_one(where, read="spark")
    except SqlglotError as exc:
        raise InvalidArgumentError(f"{table}: where {where!r} is not a SQL condition: {exc}") from None
    translator = _Translator(types, table)
    try:
        expression = translator.condition(cast(exp.Expression, tree))
    except _Refused as exc:
        raise InvalidArgumentError(
            f"{table}: where {where!r} uses {exc}, which reads without Spark do not evaluate; they take {SUPPORTED}. "
            "Read through SparkTable.read(where=...) for the rest of Spark SQL"
        ) from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidArgumentError(f"{table}: where {where!r} compares values of different types: {exc}") from None
    if not isinstance(expression, pc.Expression):
        expression = pc.scalar(expression)
    return RowFilter(expression, frozenset(translator.columns), prunable=not translator.casts_columns)


__all__ = ["SUPPORTED", "RowFilter", "row_filter"]
