"""What the e2e tier's writer and reader pods run: `python -c "<this file>" ACTION 'JSON arguments'`.

The job image carries acidtables but not the tests, so tests/helpers/cluster.py sends this file's text
as the pod's command; it imports only what the image has (acidtables, pyspark, pyetcd) and reaches etcd
and the warehouse with the ACIDTABLES_* settings the pod copies from the operator's Deployment. Its one
result is a JSON document written to the termination message (ACIDTABLES_TERMINATION_LOG, else
/dev/termination-log) and printed, which the test reads from the pod's status: the test process needs
no network path to etcd or to the warehouse.

Writes go through acidtables.spark (a local Spark in the pod, one file per insert by coalescing), so
the pods are the separate writer processes the scenarios need: each action below is one of them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

#: how long a held transaction waits for what it waits for before it reports a timeout
HOLD_SECONDS = 300.0
SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


def _catalog() -> Any:
    from acidtables import Catalog

    return Catalog.connect()


def _spark_table(name: str) -> tuple[Any, Any]:
    from acidtables.spark import SparkTable, local_session

    spark = local_session("acidtables-e2e-writer", memory="512m")
    spark.sparkContext.setLogLevel("ERROR")
    return spark, SparkTable(spark, _catalog().table(name))


def _rows(spark: Any, first_id: int, count: int, partition: str) -> Any:
    data = [(i, partition, float(i)) for i in range(first_id, first_id + count)]
    return spark.createDataFrame(data, SCHEMA).coalesce(1)  # one file per insert: counts the test can state


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HOLD_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {HOLD_SECONDS:g} s")
        time.sleep(0.01)  # polling interval of the wait


def _registered(table: Any, txn_id: str) -> bool:
    return any(t.txn_id == txn_id for t in table.in_flight())


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "exception": type(exc).__name__,
        "message": str(exc)[:600],
        "winning_version": getattr(exc, "winning_version", None),
        "winning_operation": getattr(exc, "winning_operation", None),
    }


def create_table(args: dict[str, Any]) -> dict[str, Any]:
    """A table made outside the operator (an AcidTable then adopts it, or refuses to)."""
    table = _catalog().create_table(args["table"], schema=args["schema"], partition_by=args.get("partition_by", []))
    return {"table_id": table.table_id, "location": table.location}


def insert(args: dict[str, Any]) -> dict[str, Any]:
    """`batches` INSERT INTOs of `rows` rows each into partition `partition`, ids counting from `first_id`."""
    spark, table = _spark_table(args["table"])
    versions = []
    for batch in range(args.get("batches", 1)):
        first = args.get("first_id", 0) + batch * args.get("rows", 1)
        versions.append(table.insert_into(_rows(spark, first, args.get("rows", 1), args["partition"])).version)
    return {"versions": versions}


def read(args: dict[str, Any]) -> dict[str, Any]:
    """What the table holds, read back through Spark, and what its log says."""
    _, table = _spark_table(args["table"])
    rows = sorted(tuple(r) for r in table.read().collect())
    snapshot = table.table.snapshot()
    return {
        "version": snapshot.version,
        "rows": len(rows),
        "ids": sorted(r[0] for r in rows),
        "files": len(snapshot.files),
        "columns": [c.name for c in snapshot.metadata.columns],
        "location": table.table.location,
        "history": [h.operation.display for h in table.table.history()],
    }


def account(args: dict[str, Any]) -> dict[str, Any]:
    """What a stream wrote, in figures that fit a termination message: rows, distinct ids and their
    range, the operations in the table's history, and the last micro-batch the stream whose checkpoint
    is `checkpoint` (a path under the warehouse) committed: its application id is the query's id, kept
    in the checkpoint."""
    from pyspark.sql import functions as F

    from acidtables.spark.stream_sink import query_id

    _, table = _spark_table(args["table"])
    found = table.read().agg(
        F.count("*").alias("rows"),
        F.countDistinct("id").alias("ids"),
        F.min("id").alias("low"),
        F.max("id").alias("high"),
    )
    row = found.collect()[0]
    operations = Counter(entry.operation.display for entry in table.table.history())
    snapshot = table.table.snapshot()
    checkpoint = os.path.join(os.environ["ACIDTABLES_WAREHOUSE"], args["checkpoint"]) if "checkpoint" in args else ""
    return {
        "rows": row["rows"],
        "distinct_ids": row["ids"],
        "min_id": row["low"],
        "max_id": row["high"],
        "operations": dict(operations),
        "files": len(snapshot.files),
        "stream_batch": snapshot.app_ids[query_id(checkpoint)][0] if checkpoint else None,
    }


def exists(args: dict[str, Any]) -> dict[str, Any]:
    """Whether the catalog has the table, and how many data files are left under `location` (if given)."""
    from acidtables.errors import TableNotFoundError

    try:
        _catalog().table(args["table"])
        found = True
    except TableNotFoundError:
        found = False
    data = 0
    for _, _, files in os.walk(args["location"]) if "location" in args else ():
        data += sum(name.endswith(".parquet") for name in files)
    return {"exists": found, "data_files": data}


def hold_insert(args: dict[str, Any]) -> dict[str, Any]:
    """Commit `before_batches` small inserts of 3 rows on `partition` first, if asked; then prepare an
    INSERT INTO there and hold it open (registered in etcd, so the AcidTable's status counts it in
    flight) until the table has column `until_column` or a commit `until_operation` lands after its
    read version; commit it, and report how that went."""
    spark, table = _spark_table(args["table"])
    for batch in range(args.get("before_batches", 0)):
        table.insert_into(_rows(spark, batch * 3, 3, args["partition"]))
    held = table.insert_into(_rows(spark, args.get("id", 1000), 1, args["partition"]), commit=False)
    _wait(lambda: _registered(table.table, held.transaction.txn_id), "the held insert's registration")
    if "until_column" in args:
        column = args["until_column"]
        _wait(lambda: column in [c.name for c in table.table.metadata.columns], f"column {column}")
    if "until_operation" in args:
        operation = args["until_operation"]
        _wait(
            lambda: any(
                h.operation.display == operation for h in table.table.history() if h.version > held.read_version
            ),
            f"a {operation} commit",
        )
    try:
        info = held.commit()
    except Exception as exc:  # the outcome is what the test asserts on
        return {"read_version": held.read_version, **_error(exc)}
    return {"read_version": held.read_version, "version": info.version, "retries": info.retries}


def delete_when_compacting(args: dict[str, Any]) -> dict[str, Any]:
    """Prepare a DELETE of the rows `condition` selects (a whole file of the partition), wait until a
    compaction of the table is in flight (it has read the files it rewrites), and commit at once, so
    the compaction's commit meets a concurrent DELETE of one of its files."""
    _, table = _spark_table(args["table"])
    deleting = table.delete(args["condition"], commit=False)
    _wait(lambda: any(t.operation.endswith("_compact") for t in table.table.in_flight()), "a compaction in flight")
    info = deleting.commit()
    return {"version": info.version, "operation": info.operation.display, "files_removed": info.files_removed}


