"""Leases: the process lease that in-flight transactions and checkpoint writers register under (so
cleanup can tell an abandoned staging area from a running one, and vacuum a checkpoint being written
from a dead writer's leftovers), and leader leases (core.coordination.leader)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from pyetcd import transactions as ops

from acidtables.core.coordination.archiving import archive_marker_from
from acidtables.core.coordination.connection import Connection
from acidtables.core.coordination.keys import pad
from acidtables.core.coordination.values import checkpoint_entry, dumps, json_object
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer, join_thread
from acidtables.core.errors import CorruptMetadataError
from acidtables.core.settings import EtcdSettings

logger = logging.getLogger(__name__)


class Leases(Connection):
    """The process lease, in-flight registrations and leader leases."""

    def __init__(self, settings: EtcdSettings, *, timer: Timer = SYSTEM_TIMER) -> None:
        super().__init__(settings, timer=timer)
        self._lease: Any = None
        self._lease_ttl = 30
        self._keepalive: threading.Thread | None = None

    # --- the process lease and in-flight transactions ------------------------------------------------

    def _process_lease(self, ttl: int) -> Any:
        with self._lock:
            if self._lease is None:
                self._lease_ttl = ttl
                self._lease = self._call("a lease grant", lambda c: c.lease(ttl))
                self._keepalive = threading.Thread(target=self._keep_alive, name="acidtables-lease", daemon=True)
                self._keepalive.start()
            return self._lease

    def _keep_alive(self) -> None:
        # Refresh at a third of the TTL so one missed refresh does not expire running transactions.
        while not self._closed.wait(self._lease_ttl / 3):
            lease = self._lease
            if lease is None:
                return
            try:
                responses = lease.refresh()
                if responses and responses[0].TTL <= 0:
                    logger.warning("the in-flight lease expired (etcd was unreachable too long); granting a new one")
                    with self._lock:
                        self._lease = self.client.lease(self._lease_ttl)
            except Exception as exc:  # etcd down: keep trying, running transactions are unaffected
                logger.info("refreshing the in-flight lease failed (%s); will retry", exc)
                self._reset_client()

    def _stop_keepalive(self, timeout_seconds: float) -> None:
        """Once closed: wait (within `timeout_seconds`) for the lease keep-alive thread to end."""
        join_thread(self._keepalive, timeout_seconds)

    def _revoke_process_lease(self) -> None:
        if self._lease is not None:
            try:
                self._lease.revoke()
            except Exception:  # best effort: the lease expires on its own
                logger.debug("revoking the process lease failed", exc_info=True)

    def process_lease_id(self, ttl: int) -> int:
        """This process's lease (granted on first use, kept alive until close): its transactions'
        ids carry it (core.commit.txn_ids) and their registrations live under it."""
        return int(self._process_lease(ttl).id)

    def register_inflight(self, table_id: str, txn_id: str, info: dict[str, Any], ttl: int) -> bool:
        """Register a running transaction under the process lease, unless it has committed meanwhile
        (its txn index key exists): a registration made late can never outlive its commit. False when
        it had committed."""
        lease = self._process_lease(ttl)
        inflight = self.keys.inflight(table_id, txn_id)
        committed = self.keys.txn(table_id, txn_id)
        succeeded, _ = self._call(
            "an in-flight registration",
            lambda c: c.transaction(
                compare=[c.transactions.version(committed) == 0],
                success=[ops.Put(inflight, dumps(info), lease)],
                failure=[],
            ),
        )
        return bool(succeeded)

    def live_leases(self, lease_ids: Iterable[int]) -> set[int]:
        """Which of these leases etcd still keeps alive (a writer process that has not died)."""
        return {lease_id for lease_id in set(lease_ids) if self._lease_ttl_left(lease_id) > 0}

    def _lease_ttl_left(self, lease_id: int) -> int:
        answer = self._call("a lease lookup", lambda c: c.get_lease_info(lease_id))
        return int(answer.TTL)

    def unregister_inflight(self, table_id: str, txn_id: str) -> None:
        key = self.keys.inflight(table_id, txn_id)
        self._call("an in-flight removal", lambda c: c.delete(key))

    def list_inflight(self, table_id: str) -> dict[str, dict[str, Any]]:
        prefix = self.keys.family(table_id, "inflight")
        values = self._call("an in-flight listing", lambda c: list(c.get_prefix(prefix)))
        # an unreadable registration still names a live transaction: keep it, whatever its value says
        out: dict[str, dict[str, Any]] = {}
        for value, meta in values:
            key = meta.key.decode(errors="replace")
            try:
                out[key.rsplit("/", 1)[1]] = json_object(value, key)
            except CorruptMetadataError as exc:
                out[key.rsplit("/", 1)[1]] = {"damaged": str(exc)}
        return out

    # --- checkpoints being written (core.log.checkpoint_writer) ---------------------------------------

    def begin_checkpoint(
        self, table_id: str, version: int, txn_id: str, base: tuple[int, str] | None, ttl: int
    ) -> tuple[str, list[tuple[int, str]]]:
        """Register a checkpoint of `version` being written, under the process lease, naming the
        registered checkpoint it builds on (`base`: version, list path). Returns its writer name,
        `<version:020d>-<txn id>`, with which every file it writes begins, and, read in the same
        transaction, the checkpoints registered after `base` (in etcd, or the archive marker's). While
        it is registered no vacuum deletes those files or what `base` names; when the process dies, the
        lease takes the registration with it."""
        lease = self._process_lease(ttl)
        writer = f"{pad(version)}-{txn_id}"
        key = self.keys.checkpoint_writer(table_id, writer)
        value = dumps({"base": None if base is None else base[1]})
        after = -1 if base is None else base[0]
        marker_key = self.keys.archived(table_id)
        reads = [
            ops.Get(self.keys.checkpoint(table_id, after + 1), range_end=self.keys.checkpoints_end(table_id)),
            ops.Get(marker_key),
        ]
        _, responses = self._call(
            "a checkpoint writer's registration",
            lambda c: c.transaction(
                compare=[], success=[ops.Put(key, value, lease), *(reads if base is not None else [])], failure=[]
            ),
        )
        if base is None:
            return writer, []
        _, registered_kvs, marker_kvs = responses
        newer = [checkpoint_entry(value, meta) for value, meta in registered_kvs]
        if marker_kvs:
            archived = archive_marker_from(marker_kvs[0][0], marker_kvs[0][1].mod_revision, marker_key).checkpoint
            if archived is not None and archived[0] > after:
                newer.append(archived)
        return writer, sorted(set(newer))

    def register_checkpoint(self, table_id: str, version: int, path: str, writer: str) -> bool:
        """Register the checkpoint file `path` of `version` and end its writer's registration, in one
        transaction that holds only while that registration does: False (nothing registered) when it is
        gone, because its lease expired and a vacuum may since have taken the writer's files."""
        writing = self.keys.checkpoint_writer(table_id, writer)
        succeeded, _ = self._call(
            "a checkpoint registration",
            lambda c: c.transaction(
                compare=[c.transactions.version(writing) > 0],
                success=[ops.Put(self.keys.checkpoint(table_id, version), path.encode()), ops.Delete(writing)],
                failure=[],
            ),
        )
        return bool(succeeded)

    def end_checkpoint(self, table_id: str, writer: str) -> None:
        """End a checkpoint writer's registration without registering its checkpoint (it gave up)."""
        key = self.keys.checkpoint_writer(table_id, writer)
        self._call("a checkpoint writer's removal", lambda c: c.delete(key))

    def checkpoints_and_writers(self, table_id: str) -> tuple[list[tuple[int, str]], dict[str, dict[str, Any]]]:
        """The checkpoints registered in etcd, (version, path), and the checkpoint writers registered,
        writer name -> {"base": the list path it builds on, or None}, read at one revision: a writer gone
        from the second is in the first, or gave up, or died (core.maintenance.metadata_files)."""
        start, end = self.keys.checkpoint(table_id, 0), self.keys.checkpoints_end(table_id)
        writers = self.keys.family(table_id, "checkpointing")
        _, responses = self._call(
            "a checkpoint and writer listing",
            lambda c: c.transaction(
                compare=[],
                success=[ops.Get(start, range_end=end), ops.Get(writers, range_end=writers[:-1] + "0")],
                failure=[],
            ),
        )
        registered_kvs, writer_kvs = responses
        registered = [checkpoint_entry(value, meta) for value, meta in registered_kvs]
        found: dict[str, dict[str, Any]] = {}
        for value, meta in writer_kvs:
            key = meta.key.decode(errors="replace")
            try:
                found[key.rsplit("/", 1)[1]] = json_object(value, key)
            except CorruptMetadataError as exc:  # still a live writer: what it builds on is unknown, not none
                found[key.rsplit("/", 1)[1]] = {"damaged": str(exc)}
        return registered, found

    # --- leader election (core.coordination.leader) ---------------------------------------------------

    def try_lead(self, name: str, identity: str, ttl: int) -> tuple[Any, str | None]:
        """Put `leaders/<name>` = identity under a new lease of `ttl` seconds if nobody holds it.
        Returns (the lease, None) when this process now leads, else (None, the current holder)."""
        key = self.keys.leader(name)
        lease = self._call("a leader lease grant", lambda c: c.lease(ttl))
        won, responses = self._call(
            "a leader campaign",
            lambda c: c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, identity.encode(), lease)],
                failure=[c.transactions.get(key)],
            ),
        )
        if won:
            return lease, None
        try:
            lease.revoke()
        except Exception:  # it expires by itself
            logger.debug("revoking an unused leader lease failed", exc_info=True)
        held = responses[0] if responses else []
        return None, held[0][0].decode(errors="replace") if held else None

    def refresh_lead(self, lease: Any) -> bool | None:
        """Keep a leader lease alive: True when refreshed, False once it has expired (someone else may
        lead now), None when etcd did not answer (the caller decides how long it may still lead)."""
        try:
            responses = lease.refresh()
        except Exception as exc:
            logger.info("refreshing the leader lease failed: %s", exc)
            self._reset_client()
            return None
        return bool(responses) and responses[0].TTL > 0

    def resign(self, lease: Any) -> None:
        try:
            lease.revoke()
        except Exception:  # expiry does the same, later
            logger.debug("revoking the leader lease failed", exc_info=True)
