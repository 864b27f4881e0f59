"""Table names: `namespace.table`, each part an identifier short enough to be a directory name."""

from __future__ import annotations

import re

from acidtables.core.errors import InvalidArgumentError

#: \Z, not $: `$` also matches before a trailing newline, which would let "orders\n" through as a name
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_NAMESPACE = "default"
#: Hive's identifier limit; a name is a path component of the default location (file systems allow 255 bytes)
MAX_NAME_LENGTH = 128


def split_name(name: str, *, method: str) -> tuple[str, str]:
    """`"sales.orders"` -> ("sales", "orders"); a bare name is in the `default` namespace.

    The one place a table name is split: user input (which it checks, naming `method` in the error)
    and the full names events, metrics and the CLI label alike."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{method}(): table name must be a string like 'sales.orders', found {name!r}")
    parts = name.split(".")
    if len(parts) == 1:
        parts = [DEFAULT_NAMESPACE, parts[0]]
    if len(parts) != 2 or not all(IDENTIFIER.match(p) for p in parts):
        raise InvalidArgumentError(
            f"{method}(): table name {name!r} must be 'namespace.name' with letters, digits and underscores"
        )
    too_long = [p for p in parts if len(p) > MAX_NAME_LENGTH]
    if too_long:
        raise InvalidArgumentError(
            f"{method}(): {too_long[0][:40]}... has {len(too_long[0])} characters; namespaces and table names have "
            f"at most {MAX_NAME_LENGTH} (each becomes a directory name, which file systems limit to 255 bytes)"
        )
    return parts[0], parts[1]
