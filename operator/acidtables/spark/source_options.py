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
#: Delta's idempotent batch writes: a write of (app id, version) the table already has is skipped
TXN_APP_ID, TXN_VERSION = "txnAppId", "txnVersion"
#: Spark's own option of a stream's sink, which keys its batches (the query id written in it)
CHECKPOINT_LOCATION = "checkpointLocation"
#: a stream's source, in Delta's names
MAX_FILES_PER_TRIGGER, MAX_BYTES_PER_TRIGGER = "maxFilesPerTrigger", "maxBytesPerTrigger"
STARTING_VERSION, STARTING_TIMESTAMP = "startingVersion", "startingTimestamp"
SKIP_CHANGE_COMMITS, IGNORE_DELETES, FAIL_ON_DATA_LOSS = "skipChangeCommits", "ignoreDeletes", "failOnDataLoss"
READ_CHANGE_FEED = "readChangeFeed"
#: Delta options acidtables does not take, and what to use instead
_REPLACED = {
    "ignorechanges": "Delta deprecated it for skipChangeCommits, which passes over commits that rewrite or remove "
    "rows; readChangeFeed=true streams the changed rows themselves",
}

#: "schema" is Spark asking a read's schema, before it says whether the read is a batch or a stream: it
#: takes the options of both, and the reader that follows checks its own
Step = Literal["read", "write", "stream_read", "stream_write", "schema"]
_STEP_NAMES: dict[Step, str] = {
    "read": "a read (spark.read)",
    "write": "a write (df.write)",
    "stream_read": "a stream's source (spark.readStream)",
    "stream_write": "a stream's sink (df.writeStream)",
}
_ALL: frozenset[Step] = frozenset(_STEP_NAMES)
#: option -> the steps that take it; any other step refuses it, naming where it belongs
_STEPS: dict[str, frozenset[Step]] = {
    PATH: _ALL,
    TABLE: _ALL,
    VERSION_AS_OF: frozenset({"read"}),
    TIMESTAMP_AS_OF: frozenset({"read"}),
    LOCAL: _ALL,
    TXN_APP_ID: frozenset({"write"}),
    TXN_VERSION: frozenset({"write"}),
    CHECKPOINT_LOCATION: frozenset({"stream_write"}),
    **{
        name: frozenset({"stream_read"})
        for name in (
            MAX_FILES_PER_TRIGGER,
            MAX_BYTES_PER_TRIGGER,
            STARTING_VERSION,
            STARTING_TIMESTAMP,
            SKIP_CHANGE_COMMITS,
            IGNORE_DELETES,
            FAIL_ON_DATA_LOSS,
            READ_CHANGE_FEED,
        )
    },
}
_OWN = {name.lower(): name for name in _STEPS}
#: why an option is refused on a step, where the general rule would not tell the user what to do
_WHY_NOT: dict[tuple[str, Step], str] = {
    (VERSION_AS_OF, "write"): "a write always commits on top of the newest version (leave it out)",
    (TIMESTAMP_AS_OF, "write"): "a write always commits on top of the newest version (leave it out)",
    (VERSION_AS_OF, "stream_read"): f"a stream starts where {STARTING_VERSION} or {STARTING_TIMESTAMP} says",
    (TIMESTAMP_AS_OF, "stream_read"): f"a stream starts where {STARTING_VERSION} or {STARTING_TIMESTAMP} says",
    (TXN_APP_ID, "stream_write"): "a stream's batches are already keyed by its query id and batch id",
    (TXN_VERSION, "stream_write"): "a stream's batches are already keyed by its query id and batch id",
}
#: settings that only mean something in pairs (checked together when the catalog is built) and whose
#: value may be secret: never echoed
_PAIRED = frozenset(
    {"ACIDTABLES_ETCD_USER", "ACIDTABLES_ETCD_PASSWORD", "ACIDTABLES_ETCD_CERT_FILE", "ACIDTABLES_ETCD_KEY_FILE"}
)
_SECRET = frozenset({"ACIDTABLES_ETCD_PASSWORD"})
_WHOLE = re.compile(r"\s*\d+\s*")
#: Spark's byte strings (spark.network.util.JavaUtils.byteStringAsBytes): binary units
_BYTES = re.compile(r"\s*(\d+)\s*([kmgtp]?)i?b?\s*", re.IGNORECASE)
_BYTE_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}
_TRUE, _FALSE = frozenset({"true"}), frozenset({"false"})
#: Delta's default admission per micro-batch
DEFAULT_MAX_FILES_PER_TRIGGER = 1000


def setting_option(variable: str) -> str:
    """The option that sets an ACIDTABLES_* variable: ACIDTABLES_ETCD_ENDPOINTS is etcd.endpoints."""
    return variable.removeprefix("ACIDTABLES_").lower().replace("_", ".", 1)


def option_variable(option: str) -> str:
    """The ACIDTABLES_* variable an option sets: etcd.endpoints (or etcd_endpoints) is ACIDTABLES_ETCD_ENDPOINTS."""
    return "ACIDTABLES_" + option.upper().replace(".", "_")


