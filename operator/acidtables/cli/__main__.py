"""`python -m acidtables.cli`: the same as the `acidtables` console script, for environments without it."""

from acidtables.cli.main import run

run()
