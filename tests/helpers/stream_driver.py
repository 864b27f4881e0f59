"""A Spark driver of its own running one streaming query into a table, for the crash tests.

Run as `python -m tests.helpers.stream_driver ENDPOINT PREFIX WAREHOUSE TABLE INBOX CHECKPOINT SINK`
(SINK: `source` or `table`, see `streams.start_events_query`). It runs the query until the inbox is
read, then prints `done`; an error ends it with the error's first line on stderr and exit code 1. With
the pause points of `stream_pauses` on its PYTHONPATH it stops where the test wants it.
"""

from __future__ import annotations

import sys

from acidtables.spark import local_session

from .streams import start_events_query
from .tables import CatalogSpec


def main(argv: list[str]) -> int:
    endpoint, prefix, warehouse, table, inbox, checkpoint, sink = argv
    options = {"etcd.endpoints": endpoint, "etcd.prefix": prefix, "warehouse": warehouse}
    with CatalogSpec(endpoint, prefix, warehouse).open() as catalog:
        spark = local_session("stream-driver", cores=1, memory="1g")
        query = start_events_query(spark, catalog, table, inbox, checkpoint, sink, options)
        try:
            query.awaitTermination()
        except Exception as exc:  # the test reads why it failed
            print(str(exc).splitlines()[0], file=sys.stderr, flush=True)
            return 1
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
