"""The `acidtables` command: argument parsing, the catalog to use, rendering, exit codes.

Commands build one result object and `output.render` prints it (a human table, or with `--json` one
JSON document); every failure goes through `output.render_error`, so the exit code and the error
document are decided in one place:

    0 ok, 1 error, 2 usage, 3 conflict (ConcurrentModificationException), 4 etcd or the table's
    storage unavailable, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from acidtables.core import Catalog, ConfigurationError, exit_process

from . import commands, maintenance
from .demo import run_demo
from .output import EXIT_OK, Result, UsageError, render, render_error
from .read import FORMATS
from .read import read as read_rows
from .server import run_etcd

_EPILOG = """\
Without --local, commands connect with the ACIDTABLES_* settings (ACIDTABLES_ETCD_ENDPOINTS,
ACIDTABLES_WAREHOUSE, ...). --local uses an embedded etcd under PATH (default: $ACIDTABLES_HOME, else
~/.local/share/acidtables); give the path as --local=PATH.

exit codes: 0 ok, 1 error, 2 usage, 3 conflict, 4 etcd or storage unavailable"""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so `main` renders usage errors like any other (--json too)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


def _whole_number(text: str, minimum: int, bound: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text} {bound}")
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, 1, "must be at least 1")


def _non_negative_int(text: str) -> int:
    return _whole_number(text, 0, "must not be negative")


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-65535)")
    return value


def _global_options(*, with_defaults: bool) -> _Parser:
    """The options valid before and after the command: `acidtables --json tables` = `acidtables tables --json`.

    After the command their defaults are SUPPRESS, so an option not repeated there does not reset
    the value given before it.
    """

    def default(value: object) -> object:
        return value if with_defaults else argparse.SUPPRESS

    options = _Parser(add_help=False)
    options.add_argument("--json", action="store_true", default=default(False), help="print one JSON document")
    options.add_argument(
        "--verbose", "-v", action="store_true", default=default(False), help="log progress; tracebacks on errors"
    )
    options.add_argument(
        "--local",
        nargs="?",
        const="",
        default=default(None),
        metavar="PATH",
        help="use an embedded etcd and warehouse under PATH (--local=PATH) or the default directory",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="acidtables",
        description="ACID tables whose every commit is an etcd compare-and-swap.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(with_defaults=True)],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    options = [_global_options(with_defaults=False)]

    etcd = sub.add_parser("etcd", parents=options, help="run the embedded etcd in the foreground (Ctrl-C stops it)")
    etcd.add_argument("--data-dir", metavar="D", help="directory for etcd's data and the warehouse")
    etcd.add_argument("--port", type=_port, metavar="P", help="client port (default: a free one)")

    tables = sub.add_parser("tables", parents=options, help="list tables")
    tables.add_argument("namespace", nargs="?", help="only this namespace")

    describe = sub.add_parser("describe", parents=options, help="show a table's definition and current state")
    describe.add_argument("name", help="namespace.table")

    history = sub.add_parser("history", parents=options, help="show a table's commits, newest first")
    history.add_argument("name", help="namespace.table")
    history.add_argument("--limit", type=_positive_int, metavar="N", help="only the newest N commits")

    read = sub.add_parser("read", parents=options, help="print a table's rows (no Spark needed)")
    read.add_argument("name", help="namespace.table")
    at = read.add_mutually_exclusive_group()
    at.add_argument("--version", type=_non_negative_int, metavar="N", help="the rows of ID version N (time travel)")
    at.add_argument("--timestamp", metavar="T", help="the rows as of a time (ISO 8601, e.g. 2026-11-28T10:00:00Z)")
    read.add_argument(
        "--where", metavar="COND", help="a Spark SQL condition, e.g. \"dt = '2026-11-01' AND amount > 0\""
    )
    read.add_argument("--columns", metavar="A,B", help="only these columns, in this order")
    read.add_argument("--limit", type=_non_negative_int, metavar="N", help="at most N rows")
    read.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        dest="output_format",
        help="table (the default; json with --json), csv, json (lines), parquet",
    )

    expire = sub.add_parser(
        "expire",
        parents=options,
        help="set how far back time travel reaches, and move old log entries out of etcd",
        description="Versions outside both limits are no longer snapshot targets; their files become "
        "eligible for vacuum. History keeps them.",
    )
    expire.add_argument("name", help="namespace.table")
    expire.add_argument(
        "--retain-versions", type=_positive_int, default=1000, metavar="N", help="keep at least the newest N (1000)"
    )
    expire.add_argument(
        "--retain-duration", default="168h", metavar="D", help="keep every version current within D (168h)"
    )
    expire.add_argument("--force", action="store_true", help="allow a duration under the safety minimum (168h)")

    vacuum = sub.add_parser(
        "vacuum", parents=options, help="delete data files only expired versions read, removed longer ago than D"
    )
    vacuum.add_argument("name", help="namespace.table")
    vacuum.add_argument("--retain-duration", default="168h", metavar="D", help="keep files removed within D (168h)")
    vacuum.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    vacuum.add_argument("--force", action="store_true", help="allow a duration under the safety minimum (168h)")

    fsck = sub.add_parser(
        "fsck",
        parents=options,
        help="check a table's invariants (read-only); exit code 1 when one fails; --repair removes missing files",
        description="Without --repair, read-only. With --repair, commits one version that removes the entries of "
        "the current version's data files that are gone (their rows are lost), as FSCK REPAIR TABLE does; "
        "--repair --dry-run lists them and changes nothing. A repair refuses while the storage does not answer.",
    )
    fsck.add_argument("name", help="namespace.table")
    fsck.add_argument(
        "--repair", action="store_true", help="commit one version without the data files that are missing"
    )
    fsck.add_argument("--dry-run", action="store_true", help="with --repair: list the missing files, change nothing")

    sub.add_parser(
        "etcd-usage", parents=options, help="etcd's database size against its quota, and keys and bytes per table"
    )

    demo = sub.add_parser("demo", parents=options, help="run overlapping Spark jobs on each conflict policy")
    demo.add_argument(
        "--core", action="store_true", help="the transaction core alone: no Spark, small files written with pyarrow"
    )

    operator = sub.add_parser(
        "operator", parents=options, help="run the Kubernetes operator (kopf) until SIGTERM; needs a kubeconfig"
    )
    operator.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable); default: all namespaces",
    )
    operator.add_argument(
        "--liveness",
        metavar="URL",
        help="also serve kopf's own liveness at this URL (leader only; the operator's /healthz and /readyz "
        "are on ACIDTABLES_HEALTH_PORT, 8080, on every replica)",
    )

    release = sub.add_parser(
        "release-finalizers",
        parents=options,
        help="take acidtables' finalizer off AcidTables and CompactionJobs, when the operator is gone",
        description="With the operator uninstalled, deleting an AcidTable or CompactionJob (or its namespace) "
        "waits for ever on the operator's finalizer. This removes only acidtables' finalizer; the deletion "
        "handler does not run, so tables stay in etcd and their files stay (as with deletionPolicy Retain).",
    )
    release.add_argument("--namespace", metavar="NS", help="only this namespace (default: all namespaces)")
    release.add_argument("--dry-run", action="store_true", help="list what would be released, change nothing")
    return parser


def _expand_local(argv: Sequence[str]) -> list[str]:
    """A bare `--local` means the default directory, never "the next word is the path".

    argparse would otherwise read `acidtables --local tables` as PATH=tables and no command; so the
    path must be attached (`--local=PATH`), and a bare `--local` becomes `--local=`.
    """
    return ["--local=" if arg == "--local" else arg for arg in argv]


def _open_catalog(local: str | None) -> Catalog:
    if local is not None:
        return Catalog.local(local or None)
    try:
        return Catalog.connect()
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} On the command line, `acidtables --local ...` does that.") from None


@contextmanager
def _logging(verbose: bool) -> Iterator[None]:
    """With --verbose, acidtables' own INFO logs go to stderr, for this call only (main may run in-process)."""
    if not verbose:
        yield
        return
    logger = logging.getLogger("acidtables")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit code (0 unless the command reports a finding, like fsck)."""
    out = sys.stdout
    if args.command == "etcd":
        run_etcd(args.data_dir, args.port, as_json=args.json, out=out)
        return EXIT_OK
    if args.command == "demo":
        if args.core:
            render(run_demo(), as_json=args.json, out=out)
        else:
            from .demo.spark import run_spark_demo  # Spark starts only for this command

            render(run_spark_demo(), as_json=args.json, out=out)
        return EXIT_OK
    if args.command == "release-finalizers":
        from .finalizers import release  # the Kubernetes client loads only for this command

        render(release(args.namespace, args.dry_run), as_json=args.json, out=out)
        return EXIT_OK
    if args.command == "operator":
        from acidtables.operator import run as run_operator  # kopf starts only for this command

        run_operator(
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
            catalog=_open_catalog(args.local),
            debug=args.verbose,
        )
        return EXIT_OK
    with _open_catalog(args.local) as catalog:
        result: Result
        if args.command == "tables":
            result = commands.list_tables(catalog, args.namespace)
        elif args.command == "expire":
            result = maintenance.expire(catalog, args.name, args.retain_versions, args.retain_duration, args.force)
        elif args.command == "vacuum":
            result = maintenance.vacuum(catalog, args.name, args.retain_duration, args.dry_run, args.force)
        elif args.command == "etcd-usage":
            result = maintenance.etcd_usage(catalog)
        elif args.command == "fsck" and args.repair:
            result = maintenance.repair(catalog, args.name, args.dry_run)
        elif args.command == "fsck":
            if args.dry_run:  # fsck alone changes nothing; a dry run only means something for a repair
                raise UsageError("fsck: --dry-run goes with --repair (fsck alone is read-only)", "")
            checked = maintenance.fsck(catalog, args.name)
            render(checked, as_json=args.json, out=out)
            return checked.exit_code
        elif args.command == "read":
            output_format = args.output_format or ("json" if args.json else "table")
            read_rows(
                catalog,
                args.name,
                version=args.version,
                timestamp=args.timestamp,
                where=args.where,
                columns=args.columns,
                limit=args.limit,
                output_format=output_format,
                out=out,
            )
            return EXIT_OK
        elif args.command == "describe":
            result = commands.describe(catalog, args.name)
        else:
            result = commands.history(catalog, args.name, args.limit)
        render(result, as_json=args.json, out=out)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script passes it to sys.exit)."""
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(_expand_local(raw))
    except UsageError as exc:
        # parsing failed, so --json is known only from the raw arguments
        return render_error(exc, as_json="--json" in raw, verbose=False, err=sys.stderr)
    except SystemExit as exc:  # --help printed its text
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    # the operator logs through kopf's own set-up (every logger, kopf's handler messages included)
    with _logging(args.verbose and args.command != "operator"):
        try:
            code = _run(args)
        except (Exception, KeyboardInterrupt) as exc:
            return render_error(exc, as_json=args.json, verbose=args.verbose, err=sys.stderr)
    return code


def run() -> NoReturn:
    """The `acidtables` console script: main(), then the process ends with its code (exit_process)."""
    exit_process(main())


if __name__ == "__main__":
    run()
