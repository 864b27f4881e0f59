"""How the project's own processes end: with their exit code, whatever native threads remain.

At interpreter finalization CPython tears modules down while native threads (gRPC's event engine,
pyarrow's thread pools) may still run, and a C++ thread object destroyed while joinable calls
std::terminate: the process dies with SIGABRT ("terminate called without an active exception", exit
134) after all its work succeeded, and Kubernetes takes a job that did everything for a failed one.
The CLI, the job entry points and the history checker therefore close what they opened, run the
interpreter's exit handlers (catalogs still open are closed there, logs and streams flushed), and then
leave without finalization. A library user's script ends the ordinary way; closing its catalogs (or
the exit handler `Catalog` registers) stops every thread and channel they started.

In a container the process is PID 1, and the kernel delivers SIGTERM to PID 1 only while it has a
handler: with the default disposition the signal is dropped, and Kubernetes waits the whole grace period
before it kills the pod. So a long-running process holds `stop_on_signals` from its first line to its
last, with no gap for a signal to fall into.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

__all__ = ["exit_process", "stop_on_signals"]


def exit_process(code: int) -> NoReturn:
    """Run the exit handlers, flush the standard streams, and end the process with `code`."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to say on it
            stream.flush()
    os._exit(code)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[Callable[[], None]]:
    """Turn SIGINT and SIGTERM into `stop.set()` while the block runs, then restore what was there.
    Yields a function that installs the handler again, for after code that replaced it: an asyncio loop
    (kopf's) that added handlers of its own puts the defaults back when it closes. Only the main thread
    may set signal handlers; elsewhere (a test running the process's body on a thread) this does nothing
    and the caller's `stop` is the only way to stop."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def install() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    install()
    try:
        yield install
    finally:
        for sig, old in previous.items():  # None: a handler not set from Python, which cannot be put back
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
