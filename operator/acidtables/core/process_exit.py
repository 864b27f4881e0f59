"""How the project's own processes end: with their exit code, whatever native threads remain.

At interpreter finalization CPython tears modules down while native threads (gRPC's event engine,
pyarrow's thread pools) may still run, and a C++ thread object destroyed while joinable calls
std::terminate: the process dies with SIGABRT ("terminate called without an active exception", exit
134) after all its work succeeded, and Kubernetes takes a job that did everything for a failed one.
The CLI, the job entry points and the history checker therefore close what they opened, run the
interpreter's exit handlers (catalogs still open are closed there, logs and streams flushed), and then
leave without finalization. A library user's script ends the ordinary way; closing its catalogs (or
the exit handler `Catalog` registers) stops every thread and channel they started.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

__all__ = ["exit_process"]


def exit_process(code: int) -> NoReturn:
    """Run the exit handlers, flush the standard streams, and end the process with `code`."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to say on it
            stream.flush()
    os._exit(code)
