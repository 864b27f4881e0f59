"""The operator's health endpoints, `/healthz` (liveness) and `/readyz` (readiness), on a port of their
own on every replica, leader or standby (issue 25, item 3).

Why not kopf's `--liveness` endpoint: kopf serves it only while kopf runs, which is only on the leader
(a standby waits on the etcd lease before kopf starts), and it answers 200 as long as kopf's loop can
answer HTTP, whether or not the API server or etcd can be reached. Why not `/metrics`: it answers
whatever the operator's state (the issue's `helm install --wait` passed while kopf could not reach
the API server).

The split follows what a restart can fix:

* liveness fails only for what a restart repairs: the leader's event loop no longer turns (its
  heartbeat task stopped beating: a handler blocked the loop), the etcd client was closed, or the
  change-feed follower died (its thread ended or stopped cycling) or its watch stays down while etcd
  itself answers. An unreachable etcd or API server is *not* a liveness failure: every replica
  restarting in a loop would not bring them back.
* readiness fails while the API server or etcd cannot be reached. A standby is ready: it only does
  not lead.

The checks are plain callables registered on `Health` by whoever owns the thing checked (main.py), so
this module knows nothing of kopf, etcd or which API server is used; the server is the standard
library's, on its own thread, so it answers even while the asyncio loop it watches is blocked.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger(__name__)

#: a check returns None when healthy, or what is wrong, in words
Check = Callable[[], str | None]

#: the leader's loop beats every second; this many seconds without a beat is a stuck loop
DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 30.0


@dataclass
class Health:
    """The named liveness and readiness checks of one operator process, and the leader loop's heartbeat."""

    heartbeat_timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
    clock: Callable[[], float] = time.monotonic
    liveness: dict[str, Check] = field(default_factory=dict)
    readiness: dict[str, Check] = field(default_factory=dict)
    #: monotonic time of the last beat; None while no loop is watched (a standby runs no kopf loop)
    _beat: float | None = None
    #: the event loop the heartbeat runs in, while it does (for a debugger, and for tests that block it)
    loop: Any = None

    def beat(self) -> None:
        """Called from the watched event loop, about every second."""
        self._beat = self.clock()

    def stop_watching_loop(self) -> None:
        """The loop ended on purpose (leadership lost, shutdown): its silence is no failure."""
        self._beat = None

    def loop_check(self) -> str | None:
        if self._beat is None:
            return None
        silent = self.clock() - self._beat
        if silent > self.heartbeat_timeout_seconds:
            return (
                f"the operator's event loop has not run its heartbeat for {silent:.0f} s "
                f"(limit {self.heartbeat_timeout_seconds:.0f} s): a handler blocks it"
            )
        return None

    def report(self, which: str) -> tuple[bool, dict[str, str]]:
        """(healthy, check name -> "ok" or what is wrong) for "healthz" or "readyz"."""
        checks = {"loop": self.loop_check, **self.liveness} if which == "healthz" else dict(self.readiness)
        results: dict[str, str] = {}
        for name, check in checks.items():
            try:
                problem = check()
            except Exception as exc:  # a check that breaks says so instead of breaking the endpoint
                problem = f"the check failed: {type(exc).__name__}: {exc}"
            results[name] = problem or "ok"
        return all(v == "ok" for v in results.values()), results


class Periodic:
    """A slow check (a request to etcd or the API server) run on its own thread every `interval_seconds`;
    the endpoint reads its last result, so a probe answers at once even while the request hangs. A
    result older than `stale_seconds` (the request hangs longer than that) is itself a failure."""

    def __init__(
        self,
        name: str,
        request: Callable[[], None],
        *,
        interval_seconds: float = 2.0,
        stale_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._request = request
        self._interval = interval_seconds
        self._stale = stale_seconds
        self._clock = clock
        self._result: tuple[float, str | None] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"acidtables-health-{name}", daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._request()
                problem = None
            except Exception as exc:  # unreachable, refused, timed out: what readiness reports
                problem = f"{self.name} cannot be reached: {type(exc).__name__}: {str(exc)[:300]}"
            self._result = (self._clock(), problem)
            self._stop.wait(self._interval)

    def __call__(self) -> str | None:
        if self._result is None:
            return f"{self.name} not asked yet"
        at, problem = self._result
        age = self._clock() - at
        if age > self._stale:
            return f"{self.name} has not answered for {age:.0f} s"
        return problem


async def heartbeat(health: Health, interval_seconds: float = 1.0) -> None:
    """Beat from inside the event loop until cancelled: a loop blocked by a handler stops beating."""
    import asyncio

    health.loop = asyncio.get_running_loop()
    try:
        while True:
            health.beat()
            await asyncio.sleep(interval_seconds)
    finally:
        health.stop_watching_loop()
        health.loop = None


class HealthServer:
    """`GET /healthz` and `GET /readyz`: 200 or 503 with one JSON object naming each check's result."""

    def __init__(self, health: Health, port: int, host: str = "0.0.0.0") -> None:
        owner = health

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                which = self.path.split("?", 1)[0].strip("/")
                if which not in ("healthz", "readyz"):
                    self.send_error(404, "only /healthz and /readyz")
                    return
                healthy, results = owner.report(which)
                body = json.dumps({"status": "ok" if healthy else "failing", "checks": results}).encode()
                self.send_response(200 if healthy else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                # probes come every few seconds: only failures are worth a line (report() names them)
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="acidtables-health", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        logger.info("health probes on :%d/healthz and :%d/readyz", self.port, self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


__all__ = ["Check", "Health", "HealthServer", "Periodic", "heartbeat"]