def known_options() -> str:
    """Every option, for the message that refuses an unknown one."""
    own = ", ".join(_STEPS)
    return f"{own} and the settings {', '.join(sorted(setting_option(v) for v in VARIABLES))}"


@dataclass(frozen=True)
class StreamReadOptions:
    """How a stream reads a table (Delta's names): where it starts, how much each micro-batch admits,
    and which commits it passes over instead of stopping."""

    #: files admitted per micro-batch: Delta's default 1000, unless only maxBytesPerTrigger is given
    #: (None: no bound of that kind); a micro-batch always admits one at least
    max_files_per_trigger: int | None = DEFAULT_MAX_FILES_PER_TRIGGER
    #: bytes admitted per micro-batch (a soft limit: the file that crosses it is admitted); None: no limit
    max_bytes_per_trigger: int | None = None
    #: read the changes from this ID version on, without the table's contents before it; "latest": from
    #: the versions committed after the stream starts; None (and no starting_timestamp): the contents at
    #: the start, then every later version
    starting_version: int | Literal["latest"] | None = None
    #: as starting_version, from the first version committed at or after this time (ISO-8601)
    starting_timestamp: str | None = None
    #: pass over commits that rewrite or remove rows (UPDATE, DELETE, MERGE, overwrite) instead of stopping
    skip_change_commits: bool = False
    #: pass over commits that only remove rows (DELETE of whole files, TRUNCATE) instead of stopping
    ignore_deletes: bool = False
    #: stop (True) or go on from the oldest version left (False) when retention removed versions or
    #: files the stream has not read yet
    fail_on_data_loss: bool = True
    #: stream the changes (_change_type, _commit_version, _commit_timestamp) instead of the rows
    read_change_feed: bool = False


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
    #: an idempotent batch write: the application and its version (both or neither; writes only)
    txn_app_id: str | None = None
    txn_version: int | None = None
    #: a stream's checkpoint directory (a stream's sink only)
    checkpoint_location: str | None = None
    #: a stream's source options (stream reads only)
    stream: StreamReadOptions = field(default_factory=StreamReadOptions)


def _refuse(option: str, value: str, accepted: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"format('acidtables'): option {option}={value!r} {accepted}")


def _whole(option: str, value: str, what: str, minimum: int = 0) -> int:
    if not _WHOLE.fullmatch(value) or int(value) < minimum:
        raise _refuse(option, value, f"is not {what}; use a whole number {minimum} or more")
    return int(value)


def _version(value: str) -> int:
    if not _WHOLE.fullmatch(value):
        raise _refuse(
            VERSION_AS_OF, value, "is not a version; use a whole number 0 or more (an ID version, as history() lists)"
        )
    return int(value)


def _timestamp(option: str, value: str) -> str:
    try:
        datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise _refuse(
            option,
            value,
            "is not a time; use ISO-8601, e.g. '2026-11-22 10:00:00' or '2026-11-22T10:00:00Z' (UTC unless it "
            "names an offset)",
        ) from None
    return value.strip()


def _bool(option: str, value: str) -> bool:
    word = value.strip().lower()
    if word not in _TRUE | _FALSE:
        raise _refuse(option, value, "is not a boolean; use true or false")
    return word in _TRUE


def _bytes(option: str, value: str) -> int:
    """Spark's byte strings: 1048576, 512k, 100m, 10g (binary units)."""
    found = _BYTES.fullmatch(value)
    if found is None or int(found.group(1)) < 1:
        raise _refuse(option, value, "is not a size; use bytes 1 or more, or with a unit: 512k, 100m, 10g")
    return int(found.group(1)) << _BYTE_UNITS[found.group(2).lower()]


def _starting_version(value: str) -> int | Literal["latest"]:
    if value.strip().lower() == "latest":
        return "latest"
    return _whole(STARTING_VERSION, value, "a version (or 'latest')")


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


def _check_step(name: str, step: Step) -> None:
    steps = _STEPS[name]
    if step in steps or (step == "schema" and steps & {"read", "stream_read"}):
        return
    assert step != "schema"
    why = _WHY_NOT.get((name, step))
    if why is None:
        where = " or ".join(_STEP_NAMES[s] for s in sorted(steps))
        why = f"it is an option of {where}"
    if steps == {"read"} and step == "write":
        raise InvalidArgumentError(f"format('acidtables'): option {name} is for reads; {why}")
    raise InvalidArgumentError(f"format('acidtables'): option {name} does not apply to {_STEP_NAMES[step]}: {why}")


