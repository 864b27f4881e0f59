"""The operator's real kopf registry against kmock's Kubernetes emulator, with a real etcd: the tier of
operator tests that runs in CI, where no kube-apiserver can be had (shared/envtest/README.md).

The emulator is `tests.helpers.fake_kube.FakeKube` (kmock's, with what a real API server fills in,
label selectors, JSON Patch, a record of the calls and refusals on demand; its docstring says what it
still does not do). It listens on loopback unless told another address (`host`: the node's address on
a pod network, for pods in network namespaces of their own), over TLS with a CA of the test's own when
`tls` is set (as pods reach a real API server, and as Spark's Kubernetes client insists).

`KmockOperator` runs `acidtables.operator.main.run` itself, as `acidtables operator` does (campaign for
the etcd lease, health server, kopf), on a thread, with its own metrics registry, a health port, a
small OperatorConfig, and a kubeconfig naming the emulator. Tests talk to the emulator through
`request(method, path, body)`, which makes it a `tests.helpers.resources.KubeClient`, and wait with
`eventually` (a deadline, never a sleep).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp.test_utils
import kmock
from tests.helpers.fake_kube import RESOURCES, FakeKube, Refusal
from tests.helpers.resources import poll

from acidtables import Catalog
from acidtables.core.coordination.embedded import TlsFiles, free_port
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.metrics import ClusterMetrics
from acidtables.operator.config import OperatorConfig
from acidtables.operator.context import OperatorContext
from acidtables.operator.health import Health
from acidtables.operator.main import run


def _tls_server_class(context: ssl.SSLContext) -> type[aiohttp.test_utils.RawTestServer]:
    """kmock's server class, serving HTTPS with `context`."""

    class TlsServer(aiohttp.test_utils.RawTestServer):
        async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> None:
            await super().start_server(loop=loop, ssl=context, **kwargs)

    return TlsServer


