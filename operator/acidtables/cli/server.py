"""`acidtables etcd`: run the embedded etcd in the foreground for local development.

Other terminals then use it in either of two ways: `acidtables --local ...` and `Catalog.local()` find
it through the marker file in the data directory (and reuse it instead of starting a second etcd on the
same data, which etcd's file lock would block), and `Catalog.connect()` uses the printed
`ACIDTABLES_*` variables. It runs until Ctrl-C or SIGTERM, then stops etcd and removes the marker.
"""

from __future__ import annotations

import json
import threading
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from acidtables.core import (
    ENDPOINTS,
    LOCAL_ETCD_MARKER,
    WAREHOUSE,
    AcidTablesError,
    Coordinator,
    EmbeddedEtcd,
    EtcdSettings,
    stop_on_signals,
    user_data_dir,
)

from .output import CommandError, render

#: the file Catalog.local() reads to find a running embedded etcd for a data directory
MARKER = LOCAL_ETCD_MARKER

#: how often the foreground loop checks that etcd is still alive while waiting for a signal
_LIVENESS_INTERVAL_SECONDS = 0.5


@dataclass(frozen=True)
class EtcdStarted:
    endpoint: str
    pid: int | None
    #: the directory `--data-dir` named: etcd's data, the warehouse and the marker live under it
    home: Path
    etcd_data_dir: Path
    warehouse: Path

    @property
    def env(self) -> dict[str, str]:
        return {ENDPOINTS: self.endpoint, WAREHOUSE: str(self.warehouse)}

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "pid": self.pid,
            "home": str(self.home),
            "etcd_data_dir": str(self.etcd_data_dir),
            "warehouse": str(self.warehouse),
            "env": self.env,
        }

    def to_text(self) -> str:
        exports = [f"export {name}={value}" for name, value in self.env.items()]
        return "\n".join(
            [
                f"etcd is running at {self.endpoint} (pid {self.pid}, data in {self.etcd_data_dir})",
                "",
                "For Catalog.connect() in another shell:",
                *exports,
                "",
                f"`acidtables --local={self.home} ...` and Catalog.local({str(self.home)!r}) use it as it is.",
                "Press Ctrl-C to stop it.",
            ]
        )


def _running_endpoint(marker: Path) -> str | None:
    """The endpoint of an etcd already serving this directory, as Catalog.local() would find it."""
    try:
        endpoint = str(json.loads(marker.read_text())["endpoint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    coordinator = Coordinator(EtcdSettings((endpoint,), unavailable_timeout_seconds=1.0))
    try:
        coordinator.ping()
    except AcidTablesError:  # stale marker: whoever wrote it is gone
        return None
    finally:
        coordinator.close()
    return endpoint


def run_etcd(data_dir: str | None, port: int | None, *, as_json: bool, out: TextIO) -> None:
    root = Path(data_dir) if data_dir else user_data_dir()
    root.mkdir(parents=True, exist_ok=True)
    warehouse = root / "warehouse"
    warehouse.mkdir(exist_ok=True)
    marker = root / MARKER
    running = _running_endpoint(marker)
    if running is not None:
        raise CommandError(
            f"an embedded etcd already serves {root} at {running}; use it (`acidtables --local={root} ...`) "
            "or stop it first"
        )
    stop = threading.Event()
    with stop_on_signals(stop):
        try:
            server = EmbeddedEtcd(root / "etcd", client_port=port)
            server.start()
        except RuntimeError as exc:  # binary missing, port in use, etcd died at start: the message says why
            raise CommandError(str(exc)) from None
        try:
            marker.write_text(json.dumps({"endpoint": server.endpoint, "pid": server.pid}))
            started = EtcdStarted(server.endpoint, server.pid, root, server.data_dir, warehouse)
            render(started, as_json=as_json, out=out)
            while not stop.wait(_LIVENESS_INTERVAL_SECONDS):
                if not server.is_running():
                    raise CommandError(f"etcd exited on its own; its log is {server.log_path}")
        finally:
            server.stop()
            # only our own marker: a later `acidtables etcd` may already have written its own
            with suppress(OSError, ValueError):  # already gone, or never written
                if json.loads(marker.read_text()).get("endpoint") == server.endpoint:
                    marker.unlink()
        if not as_json:
            out.write("etcd stopped\n")
