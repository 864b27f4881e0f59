"""conflict-rules §13.1 on `delta` tables, as real Spark jobs: what a job records and how it is judged.

Every case is E prepares, L prepares, E commits, L commits (`spark_jobs.run`, which also checks G1-G5
and that every retained file is intact). Expected outcomes are written from the rules:
* a job never adds a file with no rows, so a DELETE that empties a file only removes it (§17, D-17);
* rule 4 is skipped only for blind appends and operations that change no data (compaction), never
  because a DELETE / UPDATE / MERGE happened to match nothing: its read predicate still meets a
  concurrent append of matching rows (D-21) or, with row-level concurrency, rows a concurrent UPDATE
  turned into matches (D-23);
* without row-level concurrency rule 4 compares partition values only, so a predicate that mixes a
  partition and a data column with no partition filter to extract reads the whole table.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tests.spark_jobs import SCHEMA, Job, dele, ins, next_name, rows, run, staged, upd

from acidtables import Catalog
from acidtables.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    InvalidArgumentError,
    MetadataChangedException,
)
from acidtables.spark import Prepared, SparkTable

SER, WS = "Serializable", "WriteSerializable"
LEVELS = (SER, WS)
#: (row_level_concurrency, partitioned): the "without RLC" table in both shapes and the RLC table
LAYOUTS = {
    "files": (False, False),
    "partitioned": (False, True),
    "partitioned-dv": (True, True),
    "rlc": (True, False),
}


def two_file_table(spark: SparkSession, catalog: Catalog, level: str, *, dv: bool, partitioned: bool) -> SparkTable:
    """File A holds ids 0-3, file B ids 10-13 (one file per partition each when partitioned: dt alternates
    b, a, b, a), amount = id % 10."""
    table = catalog.create_table(
        next_name(),
        schema=SCHEMA,
        partition_by=["dt"] if partitioned else [],
        isolation_level=level,
        row_level_concurrency=dv,
    )
    t = SparkTable(spark, table)
    for start in (0, 10):
        data = [(start + i, "a" if i % 2 else "b", float(i)) for i in range(4)]
        t.insert_into(spark.createDataFrame(data, SCHEMA).coalesce(1))
    return t


def merge_delete(rows_: list[tuple[int, str, float]], condition: str = "t.id = s.id") -> Job:
    def job(t: SparkTable) -> Prepared:
        source = t.spark.createDataFrame(rows_, SCHEMA)
        return staged(t.merge(source, condition).when_matched_delete().execute(commit=False))

    return job


def outcome(t: SparkTable, earlier: Job, later: Job, error: type[Exception] | None) -> int:
    """Run E then L (spark_jobs.run) and check L's outcome; E's version."""
    exc, won = run(t, earlier, later)
    if error is None:
        assert exc is None, f"L failed: {exc}"
    else:
        assert type(exc) is error, f"expected {error.__name__}, got {exc!r}"
    return won


# --- empty outputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("job", ["delete", "merge-delete", "update-all"])
def test_a_job_that_empties_a_file_only_removes_it(
    spark: SparkSession, catalog: Catalog, layout: str, job: str
) -> None:
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, WS, dv=dv, partitioned=partitioned)
    before = {f.path for f in t.table.snapshot().files}
    if job == "delete":
        info = t.delete("id < 5")
    elif job == "merge-delete":
        source = [(i, "a" if i % 2 else "b", 0.0) for i in range(4)]
        info = t.merge(spark.createDataFrame(source, SCHEMA), "t.id = s.id").when_matched_delete().execute()
    else:
        # every row of file A moves to a new value: the rewritten file holds rows, the old one goes
        info = t.update("id < 5", {"amount": "amount + 100"})
    record = t.table.commits(info.version, info.version)[0]
    assert all(f.live_rows > 0 for f in record.adds), f"{job} added a file with no live rows: {record.adds}"
    assert record.removes and {f.path for f in record.removes} <= before
    if job != "update-all":
        assert record.adds == (), f"{job} of whole files added {record.adds}"
        assert [r[0] for r in rows(t)] == [10, 11, 12, 13]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", ["files", "rlc"])
def test_jobs_on_different_files_both_commit_after_one_empties_its_file(
    spark: SparkSession, catalog: Catalog, level: str, layout: str
) -> None:
    # D-17: E removed file A only and added nothing; L read and rewrote file B only
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    outcome(t, dele("id < 5"), dele("id = 11"), None)
    assert [r[0] for r in rows(t)] == [10, 12, 13]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", ["files", "rlc"])
def test_a_job_that_read_the_emptied_file_fails_with_delete_read(
    spark: SparkSession, catalog: Catalog, level: str, layout: str
) -> None:
    # rule 5 (and D-23 with RLC: E deleted the row L modifies); E added no rows, so not rule 4
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    outcome(t, dele("id < 5"), upd("id = 2", "-2"), ConcurrentDeleteReadException)
    assert [r[0] for r in rows(t)] == [10, 11, 12, 13]


# --- a write that matches nothing still read --------------------------------------------------------


def no_match_jobs(where: str) -> dict[str, Job]:
    return {
        "delete": dele(where),
        "update": upd(where, "-1"),
    }


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["delete", "update", "merge"])
def test_a_no_match_write_meets_a_concurrent_append_of_matching_rows(
    spark: SparkSession, catalog: Catalog, level: str, layout: str, kind: str
) -> None:
    """D-21: the no-match job read `id = 50` (in dt=a); E appends exactly such a row. Under Serializable
    L changed nothing, so it adds no version (Delta's skipRecordingEmptyCommits) and nothing can fail
    it: no version records its delete while holding E's row. Under WriteSerializable it commits an empty
    version, which a blind append does not conflict with (D-26). The row stays either way."""
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    where = "dt = 'a' AND id = 50"
    later = (
        merge_delete([(50, "a", 0.0)], "t.id = s.id AND t.dt = 'a'") if kind == "merge" else no_match_jobs(where)[kind]
    )
    won = outcome(t, ins([(50, "a", 5.0)]), later, None)
    assert (50, "a", 5.0) in rows(t)
    assert t.table.version == (won if level == SER else won + 1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_no_match_write_ignores_an_append_its_predicate_cannot_see(
    spark: SparkSession, catalog: Catalog, layout: str
) -> None:
    """Serializable, so only the predicate decides: partition b (or, with RLC, id 60's statistics) is out
    of it. An unpartitioned table without RLC has no partition values to compare: any added file meets
    the read (rule 4). L deletes row 1, so it is judged (a job that changed nothing is not, at
    Serializable)."""
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, SER, dv=dv, partitioned=partitioned)
    appended = (60, "b", 6.0) if partitioned else (60, "a", 6.0)
    expected = ConcurrentAppendException if layout == "files" else None
    outcome(t, ins([appended]), dele("dt = 'a' AND id = 1"), expected)
    assert appended in rows(t)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_a_concurrent_update_turned_into_matches_fail_a_no_match_delete(
    spark: SparkSession, catalog: Catalog, level: str, layout: str
) -> None:
    """D-23 phantoms: nothing has amount 500 when L reads; E's UPDATE gives row 1 that amount. E is not a
    blind append, so WriteSerializable judges it too and L fails. At Serializable L changed nothing and
    adds no version: it is serialised before E, which is what it saw."""
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    expected = ConcurrentAppendException if level == WS else None
    outcome(t, upd("id = 1", "500"), dele("dt = 'a' AND amount = 500"), expected)
    assert (1, "a", 500.0) in rows(t)


@pytest.mark.parametrize("level", LEVELS)
def test_an_update_whose_new_rows_do_not_match_leaves_a_row_level_no_match_delete_alone(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = two_file_table(spark, catalog, level, dv=True, partitioned=False)
    outcome(t, upd("id = 1", "500"), dele("amount = 600"), None)
    assert (1, "a", 500.0) in rows(t)


# --- predicates with no partition filter to extract --------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", ["partitioned", "partitioned-dv"])
def test_a_predicate_mixing_partition_and_data_columns_reads_every_partition(
    spark: SparkSession, catalog: Catalog, level: str, layout: str
) -> None:
    """`dt = 'a' OR amount > 100` names no partition filter: statistics say dt=b holds no amount above
    100, but rule 4 compares partition values only, so E's new rows in dt=b meet L's read."""
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    outcome(t, upd("dt = 'b' AND id = 0", "-1"), upd("dt = 'a' OR amount > 100", "-2"), ConcurrentAppendException)
    assert (0, "b", -1.0) in rows(t)


@pytest.mark.parametrize("level", LEVELS)
def test_a_blind_append_meets_a_mixed_predicate_under_serializable_only(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(
        t,
        ins([(70, "c", 1.0)]),
        upd("dt = 'a' OR amount > 100", "-2"),
        ConcurrentAppendException if level == SER else None,
    )
    assert (70, "c", 1.0) in rows(t)


# --- what users of Delta see --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "later", "error", "error_class", "hint"),
    [
        (
            ins([(50, "a", 5.0)]),
            upd("dt = 'a' OR dt = 'b'"),
            ConcurrentAppendException,
            "DELTA_CONCURRENT_APPEND",
            "dt=a",
        ),
        (
            dele("dt = 'b' AND id = 2"),
            upd("dt = 'b' AND id = 0"),
            ConcurrentAppendException,
            "DELTA_CONCURRENT_APPEND",
            "dt=b",
        ),
        (dele("dt = 'b'"), upd("amount >= 0"), ConcurrentDeleteReadException, "DELTA_CONCURRENT_DELETE_READ", "dt=b"),
    ],
    ids=["append", "rewrite", "delete-read"],
)
def test_a_conflict_names_its_error_class_and_the_partition_where_it_happened(
    spark: SparkSession,
    catalog: Catalog,
    earlier: Job,
    later: Job,
    error: type[Exception],
    error_class: str,
    hint: str,
) -> None:
    t = two_file_table(spark, catalog, SER, dv=False, partitioned=True)
    exc, _ = run(t, earlier, later)
    assert type(exc) is error
    assert exc.error_class == error_class and exc.partition_hint == hint
    assert str(exc).startswith(f"[{error_class}] UPDATE on {t.name} [{hint}] lost to ")
    assert exc.to_dict()["error_class"] == error_class


def test_a_metadata_conflict_names_its_error_class_and_no_partition(spark: SparkSession, catalog: Catalog) -> None:
    t = two_file_table(spark, catalog, WS, dv=False, partitioned=True)
    pending = upd("dt = 'a'")(t)
    catalog.alter_table(t.name, properties={"owner": "sales"})
    with pytest.raises(MetadataChangedException) as caught:
        pending.commit()
    assert caught.value.error_class == "DELTA_METADATA_CHANGED" and caught.value.partition_hint is None
    assert str(caught.value).startswith("[DELTA_METADATA_CHANGED] UPDATE on ")


def test_history_and_commit_info_say_which_commits_were_blind_appends(spark: SparkSession, catalog: Catalog) -> None:
    t = two_file_table(spark, catalog, WS, dv=False, partitioned=True)
    other = SparkTable(spark, catalog.create_table(next_name(), schema=SCHEMA))
    other.insert_into(spark.createDataFrame([(80, "c", 8.0)], SCHEMA))
    from_other = t.insert_into(other.read())
    updated = t.update("id = 1", {"amount": "0"})
    assert from_other.is_blind_append is True
    assert updated.is_blind_append is False
    history = {h.version: h.is_blind_append for h in t.table.history()}
    assert history[from_other.version] is True and history[updated.version] is False
    assert history[1] is True  # the plain inserts of the setup
    listed = {r["version"]: r["isBlindAppend"] for r in t.history().collect()}
    assert listed == history


def test_merge_with_merge_schema_adds_the_source_columns_it_writes(spark: SparkSession, catalog: Catalog) -> None:
    t = two_file_table(spark, catalog, WS, dv=False, partitioned=True)
    source = spark.createDataFrame([(1, "a", 10.0, "changed"), (90, "c", 9.0, "new")], f"{SCHEMA}, note STRING")
    info = (
        t.merge(source, "t.id = s.id", merge_schema=True)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert [c.name for c in t.table.metadata.columns] == ["id", "dt", "amount", "note"]
    record = t.table.commits(info.version, info.version)[0]
    assert record.metadata is not None  # the schema change is part of the MERGE's own commit
    seen = {r["id"]: (r["amount"], r["note"]) for r in t.read().collect()}
    assert seen[1] == (10.0, "changed") and seen[90] == (9.0, "new") and seen[0] == (0.0, None)
    assert len(seen) == 9


def test_merge_without_merge_schema_ignores_extra_source_columns(spark: SparkSession, catalog: Catalog) -> None:
    t = two_file_table(spark, catalog, WS, dv=False, partitioned=True)
    source = spark.createDataFrame([(1, "a", 10.0, "changed")], f"{SCHEMA}, note STRING")
    t.merge(source, "t.id = s.id").when_matched_update_all().execute()
    assert [c.name for c in t.table.metadata.columns] == ["id", "dt", "amount"]
    assert (1, "a", 10.0) in rows(t)


@pytest.mark.parametrize("evolve", ["alter", "merge_schema"])
def test_changes_across_a_schema_change_name_the_version_to_read_from(
    spark: SparkSession, catalog: Catalog, evolve: str
) -> None:
    t = two_file_table(spark, catalog, WS, dv=False, partitioned=True)  # versions 1 and 2
    if evolve == "alter":
        changed = catalog.alter_table(t.name, add_columns="note STRING").version
        t.insert_into(spark.createDataFrame([(70, "a", 7.0, "x")], f"{SCHEMA}, note STRING"))
    else:
        changed = t.insert_into(
            spark.createDataFrame([(70, "a", 7.0, "x")], f"{SCHEMA}, note STRING"), merge_schema=True
        ).version
    with pytest.raises(InvalidArgumentError, match=f"changed at version {changed}.*from version {changed} on"):
        t.changes(1, t.table.version)
    newer: list[Any] = t.changes(changed, t.table.version).collect()
    assert {r["id"] for r in newer} == {70}
    assert len(t.changes(1, changed - 1).collect()) == 8


# --- reads inside writes: a source read from the target (INS-R, S5 footnote 1) ------------------------


def source_of(kind: str, t: SparkTable, catalog: Catalog) -> DataFrame:
    """Rows derived from partition a of `t` (ids + 100), read the way `kind` says."""
    spark = t.spark
    if kind == "read-filter":
        read = t.read().filter("dt = 'a'")
    elif kind == "read-where":
        read = t.read(where="dt = 'a'")
    elif kind == "location":
        read = spark.read.parquet(f"{t.table.location}/data").filter("dt = 'a'").select("id", "dt", "amount")
    else:
        etcd = catalog.settings.etcd
        read = (
            spark.read.format("acidtables")
            .option("etcd.endpoints", ",".join(etcd.endpoints))
            .option("etcd.prefix", etcd.prefix)
            .option("warehouse", catalog.settings.warehouse)
            .load(t.name)
            .filter("dt = 'a'")
        )
    return read.select((F.col("id") + 100).alias("id"), "dt", "amount")


def insert_from(kind: str, catalog: Catalog) -> Job:
    def job(t: SparkTable) -> Prepared:
        return staged(t.insert_into(source_of(kind, t, catalog), commit=False))

    return job


SOURCES = ["read-filter", "read-where", "location", "data-source"]


@pytest.mark.parametrize("kind", SOURCES)
def test_an_insert_whose_source_read_the_target_is_not_a_blind_append(
    spark: SparkSession, catalog: Catalog, kind: str
) -> None:
    t = two_file_table(spark, catalog, WS, dv=False, partitioned=True)
    info = insert_from(kind, catalog)(t).commit()
    assert info.is_blind_append is False
    assert t.table.history(limit=1)[0].is_blind_append is False
    record = t.table.commits(info.version, info.version)[0]
    assert record.op_class.value == "INS-R"
    # the data source reads the whole table as far as the plan says, and such a read names no files
    assert (record.reads_whole_table and not record.read_files) if kind == "data-source" else record.read_files
    assert sorted(r[0] for r in rows(t) if r[0] >= 100) == [101, 103, 111, 113]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", SOURCES)
def test_an_insert_that_read_a_partition_meets_a_blind_append_there_under_serializable(
    spark: SparkSession, catalog: Catalog, level: str, kind: str
) -> None:
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, ins([(50, "a", 5.0)]), insert_from(kind, catalog), ConcurrentAppendException if level == SER else None)


@pytest.mark.parametrize("kind", SOURCES)
def test_an_insert_that_read_one_partition_ignores_an_append_to_another(
    spark: SparkSession, catalog: Catalog, kind: str
) -> None:
    # Serializable: only what was read decides. The data source applies no pushed filter: a whole-table read.
    t = two_file_table(spark, catalog, SER, dv=False, partitioned=True)
    expected = ConcurrentAppendException if kind == "data-source" else None
    outcome(t, ins([(50, "b", 5.0)]), insert_from(kind, catalog), expected)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", SOURCES)
def test_an_insert_that_read_a_partition_meets_rewrites_and_removals_there(
    spark: SparkSession, catalog: Catalog, level: str, kind: str
) -> None:
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, dele("dt = 'a' AND id = 1"), insert_from(kind, catalog), ConcurrentAppendException)  # rule 4
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, dele("dt = 'a'"), insert_from(kind, catalog), ConcurrentDeleteReadException)  # rule 5


@pytest.mark.parametrize("level", LEVELS)
def test_every_scan_of_the_target_counts_even_one_the_write_does_not_write_to(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    """The job read partition a (for a maximum) and partition b (its rows), and writes only into b."""
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)

    def job(t: SparkTable) -> Prepared:
        top = t.read().filter("dt = 'a'").agg(F.max("id").alias("top"))
        source = (
            t.read().filter("dt = 'b'").crossJoin(top).select((F.col("id") + F.col("top")).alias("id"), "dt", "amount")
        )
        return staged(t.insert_into(source, commit=False))

    outcome(t, ins([(50, "a", 5.0)]), job, ConcurrentAppendException if level == SER else None)


@pytest.mark.parametrize("level", LEVELS)
def test_an_aggregate_over_the_whole_table_is_a_whole_table_read(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)

    def job(t: SparkTable) -> Prepared:
        total = t.read().agg((F.max("id") + 1).alias("id"), F.lit("c").alias("dt"), F.sum("amount").alias("amount"))
        return staged(t.insert_into(total, commit=False))

    outcome(t, ins([(50, "b", 5.0)]), job, ConcurrentAppendException if level == SER else None)
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, dele("dt = 'b'"), job, ConcurrentDeleteReadException)


@pytest.mark.parametrize("level", LEVELS)
def test_a_merge_whose_source_read_the_target_read_that_partition_too(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    """The MERGE's own condition reads partition b only; its source read partition a."""
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)

    def job(t: SparkTable) -> Prepared:
        source = t.read().filter("dt = 'a'").select((F.col("id") + 100).alias("id"), F.lit("b").alias("dt"), "amount")
        builder = t.merge(source, "t.id = s.id AND t.dt = 'b'").when_not_matched_insert_all()
        return staged(builder.execute(commit=False))

    outcome(t, ins([(50, "a", 5.0)]), job, ConcurrentAppendException if level == SER else None)


@pytest.mark.parametrize("level", LEVELS)
def test_an_overwrite_whose_source_read_another_partition_read_it(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)

    def job(t: SparkTable) -> Prepared:
        source = t.read().filter("dt = 'a'").select("id", F.lit("b").alias("dt"), "amount")
        return staged(t.insert_overwrite(source, partition={"dt": "b"}, commit=False))

    outcome(t, ins([(50, "a", 5.0)]), job, ConcurrentAppendException if level == SER else None)


@pytest.mark.parametrize("appended", [4, 60])
def test_with_row_level_concurrency_a_reading_insert_compares_rows(
    spark: SparkSession, catalog: Catalog, appended: int
) -> None:
    t = two_file_table(spark, catalog, SER, dv=True, partitioned=False)

    def job(t: SparkTable) -> Prepared:
        return staged(
            t.insert_into(
                t.read().filter("id < 5").select((F.col("id") + 100).alias("id"), "dt", "amount"), commit=False
            )
        )

    outcome(t, ins([(appended, "a", 0.0)]), job, ConcurrentAppendException if appended < 5 else None)


# --- an UPDATE of the partition column moves the row ---------------------------------------------


def move_row_1_to_c(t: SparkTable) -> Prepared:
    return t.update("dt = 'a' AND id = 1", {"dt": "'c'"}, commit=False)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", ["partitioned", "partitioned-dv"])
def test_an_update_moving_a_row_to_another_partition_is_a_delete_there_and_an_insert_here(
    spark: SparkSession, catalog: Catalog, level: str, layout: str
) -> None:
    """Delta Lake moves an updated row to its new partition; the rules see what the commit holds: a
    read and removal in dt=a, an insert into dt=c. An append into c, which it did not read, leaves it
    alone at either level; a concurrent DELETE in a fails it (its rewritten file lands where the UPDATE
    read: rule 4, before rule 5's removal of the file it read)."""
    dv, partitioned = LAYOUTS[layout]
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    outcome(t, ins([(50, "c", 5.0)]), move_row_1_to_c, None)
    assert {(1, "c", 1.0), (50, "c", 5.0)} <= set(rows(t)) and not any(r[0] == 1 and r[1] == "a" for r in rows(t))
    t = two_file_table(spark, catalog, level, dv=dv, partitioned=partitioned)
    outcome(t, dele("dt = 'a' AND id = 3"), move_row_1_to_c, ConcurrentAppendException)
    assert (1, "a", 1.0) in rows(t)


# --- REPLACE WHERE: a delete of what its predicate reads, and an insert ----------------------------


def replace_low_amounts_of_a(t: SparkTable) -> Prepared:
    rows_ = t.spark.createDataFrame([(70, "a", 0.5)], SCHEMA)
    return t.insert_overwrite(rows_, replace_where="dt = 'a' AND amount < 2", commit=False)


@pytest.mark.parametrize("level", LEVELS)
def test_replace_where_is_judged_as_a_delete_of_what_its_predicate_reads_and_an_insert(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    """A blind append of a row the predicate selects fails it at Serializable only (rule 4, D-26); an
    append elsewhere never does; a delete of a file it read fails it at either level."""
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, ins([(80, "a", 1.0)]), replace_low_amounts_of_a, ConcurrentAppendException if level == SER else None)
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, ins([(81, "b", 1.0)]), replace_low_amounts_of_a, None)
    assert (70, "a", 0.5) in rows(t) and (1, "a", 1.0) not in rows(t) and (81, "b", 1.0) in rows(t)
    t = two_file_table(spark, catalog, level, dv=False, partitioned=True)
    outcome(t, dele("id = 3"), replace_low_amounts_of_a, ConcurrentAppendException)
