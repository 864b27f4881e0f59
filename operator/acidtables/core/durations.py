"""Durations as users write them: `168h`, `1h30m`, `7d`, `500ms`, seconds as a number, or a timedelta.

One parser for the Python API, the CLI and the operator's custom resources, so `retain_duration="168h"`
means the same everywhere, and anything else is refused naming the argument."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from acidtables.core.errors import InvalidArgumentError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
#: seconds as a number, as a string gives it (the CLI's, an environment variable's)
_SECONDS = re.compile(r"\d+(?:\.\d+)?")

DurationLike = str | int | float | timedelta


def parse_duration(value: DurationLike, *, argument: str, method: str) -> timedelta:
    """The duration `value` spells; InvalidArgumentError naming `method(argument=...)` otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        seconds = math.nan
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(value.strip()))
    elif isinstance(value, str) and _SECONDS.fullmatch(value.strip()):
        seconds = float(value)
    else:
        raise InvalidArgumentError(
            f"{method}(): {argument}={value!r} is not a duration; write it like '168h', '7d', '1h30m' or a number "
            "of seconds"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"{method}(): {argument}={value!r} must be a duration of 0 or more")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:  # a timedelta holds under 1e9 days
        raise InvalidArgumentError(
            f"{method}(): {argument}={value!r} is longer than any duration acidtables can hold (under 1e9 days)"
        ) from None


def spell_duration(duration: timedelta) -> str:
    """A spelling `parse_duration` reads back: hours where it can (168h, as retention is written), else
    minutes or seconds."""
    seconds = duration.total_seconds()
    for unit in ("h", "m", "s"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


__all__ = ["DurationLike", "parse_duration", "spell_duration"]
