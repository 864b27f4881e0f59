"""Rendering command results and errors: an aligned human table, or one JSON document (style §3 "CLI output").

Every command builds one result object that knows both renderings, so no command can print in one
mode and nothing in the other (pyiceberg's `JsonOutput.files` did). The helpers here fix the shared
conventions: times are RFC 3339 in UTC, missing values print as `-`, numbers align right, and there is
no colour at all, so output piped into a file or another program never carries escape codes.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from acidtables.core import (
    AcidTablesError,
    ConcurrentModificationException,
    CoordinatorUnavailable,
    StorageUnavailableError,
)

#: exit codes; 2 is argparse's own for usage errors
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3
#: etcd, or the table's storage, did not answer (nothing was changed; try again later)
EXIT_UNAVAILABLE = 4
EXIT_INTERRUPTED = 130


class CommandError(AcidTablesError):
    """A command cannot do what was asked (e.g. an etcd already runs for that directory)."""


class UsageError(AcidTablesError):
    """The command line itself is wrong (argparse's complaint); exit code 2."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class Result(Protocol):
    """What every command returns: one object, rendered one way or the other."""

    def to_json(self) -> dict[str, Any]: ...

    def to_text(self) -> str: ...


def rfc3339(value: datetime | None) -> str | None:
    """`2026-11-22T10:00:00.123456Z`: UTC, microseconds kept (time versions differ by 1 µs, D-19)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return rfc3339(value) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) or "-"
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns aligned with two spaces between them; columns holding only numbers align right."""
    raw = [list(row) for row in rows]
    cells = [[_cell(v) for v in row] for row in raw]
    numeric = [bool(raw) and all(_is_number(r[i]) or r[i] is None for r in raw) for i in range(len(headers))]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """`name:   value` lines with the values aligned, for one object's attributes."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "\n".join(f"{(k + ':').ljust(width)}  {_cell(v)}".rstrip() for k, v in pairs)


def render(result: Result, *, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        out.write(result.to_text().rstrip("\n") + "\n")
    out.flush()


def exit_code(exc: BaseException) -> int:
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, ConcurrentModificationException):
        return EXIT_CONFLICT
    if isinstance(exc, CoordinatorUnavailable | StorageUnavailableError):  # both: try again later
        return EXIT_UNAVAILABLE
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_ERROR


def error_document(exc: BaseException) -> dict[str, Any]:
    """`{"error": class name, "message": ...}`, plus the conflict's fields for a lost commit."""
    if isinstance(exc, ConcurrentModificationException):
        return exc.to_dict()
    if isinstance(exc, KeyboardInterrupt):
        return {"error": "Interrupted", "message": "interrupted"}
    if isinstance(exc, AcidTablesError):
        return {"error": type(exc).__name__, "message": str(exc)}
    # not one of ours: a bug or an environment problem nobody anticipated; say so plainly
    return {"error": type(exc).__name__, "message": f"unexpected error: {exc}"}


def render_error(exc: BaseException, *, as_json: bool, verbose: bool, err: TextIO) -> int:
    """Write the error to stderr (tracebacks only with --verbose) and return the exit code."""
    if verbose and not isinstance(exc, UsageError | KeyboardInterrupt):
        err.write("".join(traceback.format_exception(exc)))
    document = error_document(exc)
    if as_json:
        err.write(json.dumps(document, indent=2) + "\n")
    else:
        if isinstance(exc, UsageError):
            err.write(exc.usage)
        unexpected = not isinstance(exc, AcidTablesError | KeyboardInterrupt)
        hint = " (run with --verbose for the traceback)" if unexpected and not verbose else ""
        err.write(f"acidtables: error: {document['message']}{hint}\n")
    err.flush()
    return exit_code(exc)
