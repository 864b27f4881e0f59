"""The `acidtables` command line: inspect tables, run a local etcd, and run the demo.

The entry point is `acidtables.cli.main:main` (the `acidtables` console script). The CLI is a client
of `acidtables.core` like any other program: it reads the same `ACIDTABLES_*` settings, or runs an
embedded etcd with `--local`.
"""
