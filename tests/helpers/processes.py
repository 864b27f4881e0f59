"""Driving a child process by the lines it prints, with a deadline on every wait.

A plain `readline()` on a child's stdout blocks forever if the child hangs without printing, which would
turn a failing test into a stuck CI job; `LineReader` waits with `select` against a monotonic deadline.
"""

from __future__ import annotations

import os
import select
import subprocess
import time


class LineReader:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        if process.stdout is None:
            raise ValueError("LineReader needs a process started with stdout=subprocess.PIPE")
        self._process = process
        self._fd = process.stdout.fileno()
        self._buffer = b""

    def next_line(self, timeout_seconds: float) -> str:
        """The next line the child prints, without its newline; TimeoutError or EOFError otherwise."""
        deadline = time.monotonic() + timeout_seconds
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"child printed no complete line within {timeout_seconds:g} s")
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._fd, 4096)
            if not chunk:
                raise EOFError(f"child exited (code {self._process.poll()}) before printing a line")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()


def kill_and_reap(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL (no chance to clean up, as in a crash) and wait until the process is gone."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
