"""`acidtables operator`: campaign for leadership, then run kopf until SIGTERM or lost leadership.

Exactly one replica acts: the others wait as standbys on the etcd lease (core.leader) and one takes
over within the lease TTL when the leader dies. A leader that loses its lease stops and exits non-zero
(Kubernetes restarts it as a standby); tables stay correct either way, every commit being a
compare-and-swap.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Sequence

import kopf

from acidtables.core import AcidTablesError, Catalog, campaign
from acidtables.metrics import ClusterMetrics, EtcdUsageCollector, register_collector, start_http_server

from .config import OperatorConfig
from .context import OperatorContext
from .handlers import build_registry

logger = logging.getLogger(__name__)

LEADER_NAME = "operator"


class LeadershipLost(AcidTablesError):
    """The operator's leader lease expired; it stopped acting so a standby can take over."""


def _quiet_timers(record: logging.LogRecord) -> bool:
    """Drop kopf's "Timer ... succeeded." lines: the job and table timers succeed every second or so,
    and a failure still logs."""
    message = record.getMessage()
    return not (message.startswith("Timer ") and message.endswith(" succeeded."))


def run(
    *,
    namespaces: Sequence[str] = (),
    liveness_endpoint: str | None = None,
    catalog: Catalog | None = None,
    debug: bool = False,
) -> None:
    """Reconcile AcidTables and CompactionJobs in `namespaces` (all when empty) against the catalog the
    ACIDTABLES_* environment configures, while this process leads.

    Logging is kopf's set-up, as `kopf run` does it: one stderr handler on the root logger at INFO
    (DEBUG with `debug`). Without it, kopf's per-object messages, handler failures included, reach
    only the Kubernetes Events kopf posts: "kopf.objects" has that poster as a handler, so Python's
    last-resort stderr handler never fires for them."""
    kopf.configure(debug=debug, verbose=debug)
    if not debug:
        logging.getLogger("kopf.objects").addFilter(_quiet_timers)
    catalog = catalog or Catalog.connect()
    port = int(os.environ.get("ACIDTABLES_METRICS_PORT") or 9108)
    metrics = ClusterMetrics()
    register_collector(EtcdUsageCollector(catalog.services.coordinator))
    # standbys serve /metrics too (their watch gauge reads 0): one probe fits every replica
    start_http_server(port)
    logger.info("metrics on :%d/metrics", port)
    identity = os.environ.get("ACIDTABLES_OPERATOR_ID") or f"{socket.gethostname()}-{os.getpid()}"
    ttl = int(os.environ.get("ACIDTABLES_LEADER_LEASE_SECONDS") or 15)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        leadership = campaign(catalog.services.coordinator, LEADER_NAME, identity, ttl=ttl, stop=stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if leadership is None:  # stopped while a standby
        catalog.close()
        return
    kopf_stop = threading.Event()

    def stop_when_lost() -> None:
        leadership.lost.wait()
        kopf_stop.set()

    threading.Thread(target=stop_when_lost, name="acidtables-leadership", daemon=True).start()
    logger.info("acidtables operator %s acting for %s", identity, ", ".join(namespaces) or "all namespaces")
    config = OperatorConfig.from_env()
    try:
        kopf.run(
            registry=build_registry(config),
            memo=OperatorContext(catalog, config, stop_flag=kopf_stop, metrics=metrics),
            standalone=True,
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=liveness_endpoint,
            stop_flag=kopf_stop,
        )
    finally:
        if not leadership.lost.is_set():
            leadership.resign()
        catalog.close()
    if leadership.lost.is_set():
        raise LeadershipLost(f"{identity} lost the operator's leader lease; a standby takes over")