def conflicts(args: dict[str, Any]) -> dict[str, Any]:
    """Commits, a retry, a lost conflict and an abort, in this process: two INSERT INTOs from the same
    read version (the later rebases once), two UPDATEs of the same rows (the later fails), one abort."""
    spark, table = _spark_table(args["table"])
    earlier = table.insert_into(_rows(spark, 0, 1, "a"), commit=False)
    later = table.insert_into(_rows(spark, 1, 1, "a"), commit=False)
    earlier.commit()
    retried = later.commit()
    first = table.update("dt = 'a'", {"amount": "amount + 1"}, commit=False)
    second = table.update("dt = 'a'", {"amount": "amount + 2"}, commit=False)
    first.commit()
    lost: dict[str, Any] = {}
    try:
        second.commit()
    except Exception as exc:  # the conflict the operator's counters must show
        lost = _error(exc)
    table.insert_into(_rows(spark, 2, 1, "a"), commit=False).abort()
    return {"retries": retried.retries, "conflict": lost, "version": table.table.version}


def leader(args: dict[str, Any]) -> dict[str, Any]:
    """Who holds the operator's leader key in etcd (its ACIDTABLES_OPERATOR_ID: the pod's name)."""
    import pyetcd

    endpoint = os.environ["ACIDTABLES_ETCD_ENDPOINTS"].split(",")[0].split("://")[-1].rstrip("/")
    host, port = endpoint.rsplit(":", 1)
    value, _ = pyetcd.client(host, int(port), timeout=5).get(f"{os.environ['ACIDTABLES_ETCD_PREFIX']}/leaders/operator")
    return {"leader": value.decode() if value is not None else None}


ACTIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "create_table": create_table,
    "insert": insert,
    "read": read,
    "account": account,
    "exists": exists,
    "hold_insert": hold_insert,
    "delete_when_compacting": delete_when_compacting,
    "conflicts": conflicts,
    "leader": leader,
}


def main(argv: list[str]) -> int:
    action, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        result = ACTIONS[action](args)
        code = 0
    except Exception as exc:  # reported, then the pod fails: the test shows it with the pod's log
        result, code = {"failed": True, **_error(exc)}, 1
    text = json.dumps(result, separators=(",", ":"), default=str)
    path = os.environ.get("ACIDTABLES_TERMINATION_LOG") or "/dev/termination-log"
    try:
        with open(path, "w") as out:
            out.write(text[:4096])
    except OSError:  # no termination log (run by hand): stdout still has it
        pass
    print(text, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
