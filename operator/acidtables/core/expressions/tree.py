"""The predicate syntax tree: the closed set of nodes core reasons about, and their stored form.

A node is persisted inside commit records (a transaction's read predicates, conflict-rules §17), so
`to_json`/`expr_from_json` are a storage format; `negate` and `restrict_to_columns` rewrite trees in
the ways that are sound for "might match" questions (`bounds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

Literal: TypeAlias = str | int | float | bool | None

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class Expr:
    """A predicate node. Subclasses are the closed set below; `to_json` is their persisted form."""

    def to_json(self) -> list[Any]:
        raise NotImplementedError

    def columns(self) -> frozenset[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class Const(Expr):
    value: bool

    def to_json(self) -> list[Any]:
        return ["const", self.value]

    def columns(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True)
class Compare(Expr):
    column: str
    op: str
    value: Literal

    def to_json(self) -> list[Any]:
        return ["cmp", self.column, self.op, self.value]

    def columns(self) -> frozenset[str]:
        return frozenset([self.column])


@dataclass(frozen=True)
class In(Expr):
    column: str
    values: tuple[Literal, ...]
    negated: bool = False

    def to_json(self) -> list[Any]:
        return ["in", self.column, list(self.values), self.negated]

    def columns(self) -> frozenset[str]:
        return frozenset([self.column])


@dataclass(frozen=True)
class IsNull(Expr):
    column: str
    negated: bool = False

    def to_json(self) -> list[Any]:
        return ["isnull", self.column, self.negated]

    def columns(self) -> frozenset[str]:
        return frozenset([self.column])


@dataclass(frozen=True)
class And(Expr):
    children: tuple[Expr, ...]

    def to_json(self) -> list[Any]:
        return ["and", [c.to_json() for c in self.children]]

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(c.columns() for c in self.children))


@dataclass(frozen=True)
class Or(Expr):
    children: tuple[Expr, ...]

    def to_json(self) -> list[Any]:
        return ["or", [c.to_json() for c in self.children]]

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(c.columns() for c in self.children))


@dataclass(frozen=True)
class Not(Expr):
    child: Expr

    def to_json(self) -> list[Any]:
        return ["not", self.child.to_json()]

    def columns(self) -> frozenset[str]:
        return self.child.columns()


TRUE = Const(True)


def expr_from_json(data: Sequence[Any]) -> Expr:
    kind = data[0]
    if kind == "const":
        return Const(bool(data[1]))
    if kind == "cmp":
        return Compare(data[1], data[2], data[3])
    if kind == "in":
        return In(data[1], tuple(data[2]), bool(data[3]))
    if kind == "isnull":
        return IsNull(data[1], bool(data[2]))
    if kind == "and":
        return And(tuple(expr_from_json(c) for c in data[1]))
    if kind == "or":
        return Or(tuple(expr_from_json(c) for c in data[1]))
    if kind == "not":
        return Not(expr_from_json(data[1]))
    raise ValueError(f"unknown predicate node {kind!r} in a stored commit record")


def negate(expr: Expr) -> Expr:
    """Push a NOT down to the leaves, so `might_match` never has to reason about a negated range."""
    if isinstance(expr, Const):
        return Const(not expr.value)
    if isinstance(expr, Compare):
        flipped = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}[expr.op]
        # SQL three-valued logic: NOT (x < 1) is not true for NULL x either, so nulls stay excluded.
        return Compare(expr.column, flipped, expr.value)
    if isinstance(expr, In):
        return In(expr.column, expr.values, not expr.negated)
    if isinstance(expr, IsNull):
        return IsNull(expr.column, not expr.negated)
    if isinstance(expr, And):
        return Or(tuple(negate(c) for c in expr.children))
    if isinstance(expr, Or):
        return And(tuple(negate(c) for c in expr.children))
    if isinstance(expr, Not):
        return expr.child
    raise TypeError(f"not a predicate: {expr!r}")


def in_partitions(partitions: Sequence[Mapping[str, Literal]]) -> Expr:
    """Exactly the rows of these partitions (values as the log keeps them; None is the NULL partition).

    Built as a tree, never as SQL text: a value holding a quote or a backslash would read back from
    SQL as another value, and an overwrite or truncate selects the files it removes with this."""
    clauses = [
        And(tuple(IsNull(column) if value is None else Compare(column, "=", value) for column, value in p.items()))
        for p in partitions
    ]
    return Or(tuple(clauses)) if clauses else Const(False)


def restrict_to_columns(expr: Expr, columns: frozenset[str]) -> Expr:
    """Keep only the parts of `expr` about `columns`, widening the rest to TRUE.

    Used to take the partition part of a row predicate (D-22: only predicates on the target's partition
    columns narrow the read set at partition granularity). Widening is sound only under AND and OR,
    so a NOT is pushed down first.
    """
    if isinstance(expr, Not):
        return restrict_to_columns(negate(expr.child), columns)
    if isinstance(expr, And):
        return And(tuple(restrict_to_columns(c, columns) for c in expr.children))
    if isinstance(expr, Or):
        return Or(tuple(restrict_to_columns(c, columns) for c in expr.children))
    if isinstance(expr, Const):
        return expr
    return expr if expr.columns() <= columns else TRUE
