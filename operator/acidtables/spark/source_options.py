"""The `acidtables` data source's options, every one checked in one place (issue 24, item 5).

Spark hands a Python data source its options as text, lower-cased (`CaseInsensitiveDict`), in a
planning worker. Each is checked here, before anything else runs, for its name (an unknown option is
refused, naming the known ones: a misspelt `versionAsOf` would otherwise read the head silently), its
type and its range, and for the step it belongs to (`versionAsOf` on a write is refused, not ignored).
The message names the option as the user spelt it in the documentation, the value given and what is
accepted; the data source's `user_facing` wrapper makes it the first line of Spark's error.

Settings (ACIDTABLES_* variables) are options too: drop the prefix, lower-case, a dot for the first
underscore (`etcd.endpoints`, `commit.max_attempts`). Each is checked by the rule `Settings.from_env`
applies to its variable, so the two can never accept different values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from acidtables.core import ENDPOINTS, VARIABLES, WAREHOUSE, ConfigurationError, InvalidArgumentError, Settings

#: the options the data source reads itself, as the documentation spells them (Spark lower-cases keys)
PATH, TABLE, LOCAL, VERSION_AS_OF, TIMESTAMP_AS_OF = "path", "table", "local", "versionAsOf", "timestampAsOf"
_OWN = {name.lower(): name for name in (PATH, TABLE, LOCAL, VERSION_AS_OF, TIMESTAMP_AS_OF)}
#: options only a read takes: a write always commits on top of the newest version
_READ_ONLY = frozenset({VERSION_AS_OF, TIMESTAMP_AS_OF})
#: settings that only mean something in pairs (checked together when the catalog is built) and whose
#: value may be secret: never echoed
_PAIRED = frozenset(
    {"ACIDTABLES_ETCD_USER", "ACIDTABLES_ETCD_PASSWORD", "ACIDTABLES_ETCD_CERT_FILE", "ACIDTABLES_ETCD_KEY_FILE"}
)
_SECRET = frozenset({"ACIDTABLES_ETCD_PASSWORD"})
_VERSION = re.compile(r"\s*\d+\s*")

Step = Literal["read", "write"]


def setting_option(variable: str) -> str:
    """The option that sets an ACIDTABLES_* variable: ACIDTABLES_ETCD_ENDPOINTS is etcd.endpoints."""
    return variable.removeprefix("ACIDTABLES_").lower().replace("_", ".", 1)


def option_variable(option: str) -> str:
    """The ACIDTABLES_* variable an option sets: etcd.endpoints (or etcd_endpoints) is ACIDTABLES_ETCD_ENDPOINTS."""
    return "ACIDTABLES_" + option.upper().replace(".", "_")


def known_options() -> str:
    """Every option, for the message that refuses an unknown one."""
    own = ", ".join((PATH, TABLE, VERSION_AS_OF, TIMESTAMP_AS_OF, LOCAL))
    return f"{own} and the settings {', '.join(sorted(setting_option(v) for v in VARIABLES))}"


@dataclass(frozen=True)
class SourceOptions:
    """The options of one read or write, checked."""

    #: the table's name (`load(name)` / `save(name)`, or the `table` option)
    table: str
    #: time travel to this ID version (reads only)
    version_as_of: int | None = None
    #: time travel to this time, ISO-8601 (reads only)
    timestamp_as_of: str | None = None
    #: run against the embedded development etcd under this directory ("" for the default); None: not
    local: str | None = None
    #: ACIDTABLES_* variable -> value, for the settings given as options
    settings: Mapping[str, str] = field(default_factory=dict)


def _refuse(option: str, value: str, accepted: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"format('acidtables'): option {option}={value!r} {accepted}")


def _version(value: str) -> int:
    if not _VERSION.fullmatch(value):
        raise _refuse(
            VERSION_AS_OF, value, "is not a version; use a whole number 0 or more (an ID version, as history() lists)"
        )
    return int(value)


def _timestamp(value: str) -> str:
    try:
        datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise _refuse(
            TIMESTAMP_AS_OF,
            value,
            "is not a time; use ISO-8601, e.g. '2026-11-22 10:00:00' or '2026-11-22T10:00:00Z' (UTC unless it "
            "names an offset)",
        ) from None
    return value.strip()


def _setting(option: str, variable: str, value: str) -> None:
    """`value` by the rule Settings.from_env applies to `variable` (with placeholders for the two
    settings every catalog needs, so each option is judged alone)."""
    shown = "***" if variable in _SECRET else repr(value)
    if variable in _PAIRED:
        if not value.strip():
            raise InvalidArgumentError(f"format('acidtables'): option {option}={shown} is empty; give a value")
        return  # text; the pair's rule (both or neither) is checked with the environment, in the catalog
    probe = {ENDPOINTS: "http://127.0.0.1:2379", WAREHOUSE: "/warehouse", variable: value}
    try:
        Settings.from_env(probe)
    except ConfigurationError as exc:  # the variable's own rule: say it about the option
        raise InvalidArgumentError(
            f"format('acidtables'): option {option}={shown} is not accepted: {exc} (the option sets {variable})"
        ) from None


def parse_options(options: Mapping[str, str], step: Step) -> SourceOptions:
    """Check every option of a `step` ("read" or "write"): unknown names, types, ranges, and which
    step takes which. Raises InvalidArgumentError naming the option, its value and what is accepted."""
    own: dict[str, str] = {}
    settings: dict[str, str] = {}
    for key, raw in options.items():
        value = "" if raw is None else str(raw)
        name = _OWN.get(key.lower())
        if name is not None:
            own[name] = value
            continue
        if key.lower() == "paths":  # Spark's spelling of load('a', 'b')
            raise InvalidArgumentError(
                f"format('acidtables'): {step}s one table; name it once, e.g. .load('sales.orders') (got {value})"
            )
        variable = option_variable(key)
        if variable not in VARIABLES:
            raise InvalidArgumentError(
                f"format('acidtables'): unknown option {key!r}; the options are {known_options()}"
            )
        _setting(key, variable, value)
        settings[variable] = value
    for name in sorted(_READ_ONLY & own.keys()):
        if step == "write":
            raise InvalidArgumentError(
                f"format('acidtables'): option {name} is for reads; a write always commits on top of the newest "
                "version (leave it out)"
            )
    path, table = own.get(PATH, "").strip(), own.get(TABLE, "").strip()
    if path and table and path != table:
        raise InvalidArgumentError(
            f"format('acidtables'): the table is named twice, {path!r} (load/save) and {table!r} (option table); "
            "name it once"
        )
    name = path or table
    if not name:
        verb = "load" if step == "read" else "save"
        raise InvalidArgumentError(f"format('acidtables'): name the table, e.g. .{verb}('sales.orders')")
    if VERSION_AS_OF in own and TIMESTAMP_AS_OF in own:
        raise InvalidArgumentError(
            f"format('acidtables'): give {VERSION_AS_OF} or {TIMESTAMP_AS_OF}, not both "
            f"(got {own[VERSION_AS_OF]!r} and {own[TIMESTAMP_AS_OF]!r})"
        )
    if LOCAL in own and settings:
        given = ", ".join(sorted(setting_option(v) for v in settings))
        raise InvalidArgumentError(
            f"format('acidtables'): option local runs an embedded etcd; it takes no etcd or warehouse settings "
            f"(got {given})"
        )
    return SourceOptions(
        table=name,
        version_as_of=_version(own[VERSION_AS_OF]) if VERSION_AS_OF in own else None,
        timestamp_as_of=_timestamp(own[TIMESTAMP_AS_OF]) if TIMESTAMP_AS_OF in own else None,
        local=own.get(LOCAL),
        settings=settings,
    )


__all__ = ["SourceOptions", "known_options", "option_variable", "parse_options", "setting_option"]
