"""Watching: the state a change feed starts from, read at one revision, and the watch that follows every
change after it (core.coordination.feed builds the operator's view on these two)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc
import pyetcd
from pyetcd import exceptions as etcd_exceptions
from pyetcd.events import DeleteEvent

from acidtables.core.coordination import failures
from acidtables.core.coordination.connection import Connection
from acidtables.core.coordination.values import catalog_entry
from acidtables.core.errors import AcidTablesError, CorruptMetadataError

logger = logging.getLogger(__name__)


class WatchCompacted(AcidTablesError):
    """etcd compacted away the revision a watch was to start from: read the state again."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"etcd compacted its history up to revision {compact_revision}")
        self.compact_revision = compact_revision


class WatchLost(AcidTablesError):
    """A watch ended for another reason (the connection dropped): start it again where it was."""


class RawKey(NamedTuple):
    """One key as a watch sees it: its path under the prefix, its value (None: deleted), its revision."""

    key: str
    value: bytes | None
    revision: int


class Watches(Connection):
    """The watched state and the watch."""

    def watched_state(self) -> tuple[int, list[RawKey]]:
        """Catalog entries, table heads, in-flight registrations and recorded events, all read at one
        store revision, which is returned with them (a feed watches from the next one)."""

        def read(client: pyetcd.MultiEndpointEtcd3Client) -> tuple[int, list[RawKey]]:
            catalog = client.get_prefix_response(self.keys.catalog_listing())
            revision = int(catalog.header.revision)
            out = [self._raw(kv.key, kv.value, kv.mod_revision) for kv in catalog.kvs]
            events = client.get_prefix_response(self.keys.events(), revision=revision)
            out += [self._raw(kv.key, kv.value, kv.mod_revision) for kv in events.kvs]
            for kv in catalog.kvs:
                try:
                    table_id = catalog_entry(kv.value, kv.key.decode(errors="replace"))["table_id"]
                except CorruptMetadataError:
                    continue  # listed as it is; a damaged entry names no table to follow
                head = client.get_response(self.keys.head(table_id), revision=revision)
                out += [self._raw(h.key, h.value, h.mod_revision) for h in head.kvs]
                inflight = client.get_prefix_response(self.keys.family(table_id, "inflight"), revision=revision)
                out += [self._raw(i.key, i.value, i.mod_revision) for i in inflight.kvs]
            return revision, out

        return self._call("reading the watched state", read)

    def watch(
        self, start_revision: int, on_change: Callable[[list[RawKey] | AcidTablesError], None]
    ) -> Callable[[], None]:
        """Follow every change under the prefix from `start_revision` on. `on_change` gets each
        response's changes in revision order (value None for a delete), or the error that ended the
        watch (RevisionCompactedError when `start_revision` is gone). Returns the cancel function."""

        def deliver(response: Any) -> None:  # on pyetcd's watch thread
            if isinstance(response, etcd_exceptions.RevisionCompactedError):
                on_change(WatchCompacted(int(response.compacted_revision)))
                return
            if isinstance(response, BaseException):
                on_change(WatchLost(f"the etcd watch ended: {response!r}"))
                return
            on_change(
                [
                    self._raw(e.key, None if isinstance(e, DeleteEvent) else e.value, e.mod_revision)
                    for e in response.events
                ]
            )

        try:
            client = self.client
            watch_id = client.add_watch_prefix_callback(f"{self.prefix}/", deliver, start_revision=start_revision)
        except etcd_exceptions.RevisionCompactedError as exc:
            raise WatchCompacted(int(exc.compacted_revision)) from None
        except (grpc.RpcError, *failures.CONNECTION_ERRORS, etcd_exceptions.WatchTimedOut) as exc:
            raise WatchLost(f"could not start an etcd watch: {exc!r}") from None

        def cancel() -> None:
            try:
                client.cancel_watch(watch_id)
            except Exception:  # the connection is already gone: nothing left to cancel
                logger.debug("cancelling an etcd watch failed", exc_info=True)

        return cancel

    def _raw(self, key: bytes, value: bytes | None, mod_revision: int) -> RawKey:
        return RawKey(self.keys.relative(key.decode(errors="replace")), value, int(mod_revision))
