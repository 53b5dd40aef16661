"""resources.materialized: a step's sets held as checkpoints, or as Parquet files under the
warehouse's `_staging/` when a window's rows would not fit in memory; `release` frees either."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from incremental_assets.settings import Settings
from resources.materialized import held_in_memory, materialized, release
from resources.tables import RowRange, staging
from resources.tables.staging import StagedRows, StagingIncomplete
from resources.tables.stores import table_store

pytestmark = pytest.mark.spark

SCHEMA = "event_id string, load_tstamp timestamp, n long, price decimal(18,2), tags array<string>"


def rows(spark, count: int):
    at = dt.datetime(2026, 1, 5, 10, tzinfo=dt.timezone.utc)
    return spark.createDataFrame(
        [(f"e{i}", at + dt.timedelta(minutes=i), i, None if i % 3 else Decimal("1.25"), ["a", str(i)])
         for i in range(count)], SCHEMA)


def staged_dirs(root):
    staging = root / "_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def test_files_hold_the_same_rows_and_types_as_a_checkpoint_and_release_removes_them(spark, tmp_path):
    source = rows(spark, 50).where(F.col("n") != 7)
    in_memory = materialized(source)
    as_files = materialized(source, files_under=str(tmp_path))
    assert len(staged_dirs(tmp_path)) == 1
    assert as_files.schema == in_memory.schema
    assert sorted(as_files.collect()) == sorted(in_memory.collect())
    # Built on, as the step builds on them: a narrow query reads the files, not the lineage.
    assert as_files.groupBy().agg(F.sum("n")).first()[0] == sum(range(50)) - 7
    release(as_files)
    release(in_memory)
    assert staged_dirs(tmp_path) == []
    with pytest.raises(Exception):
        as_files.count()  # released: never recomputed


def test_no_rows_as_files_keep_their_schema(spark, tmp_path):
    empty = materialized(rows(spark, 3).where("n < 0"), files_under=str(tmp_path))
    assert empty.count() == 0 and empty.dtypes == rows(spark, 1).dtypes
    laid_out = materialized(dated_rows(spark, 3).where("n < 0"), files_under=str(tmp_path), partition_by=["load_date"])
    assert laid_out.count() == 0 and laid_out.dtypes == dated_rows(spark, 1).dtypes
    release(empty)
    release(laid_out)
    assert staged_dirs(tmp_path) == []


def test_a_failed_write_leaves_no_files(spark, tmp_path):
    failing = rows(spark, 20).repartition(4).withColumn(
        "n", F.when(F.col("n") == 13, F.raise_error(F.lit("row 13 is bad"))).otherwise(F.col("n")))
    with pytest.raises(Exception, match="row 13 is bad"):
        materialized(failing, files_under=str(tmp_path))
    assert staged_dirs(tmp_path) == []


def dated_rows(spark, count: int, first: int = 0):
    """Rows an hour apart from 2026-01-05 00:00 (so over several days), with their load_date."""
    at = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
    return spark.createDataFrame(
        [(f"e{i}", at + dt.timedelta(hours=i), i, Decimal("1.25"), ["a"]) for i in range(first, first + count)],
        SCHEMA).withColumn("load_date", F.to_date("load_tstamp"))


def data_files(root):
    return sorted(p for p in root.rglob("*.parquet") if not p.name.startswith("."))


def inodes(root) -> set[int]:
    return {p.stat().st_ino for p in data_files(root)}


WHOLE_RANGE = [RowRange("load_tstamp", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                        dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc))]


def test_files_laid_out_by_partition_columns_read_back_as_the_rows_were(spark, tmp_path):
    source = dated_rows(spark, 60)
    staged = materialized(source, files_under=str(tmp_path), partition_by=["load_date"])
    assert staged.columns == source.columns and staged.schema == source.schema
    assert sorted(staged.collect()) == sorted(source.collect())
    days = {p.name for p in (tmp_path / "_staging").glob("*/load_date=*")}
    assert days == {"load_date=2026-01-05", "load_date=2026-01-06", "load_date=2026-01-07"}
    release(staged)
    assert staged_dirs(tmp_path) == []


def test_a_replace_takes_the_files_of_a_set_laid_out_as_its_table(spark, tmp_path):
    """The table's files are the set's (hard links: one write of the rows, not two), whether
    the replace creates the table or rewrites it; releasing the set leaves the table whole."""
    root = tmp_path / "warehouse"
    tables = table_store(spark, str(root), engine="delta-rs")
    for first, count in ((0, 60), (100, 60), (200, 0)):  # creates the table, replaces every row, empties it
        source = dated_rows(spark, count, first)
        staged = materialized(source, files_under=str(root), partition_by=["load_date"])
        set_files = inodes(root / "_staging")
        tables.replace("t", staged, rows=WHOLE_RANGE, partition_by=["load_date"])
        assert set_files <= inodes(root / "t") and bool(set_files) == bool(count)
        release(staged)
        assert staged_dirs(root) == []
        assert sorted(tables.read("t").select(*source.columns).collect()) == sorted(source.collect())


def test_a_set_laid_out_otherwise_is_written_again(spark, tmp_path):
    root = tmp_path / "warehouse"
    tables = table_store(spark, str(root), engine="delta-rs")
    source = dated_rows(spark, 30)
    staged = materialized(source, files_under=str(root))  # not by load_date
    set_files = inodes(root / "_staging")
    tables.replace("t", staged, rows=WHOLE_RANGE, partition_by=["load_date"])
    assert not set_files & inodes(root / "t")
    release(staged)
    assert sorted(tables.read("t").select(*source.columns).collect()) == sorted(source.collect())


def test_a_set_that_lost_a_file_is_refused_and_nothing_committed(spark, tmp_path):
    root = tmp_path / "warehouse"
    tables = table_store(spark, str(root), engine="delta-rs")
    tables.replace("t", dated_rows(spark, 10), rows=WHOLE_RANGE, partition_by=["load_date"])
    before = sorted(tables.read("t").collect())
    staged = materialized(dated_rows(spark, 60, 200), files_under=str(root), partition_by=["load_date"])
    data_files(root / "_staging")[0].unlink()
    with pytest.raises(StagingIncomplete, match="wrote 60 row"):
        tables.replace("t", staged, rows=WHOLE_RANGE, partition_by=["load_date"])
    assert sorted(tables.read("t").collect()) == before
    release(staged)
    assert staged_dirs(root) == []


def test_staged_rows_of_a_set_are_its_files_read_in_the_frames_columns(spark, tmp_path):
    """A write that stages its rows (delta-rs writing them itself, as on an object store) reads
    a set's files as they are, in the DataFrame's column order, and leaves them to the set."""
    source = dated_rows(spark, 30)
    staged = materialized(source, files_under=str(tmp_path), partition_by=["load_date"])
    only_the_set = staged_dirs(tmp_path)
    with StagedRows(staged, str(tmp_path)) as data:
        assert staged_dirs(tmp_path) == only_the_set  # nothing written again
        assert data.column_names == source.columns and data.num_rows == 30
        read = data.reader().read_all()
    assert read.column_names == source.columns
    assert sorted(zip(read.column("n").to_pylist(), read.column("load_date").to_pylist())) == sorted(
        (r.n, r.load_date) for r in source.collect())
    assert staged_dirs(tmp_path) == only_the_set
    release(staged)
    assert staged_dirs(tmp_path) == []


def test_a_replace_delta_rs_writes_itself_streams_the_sets_files(spark, tmp_path, monkeypatch):
    """A replace that cannot take files as they are (here a new column, which delta-rs adds to
    the schema; on an object store every replace) has delta-rs write the set's rows from its
    files, without staging them again."""
    root = tmp_path / "warehouse"
    tables = table_store(spark, str(root), engine="delta-rs")
    tables.replace("t", dated_rows(spark, 10), rows=WHOLE_RANGE, partition_by=["load_date"])
    source = dated_rows(spark, 60, 100).withColumn("extra", F.col("n") * 2)
    staged = materialized(source, files_under=str(root), partition_by=["load_date"])
    only_the_set = staged_dirs(root)
    spark_writes: list[str] = []
    write = staging.write_parquet_counted
    monkeypatch.setattr(staging, "write_parquet_counted",
                        lambda df, path, *args: spark_writes.append(path) or write(df, path, *args))
    tables.replace("t", staged, rows=WHOLE_RANGE, partition_by=["load_date"])
    assert spark_writes == []  # no second staged copy
    assert staged_dirs(root) == only_the_set  # the set's files left to its release
    assert sorted(tables.read("t").select(*source.columns).collect()) == sorted(source.collect())
    release(staged)
    assert staged_dirs(root) == []


def test_a_window_is_held_in_memory_up_to_the_values_limit():
    assert held_in_memory(10, 100, 1_000) and not held_in_memory(11, 100, 1_000)
    assert held_in_memory(None, 100, 1_000)  # unknown rows: as before, in memory
    assert held_in_memory(0, 100, 0)
    # The default: an hour of 10M events (14,000 rows of 130 columns) stays in memory, a week
    # of them (2.75M rows) does not.
    limit = Settings().checkpoint_values_max
    assert held_in_memory(14_000, 130, limit) and not held_in_memory(2_750_000, 130, limit)
