"""One active process among several: leader election on an etcd lease (the operator's, design §6).

The leader holds `leaders/<name>` under a lease it refreshes every third of its TTL; when it dies, the
lease expires and the key goes with it, and a standby that keeps campaigning takes over within the TTL
(plus one campaign interval). Leadership that cannot be confirmed (refresh failed past the TTL) counts
as lost, so two processes never both believe they lead for longer than a TTL; correctness of tables
never depends on it (every commit is a compare-and-swap).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer

logger = logging.getLogger(__name__)


class Leadership:
    """Held until `lost` is set (lease expired or not refreshable) or `resign()`."""

    def __init__(self, coordinator: Coordinator, name: str, identity: str, lease: Any, ttl: int, timer: Timer) -> None:
        self.coordinator = coordinator
        self.name = name
        self.identity = identity
        self.ttl = ttl
        self.lost = threading.Event()
        self._lease = lease
        self._timer = timer
        self._resigned = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"acidtables-leader-{name}", daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        confirmed = self._timer.now()
        while not self._resigned.wait(self.ttl / 3):
            refreshed = self.coordinator.refresh_lead(self._lease)
            if refreshed:
                confirmed = self._timer.now()
            if refreshed is False or self._timer.now() - confirmed >= self.ttl:
                logger.warning("%s lost the %s leadership (its lease expired)", self.identity, self.name)
                self.lost.set()
                return

    def resign(self) -> None:
        self._resigned.set()
        self.coordinator.resign(self._lease)


def campaign(
    coordinator: Coordinator,
    name: str,
    identity: str,
    *,
    ttl: int = 15,
    stop: threading.Event | None = None,
    interval_seconds: float = 1.0,
    timer: Timer = SYSTEM_TIMER,
) -> Leadership | None:
    """Block until this process leads `name` (returns its Leadership) or `stop` is set (returns None)."""
    announced = False
    while stop is None or not stop.is_set():
        lease, holder = coordinator.try_lead(name, identity, ttl)
        if lease is not None:
            logger.info("%s is the %s leader", identity, name)
            return Leadership(coordinator, name, identity, lease, ttl, timer)
        if not announced:
            logger.info("%s waits as a standby: %s leads %s", identity, holder, name)
            announced = True
        if stop is not None:
            stop.wait(interval_seconds)
        else:
            timer.sleep(interval_seconds)
    return None


__all__ = ["Leadership", "campaign"]
