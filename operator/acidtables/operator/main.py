"""`acidtables operator`: campaign for leadership, then run kopf until SIGTERM or lost leadership.

Exactly one replica acts: the others wait as standbys on the etcd lease (core.coordination.leader) and one takes
over within the lease TTL when the leader dies. A leader that loses its lease stops and exits non-zero
(Kubernetes restarts it as a standby); tables stay correct either way, every commit being a
compare-and-swap.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

import kopf

from acidtables.core import AcidTablesError, Catalog, campaign, stop_on_signals
from acidtables.metrics import ClusterMetrics, EtcdUsageCollector, register_collector, start_http_server

from .config import OperatorConfig
from .context import OperatorContext
from .handlers import build_registry
from .health import Health, HealthServer, Periodic

logger = logging.getLogger(__name__)

LEADER_NAME = "operator"


class LeadershipLost(AcidTablesError):
    """The operator's leader lease expired; it stopped acting so a standby can take over."""


def _quiet_timers(record: logging.LogRecord) -> bool:
    """Drop kopf's "Timer ... succeeded." lines: the job and table timers succeed every second or so,
    and a failure still logs."""
    message = record.getMessage()
    return not (message.startswith("Timer ") and message.endswith(" succeeded."))


def health_port_from_env() -> int:
    return int(os.environ.get("ACIDTABLES_HEALTH_PORT") or 8080)


def install_checks(health: Health, catalog: Catalog, context: OperatorContext, kube_ping: Any) -> list[Periodic]:
    """The operator's liveness and readiness checks (health.py says which is which and why), started.
    `kube_ping` asks the API server the kubeconfig or the pod's service account names for its version:
    nothing here knows which server that is."""
    coordinator = catalog.services.coordinator
    etcd = Periodic("etcd", coordinator.ping).start()
    api = Periodic("the Kubernetes API server", kube_ping).start()
    health.readiness["etcd"] = etcd
    health.readiness["kubernetes-api"] = api
    health.liveness["etcd-client"] = lambda: "the etcd client was closed" if coordinator.closed else None

    def watch() -> str | None:
        follower = context.follower
        return None if follower is None else follower.problem(etcd_answers=etcd() is None)

    health.liveness["etcd-watch"] = watch
    return [etcd, api]


def run(
    *,
    namespaces: Sequence[str] = (),
    liveness_endpoint: str | None = None,
    catalog: Catalog | None = None,
    debug: bool = False,
    stop: threading.Event | None = None,
    health: Health | None = None,
    health_port: int | None = None,
    metrics: ClusterMetrics | None = None,
    metrics_port: int | None = None,
    config: OperatorConfig | None = None,
    context_ready: Any = None,
) -> None:
    """Reconcile AcidTables and CompactionJobs in `namespaces` (all when empty) against the catalog the
    ACIDTABLES_* environment configures, while this process leads.

    Logging is kopf's set-up, as `kopf run` does it: one stderr handler on the root logger at INFO
    (DEBUG with `debug`). Without it, kopf's per-object messages, handler failures included, reach
    only the Kubernetes Events kopf posts: "kopf.objects" has that poster as a handler, so Python's
    last-resort stderr handler never fires for them.

    `stop` ends the process's part (standby or leader) when set; SIGTERM and SIGINT set it, from the
    first line to the last, when this runs on the main thread. Tests run it on a thread with their own
    `health`, `metrics` (a fresh registry), ports (0: none) and `config`; `context_ready` is called with
    the kopf memo once made."""
    kopf.configure(debug=debug, verbose=debug)
    if not debug:
        logging.getLogger("kopf.objects").addFilter(_quiet_timers)
    stop = stop or threading.Event()
    # held from the first line to the last: a SIGTERM must never find the default disposition (which PID 1
    # in a container drops) before kopf installs its own handler, nor after kopf's loop takes it away
    with stop_on_signals(stop) as reinstall_signal_handlers:
        catalog = catalog or Catalog.connect()
        config = config or OperatorConfig.from_env()
        port = int(os.environ.get("ACIDTABLES_METRICS_PORT") or 9108) if metrics_port is None else metrics_port
        if metrics is None:
            metrics = ClusterMetrics()
            register_collector(EtcdUsageCollector(catalog.services.coordinator))
        if port:
            # standbys serve /metrics too (their watch gauge reads 0)
            start_http_server(port)
            logger.info("metrics on :%d/metrics", port)
        health = health or Health()
        context = OperatorContext(catalog, config, stop_flag=threading.Event(), metrics=metrics)
        probes = install_checks(health, catalog, context, context.kube.ping)
        # every replica answers its probes, the standbys while they wait on the lease
        port = health_port_from_env() if health_port is None else health_port
        server = HealthServer(health, port).start() if port else None
        identity = os.environ.get("ACIDTABLES_OPERATOR_ID") or f"{socket.gethostname()}-{os.getpid()}"
        ttl = int(os.environ.get("ACIDTABLES_LEADER_LEASE_SECONDS") or 15)
        try:
            leadership = campaign(catalog.services.coordinator, LEADER_NAME, identity, ttl=ttl, stop=stop)
            if leadership is None:  # stopped while a standby
                return
            kopf_stop = context.stop_flag
            assert kopf_stop is not None  # made above

            def stop_when_lost_or_stopped() -> None:
                while not (leadership.lost.wait(0.5) or stop.is_set() or kopf_stop.is_set()):
                    pass
                kopf_stop.set()

            threading.Thread(target=stop_when_lost_or_stopped, name="acidtables-leadership", daemon=True).start()
            logger.info("acidtables operator %s acting for %s", identity, ", ".join(namespaces) or "all namespaces")
            if context_ready is not None:
                context_ready(context)
            try:
                kopf.run(
                    registry=build_registry(config, health),
                    memo=context,
                    standalone=True,
                    clusterwide=not namespaces,
                    namespaces=list(namespaces),
                    liveness_endpoint=liveness_endpoint,
                    stop_flag=kopf_stop,
                )
            finally:
                reinstall_signal_handlers()  # kopf's loop, closing, put the default dispositions back
                if not leadership.lost.is_set():
                    leadership.resign()
            if leadership.lost.is_set():
                raise LeadershipLost(f"{identity} lost the operator's leader lease; a standby takes over")
        finally:
            for probe in probes:
                probe.stop()
            if server is not None:
                server.stop()
            catalog.close()
