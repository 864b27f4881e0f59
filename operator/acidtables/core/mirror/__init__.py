"""Copies of a table's log in other formats' terms, for their readers (`mirror.formats`): today Delta
Lake's `_delta_log/`. A mirror is never the truth: acidtables never reads it."""

from acidtables.core.mirror.delta_log import (
    CHECKPOINT_INTERVAL_PROPERTY,
    DELTA_LOG,
    FORMATS,
    MIRROR_PROPERTY,
    MirrorState,
    check_mirror,
    delta_state,
    mirror_formats,
    schedule_mirror,
    sync_delta,
    trim_delta,
)

__all__ = [
    "CHECKPOINT_INTERVAL_PROPERTY",
    "DELTA_LOG",
    "FORMATS",
    "MIRROR_PROPERTY",
    "MirrorState",
    "check_mirror",
    "delta_state",
    "mirror_formats",
    "schedule_mirror",
    "sync_delta",
    "trim_delta",
]