def _stream_options(own: Mapping[str, str]) -> StreamReadOptions:
    if STARTING_VERSION in own and STARTING_TIMESTAMP in own:
        raise InvalidArgumentError(
            f"format('acidtables'): give {STARTING_VERSION} or {STARTING_TIMESTAMP}, not both "
            f"(got {own[STARTING_VERSION]!r} and {own[STARTING_TIMESTAMP]!r})"
        )
    return StreamReadOptions(
        max_files_per_trigger=(
            _whole(MAX_FILES_PER_TRIGGER, own[MAX_FILES_PER_TRIGGER], "a number of files", minimum=1)
            if MAX_FILES_PER_TRIGGER in own
            else None
            if MAX_BYTES_PER_TRIGGER in own  # Delta: a byte limit alone is the only limit
            else DEFAULT_MAX_FILES_PER_TRIGGER
        ),
        max_bytes_per_trigger=(
            _bytes(MAX_BYTES_PER_TRIGGER, own[MAX_BYTES_PER_TRIGGER]) if MAX_BYTES_PER_TRIGGER in own else None
        ),
        starting_version=_starting_version(own[STARTING_VERSION]) if STARTING_VERSION in own else None,
        starting_timestamp=(
            _timestamp(STARTING_TIMESTAMP, own[STARTING_TIMESTAMP]) if STARTING_TIMESTAMP in own else None
        ),
        skip_change_commits=_bool(SKIP_CHANGE_COMMITS, own.get(SKIP_CHANGE_COMMITS, "false")),
        ignore_deletes=_bool(IGNORE_DELETES, own.get(IGNORE_DELETES, "false")),
        fail_on_data_loss=_bool(FAIL_ON_DATA_LOSS, own.get(FAIL_ON_DATA_LOSS, "true")),
        read_change_feed=_bool(READ_CHANGE_FEED, own.get(READ_CHANGE_FEED, "false")),
    )


def _txn(own: Mapping[str, str]) -> tuple[str | None, int | None]:
    """Delta's idempotent write options: both or neither."""
    if (TXN_APP_ID in own) != (TXN_VERSION in own):
        given, missing = (TXN_APP_ID, TXN_VERSION) if TXN_APP_ID in own else (TXN_VERSION, TXN_APP_ID)
        raise InvalidArgumentError(
            f"format('acidtables'): option {given} needs {missing} too: an idempotent write names its application "
            "and the version of it that this write is"
        )
    if TXN_APP_ID not in own:
        return None, None
    app_id = own[TXN_APP_ID].strip()
    if not app_id:
        raise _refuse(TXN_APP_ID, own[TXN_APP_ID], "is empty; name the application, e.g. the streaming query's id")
    return app_id, _whole(TXN_VERSION, own[TXN_VERSION], "a version of the application")


def parse_options(options: Mapping[str, str], step: Step) -> SourceOptions:
    """Check every option of a `step` (a batch "read" or "write", a "stream_read" or "stream_write"):
    unknown names, types, ranges, and which step takes which. Raises InvalidArgumentError naming the
    option, its value and what is accepted."""
    own: dict[str, str] = {}
    settings: dict[str, str] = {}
    for key, raw in options.items():
        value = "" if raw is None else str(raw)
        name = _OWN.get(key.lower())
        if name is not None:
            own[name] = value
            continue
        if key.lower() == "paths":  # Spark's spelling of load('a', 'b')
            noun = "writes" if step in ("write", "stream_write") else "reads"
            raise InvalidArgumentError(
                f"format('acidtables'): {noun} one table; name it once, e.g. .load('sales.orders') (got {value})"
            )
        variable = option_variable(key)
        if key.lower() in _REPLACED:
            raise InvalidArgumentError(
                f"format('acidtables'): option {key!r} is not supported: {_REPLACED[key.lower()]}"
            )
        if variable not in VARIABLES:
            raise InvalidArgumentError(
                f"format('acidtables'): unknown option {key!r}; the options are {known_options()}"
            )
        _setting(key, variable, value)
        settings[variable] = value
    for name in sorted(own):
        _check_step(name, step)
    path, table = own.get(PATH, "").strip(), own.get(TABLE, "").strip()
    if path and table and path != table:
        raise InvalidArgumentError(
            f"format('acidtables'): the table is named twice, {path!r} (load/save) and {table!r} (option table); "
            "name it once"
        )
    name = path or table
    if not name:
        verb = "load" if step in ("read", "stream_read", "schema") else ("save" if step == "write" else "start")
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
    checkpoint = own.get(CHECKPOINT_LOCATION, "").strip() or None
    if step == "stream_write" and checkpoint is None:
        raise InvalidArgumentError(
            f"format('acidtables'): a stream's sink needs option {CHECKPOINT_LOCATION}, e.g. "
            ".option('checkpointLocation', 's3a://bucket/checkpoints/events'): its query id keys every batch, "
            "so a restarted query commits each batch once"
        )
    app_id, app_version = _txn(own)
    return SourceOptions(
        table=name,
        version_as_of=_version(own[VERSION_AS_OF]) if VERSION_AS_OF in own else None,
        timestamp_as_of=_timestamp(TIMESTAMP_AS_OF, own[TIMESTAMP_AS_OF]) if TIMESTAMP_AS_OF in own else None,
        local=own.get(LOCAL),
        settings=settings,
        txn_app_id=app_id,
        txn_version=app_version,
        checkpoint_location=checkpoint,
        stream=_stream_options(own) if step in ("stream_read", "schema") else StreamReadOptions(),
    )


__all__ = [
    "DEFAULT_MAX_FILES_PER_TRIGGER",
    "SourceOptions",
    "Step",
    "StreamReadOptions",
    "known_options",
    "option_variable",
    "parse_options",
    "setting_option",
]
