"""A loopback TCP proxy that can hold back or delay what the server sends, to lose etcd's answers on
purpose.

The failure tests and the history runner's nemesis put it between clients and etcd. Armed, it still
forwards every request to etcd but keeps etcd's replies (and the handshake of any new connection) to
itself, so a commit applies in etcd while its client hears nothing: the lost-answer case of
conflict-rules D-30. Disarming drops every connection open at that moment, as a network that comes
back after a partition does, and new connections pass freely again. Delayed (`delay(seconds)`), it
passes every reply on that much later: a slow network, under which clients time out while their
requests still apply.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from types import TracebackType

_POLL_SECONDS = 0.05
_CHUNK = 65536


class _Connection:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.held = bytearray()
        self.closed = threading.Event()
        self.thread: threading.Thread | None = None

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):  # already disconnected
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class HoldingProxy:
    def __init__(
        self, target_host: str, target_port: int, *, max_connections: int = 32, max_held_bytes: int = 1 << 20
    ) -> None:
        self._target = (target_host, target_port)
        self._max_connections = max_connections
        self._max_held_bytes = max_held_bytes
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self._delay_seconds = 0.0
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[_Connection] = []
        self._accepted = 0
        self._acceptor = threading.Thread(target=self._accept_loop, name="holding-proxy-accept", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def accepted(self) -> int:
        """Connections accepted so far; a client that gave up on one and reconnected shows here."""
        with self._lock:
            return self._accepted

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(len(c.held) for c in self._connections)

    def start(self) -> HoldingProxy:
        self._acceptor.start()
        return self

    def arm(self) -> None:
        """From now on, keep what the server sends instead of passing it on."""
        self._armed.set()

    def delay(self, seconds: float) -> None:
        """From now on, pass each reply on `seconds` late (0: at once again)."""
        self._delay_seconds = seconds

    def disarm(self) -> None:
        """Drop every open connection (and what it held back), then pass traffic freely again."""
        with self._lock:
            doomed, self._connections = self._connections, []
            self._armed.clear()
        for connection in doomed:
            connection.close()
        self._join(doomed)

    def close(self) -> None:
        """Stop listening and drop every connection; the port is closed afterwards."""
        self._stopped.set()
        self._listener.close()
        if self._acceptor.is_alive():
            self._acceptor.join(timeout=5)
        with self._lock:
            doomed, self._connections = self._connections, []
        for connection in doomed:
            connection.close()
        self._join(doomed)

    def __enter__(self) -> HoldingProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @staticmethod
    def _join(connections: list[_Connection]) -> None:
        for connection in connections:
            if connection.thread is not None and connection.thread is not threading.current_thread():
                connection.thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], _POLL_SECONDS)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed by close()
            with self._lock:
                self._accepted += 1
            try:
                server = socket.create_connection(self._target, timeout=2)
            except OSError:
                client.close()  # the target is down: the client sees the connection drop
                continue
            client.settimeout(5)
            server.settimeout(5)
            connection = _Connection(client, server)
            with self._lock:
                if self._stopped.is_set() or len(self._connections) >= self._max_connections:
                    connection.close()
                    continue
                self._connections.append(connection)
                # started under the lock: disarm() and close() never see a connection whose thread
                # has not started (joining one raises)
                connection.thread = threading.Thread(
                    target=self._pump, args=(connection,), name="holding-proxy-pump", daemon=True
                )
                connection.thread.start()

    def _pump(self, connection: _Connection) -> None:
        client, server = connection.client, connection.server
        try:
            while not connection.closed.is_set():
                ready, _, _ = select.select([client, server], [], [], _POLL_SECONDS)
                for sock in ready:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return  # one side hung up: hang up the other
                    if sock is client:
                        server.sendall(data)
                    elif self._armed.is_set():
                        connection.held += data
                        if len(connection.held) > self._max_held_bytes:
                            return
                    else:
                        if self._delay_seconds:
                            time.sleep(self._delay_seconds)  # the fault itself: a slow reply
                        client.sendall(data)
        except (OSError, ValueError):
            return  # closed under us by disarm()/close(), or reset by a peer
        finally:
            with self._lock:
                if connection in self._connections:
                    self._connections.remove(connection)
            if not connection.closed.is_set():
                connection.close()
