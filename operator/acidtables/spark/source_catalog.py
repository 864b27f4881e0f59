"""Where a data source step's catalog comes from, and how its errors reach the user.

Every driver-side step of the `acidtables` data source (batch and stream, read and write) runs in a
Python worker of its own and opens its catalog from its options here.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar, cast

from acidtables.core import WAREHOUSE, AcidTablesError, Catalog, CommitSettings, ConfigurationError, Settings

from .source_options import SourceOptions

#: the settings that say where a catalog is (the rest tune its commits)
ETCD_VARIABLES = "ACIDTABLES_ETCD_"


def catalog_from_options(options: SourceOptions, session: Settings | None = None) -> Catalog:
    """The catalog the options name: `local` for the embedded development etcd; else, when the options
    say where (etcd or the warehouse), the environment's (Settings.from_env, as Catalog.connect reads
    it) with those in its place; else the session's catalog (use_catalog), with any commit.* option
    over the environment's; else the environment's."""
    if options.local is not None:
        return Catalog.local(options.local or None)
    where = [k for k in options.settings if k.startswith(ETCD_VARIABLES) or k == WAREHOUSE]
    if session is not None and not where:
        if options.settings:
            session = replace(session, commit=CommitSettings.from_env({**os.environ, **options.settings}))
        return Catalog(session)
    try:
        return Catalog(Settings.from_env({**os.environ, **options.settings}))
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{exc} (format('acidtables') also takes them as options: etcd.endpoints, warehouse)"
        ) from None


#: catalogs a stream's micro-batches share in this worker process (kept_catalog), by their options
_kept: dict[tuple[Any, ...], Catalog] = {}
_kept_lock = threading.Lock()


def kept_catalog(options: SourceOptions, raw_options: Mapping[str, str], session: Settings | None) -> Catalog:
    """The catalog a stream's micro-batches use in this Python worker: opened by the first, kept open for
    the next ones, closed when the worker exits (the catalogs' atexit). Spark reuses its workers, and a
    catalog per micro-batch (two: the planning worker's and the commit worker's) granted and revoked a
    process lease and opened and closed an etcd channel every batch, beside Spark's own commit log write
    (bench/README.md, the sink's phases)."""
    key = (tuple(sorted(raw_options.items())), session)
    with _kept_lock:
        catalog = _kept.get(key)
        if catalog is None or catalog.services.coordinator.closed:
            catalog = _kept[key] = catalog_from_options(options, session)
        return catalog


F = TypeVar("F", bound=Callable[..., Any])


def user_facing(method: F) -> F:
    """For the driver-side steps Spark runs in planning workers (schema, reader, writer, commit): an
    acidtables error reaches the user as its class and message on the first line of Spark's error,
    instead of a Python traceback with the cause at the bottom. Spark formats a worker's error without
    the traceback when SPARK_HIDE_TRACEBACK is set, so it is set, in that planning worker only, when the
    error is ours; our errors name their cause themselves. Executor-side read and write are left alone:
    their workers also run user code whose tracebacks matter."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except AcidTablesError:
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
            raise

    return cast(F, wrapper)


__all__ = ["catalog_from_options", "user_facing"]
