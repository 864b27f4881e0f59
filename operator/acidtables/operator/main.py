"""`acidtables operator`: run the operator until SIGTERM (kopf's own signal handling stops it cleanly)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import kopf

from acidtables.core import Catalog

from .config import OperatorConfig
from .context import OperatorContext
from .handlers import build_registry

logger = logging.getLogger(__name__)


def run(
    *,
    namespaces: Sequence[str] = (),
    liveness_endpoint: str | None = None,
    catalog: Catalog | None = None,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Reconcile AcidTables in `namespaces` (all namespaces when empty) against the catalog the
    ACIDTABLES_* environment configures."""
    catalog = catalog or Catalog.connect()
    context = OperatorContext(catalog, OperatorConfig.from_env())
    logger.info("acidtables operator starting for %s", ", ".join(namespaces) or "all namespaces")
    try:
        kopf.run(
            registry=build_registry(),
            memo=context,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=liveness_endpoint,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        catalog.close()
