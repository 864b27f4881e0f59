"""Leases: the process lease that in-flight transactions register under (so cleanup can tell an
abandoned staging area from a running one), and leader leases (core.coordination.leader)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from pyetcd import transactions as ops

from acidtables.core.coordination.connection import Connection
from acidtables.core.coordination.values import dumps, json_object
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer
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