class KmockOperator:
    """The operator of one test: kopf against `FakeKube`, etcd under the test's prefix; the emulator on
    `host` (loopback by default), over HTTPS with `tls`'s certificate when given."""

    def __init__(
        self,
        tmp_path: Path,
        etcd_endpoint: str,
        etcd_prefix: str,
        *,
        lease_seconds: int = 5,
        host: str = "127.0.0.1",
        tls: TlsFiles | None = None,
        namespaces: tuple[str, ...] = (),
        **config: Any,
    ) -> None:
        self.tmp_path = tmp_path
        self.namespaces = namespaces
        self.lease_seconds = lease_seconds
        self.host = host
        self.tls = tls
        self._client_tls: ssl.SSLContext | None = None
        if tls is not None:
            self._client_tls = ssl.create_default_context(cafile=str(tls.ca_file))
        self.settings = Settings(
            etcd=EtcdSettings((etcd_endpoint,), prefix=etcd_prefix), warehouse=str(tmp_path / "warehouse")
        )
        self.config = OperatorConfig(**{"job_image": "acidtables-test:1", **config})
        self.health = Health(heartbeat_timeout_seconds=3.0)
        self.health_port = free_port()
        self.metrics = ClusterMetrics(registry=None)
        self.context: OperatorContext | None = None
        self.kube: FakeKube | None = None
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._kube_ready = threading.Event()
        self._kube_stop: asyncio.Event | None = None
        self._kube_thread = threading.Thread(target=self._serve_kube, name="kmock", daemon=True)
        self._stop = threading.Event()
        self._operator_thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._context_ready = threading.Event()
        self.log = _Log()

    # --- the emulated API server ---------------------------------------------------------------------

    def _serve_kube(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._kube_main())

    async def _kube_main(self) -> None:
        self._kube_stop = asyncio.Event()
        options: dict[str, Any] = {"host": self.host}
        if self.tls is not None:
            serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            serving.load_cert_chain(str(self.tls.cert_file), str(self.tls.key_file))
            options["server_cls"] = _tls_server_class(serving)
        async with FakeKube() as kube, kmock.Server(kube, **options) as server:
            for name, info in RESOURCES.items():
                kube.resources[name] = info
            self.kube = kube
            self.url = str(server.url).rstrip("/")
            self._kube_ready.set()
            await self._kube_stop.wait()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request to the emulator, as a client would send it (merge patches for PATCH)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json"}
        call = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(call, timeout=10, context=self._client_tls) as answer:
            return json.loads(answer.read() or b"null")

    def refuse(self, method: str, path: str, status: int, reason: str, message: str, times: int | None = None) -> None:
        assert self.kube is not None
        self.kube.refusals.append(Refusal(method, re.compile(path), status, reason, message, times))

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Everything stored of `resource` (e.g. "v1/pods"), as the emulator holds it now."""
        assert self.kube is not None
        found = []
        for (kind, ns, _), obj in list(self.kube.objects.items()):
            name = f"{kind.group + '/' if kind.group else ''}{kind.version}/{kind.plural}"
            if not obj.deleted and name == resource and (namespace is None or ns == namespace):
                found.append(dict(obj.raw))
        return found

    # --- the operator --------------------------------------------------------------------------------

    def start(self, kubeconfig_env: Callable[[str, str], None]) -> KmockOperator:
        """Start the emulator and the operator; `kubeconfig_env(name, value)` sets an environment
        variable for the test (pytest's monkeypatch.setenv)."""
        self.start_kube(kubeconfig_env)
        logging.getLogger().addHandler(self.log)
        self._operator_thread = threading.Thread(target=self._run_operator, name="operator", daemon=True)
        self._operator_thread.start()
        self.eventually(lambda: self._context_ready.is_set() or self._failure, "the operator leads")
        if self._failure is not None:
            raise AssertionError(f"the operator failed to start: {self._failure!r}")
        return self

    def start_kube(self, kubeconfig_env: Callable[[str, str], None]) -> KmockOperator:
        """Start only the emulator, and point KUBECONFIG at it (for clients other than the operator)."""
        self._kube_thread.start()
        if not self._kube_ready.wait(30):
            raise AssertionError("kmock's server did not start within 30 s")
        kubeconfig = self.tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "kmock", "cluster": self._cluster()}],
                    "users": [{"name": "test", "user": {"token": "kmock"}}],
                    "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "test"}}],
                    "current-context": "kmock",
                }
            )
        )
        kubeconfig_env("KUBECONFIG", str(kubeconfig))
        kubeconfig_env("ACIDTABLES_LEADER_LEASE_SECONDS", str(self.lease_seconds))
        for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            kubeconfig_env(name, "")  # never the in-cluster account of a CI runner that is itself a pod
        return self

    def _cluster(self) -> dict[str, str]:
        """The kubeconfig's cluster entry: the emulator's URL, and its CA when it serves HTTPS."""
        if self.tls is None:
            return {"server": self.url}
        return {"server": self.url, "certificate-authority": str(self.tls.ca_file)}

    def _run_operator(self) -> None:
        def ready(context: OperatorContext) -> None:
            self.context = context
            self._context_ready.set()

        try:
            run(
                catalog=Catalog(self.settings),
                stop=self._stop,
                health=self.health,
                health_port=self.health_port,
                metrics=self.metrics,
                metrics_port=0,
                config=self.config,
                namespaces=self.namespaces,
                context_ready=ready,
            )
        except BaseException as exc:  # reported by start() or the teardown, with the log
            self._failure = exc

    def stop_kube(self) -> None:
        """Stop the emulated API server (its port closes); the operator keeps running."""
        if self._kube_stop is not None:
            self._loop.call_soon_threadsafe(self._kube_stop.set)
        self._kube_thread.join(timeout=10)

    def stop(self) -> None:
        self._stop.set()
        if self._operator_thread is not None:
            self._operator_thread.join(timeout=30)
            alive = self._operator_thread.is_alive()
        else:
            alive = False
        if self._kube_stop is not None:
            self._loop.call_soon_threadsafe(self._kube_stop.set)
        self._kube_thread.join(timeout=10)
        logging.getLogger().removeHandler(self.log)
        if alive:
            raise AssertionError("the operator did not stop within 30 s of its stop flag; log:\n" + self.log.text())
        if self._failure is not None:
            raise AssertionError(f"the operator failed: {self._failure!r}; log:\n" + self.log.text())

    # --- reading and waiting -------------------------------------------------------------------------

    def probe(self, which: str) -> tuple[int, dict[str, Any]]:
        """GET /healthz or /readyz: (HTTP status, the JSON body)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/{which}", timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # 503 is an answer, not a failure of the probe
            return exc.code, json.loads(exc.read())

    def eventually(self, check: Callable[[], Any], what: str, timeout_seconds: float = 20.0) -> Any:
        """Poll `check` until truthy (a deadline, not a sleep as synchronisation)."""
        return poll(check, what, self.log.text, timeout_seconds=timeout_seconds, interval_seconds=0.05)


class _Log(logging.Handler):
    """The operator's log lines of this test, for failure messages."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.name != "aiohttp.access":  # every request of the emulator: noise in a failure message
            self.lines.append(self.format(record))

    def text(self) -> str:
        return "\n".join(self.lines)


def running_operator(
    tmp_path: Path,
    etcd_endpoint: str,
    etcd_prefix: str,
    setenv: Callable[[str, str], None],
    *,
    lease_seconds: int = 5,
    namespaces: tuple[str, ...] = (),
    **config: Any,
) -> Iterator[KmockOperator]:
    """A fixture body: the operator started (watching `namespaces`, all when empty), and stopped (its
    failure shown) afterwards."""
    operator = KmockOperator(
        tmp_path, etcd_endpoint, etcd_prefix, lease_seconds=lease_seconds, namespaces=namespaces, **config
    )
    try:
        operator.start(setenv)
        yield operator
    finally:
        operator.stop()
