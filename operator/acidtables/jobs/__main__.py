"""`python -m acidtables.jobs COMMAND ...`; today the one command is `compact`."""

from __future__ import annotations

import sys

from .termination import TERMINATION

# first, before Spark is imported and started (seconds): the job is its container's PID 1, which drops
# SIGTERM while it has no handler (`-m` has imported the package, acidtables.core, about a second, already)
TERMINATION.install()

from acidtables.core import exit_process  # noqa: E402

from .compact import main as compact  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "compact":
        print(
            "usage: python -m acidtables.jobs compact --table NS.NAME --type minor|major|cluster --job-id UID ...",
            file=sys.stderr,
        )
        return 2
    return compact(argv[1:])


if __name__ == "__main__":
    exit_process(main(sys.argv[1:]))
