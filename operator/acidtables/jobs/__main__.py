"""`python -m acidtables.jobs COMMAND ...`; today the one command is `compact`."""

from __future__ import annotations

import sys

from acidtables.core import exit_process

from .compact import main as compact


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
