"""resources.materialized: a step's sets held as checkpoints, or as Parquet files under the
warehouse's `_staging/` when a window's rows would not fit in memory; `release` frees either."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from incremental_assets.settings import Settings
from resources.materialized import held_in_memory, materialized, release

pytestmark = pytest.mark.spark

SCHEMA = "event_id string, load_tstamp timestamp, n long, price decimal(18,2), tags array<string>"


def rows(spark, count: int):
    at = dt.datetime(2026, 1, 5, 10, tzinfo=dt.timezone.utc)
    return spark.createDataFrame(
        [(f"e{i}", at + dt.timedelta(minutes=i), i, None if i % 3 else Decimal("1.25"), ["a", str(i)]) for i in range(count)], SCHEMA)


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
    release(empty)
    assert staged_dirs(tmp_path) == []


def test_a_failed_write_leaves_no_files(spark, tmp_path):
    failing = rows(spark, 20).repartition(4).withColumn(
        "n", F.when(F.col("n") == 13, F.raise_error(F.lit("row 13 is bad"))).otherwise(F.col("n")))
    with pytest.raises(Exception, match="row 13 is bad"):
        materialized(failing, files_under=str(tmp_path))
    assert staged_dirs(tmp_path) == []


def test_a_window_is_held_in_memory_up_to_the_values_limit():
    assert held_in_memory(10, 100, 1_000) and not held_in_memory(11, 100, 1_000)
    assert held_in_memory(None, 100, 1_000)  # unknown rows: as before, in memory
    assert held_in_memory(0, 100, 0)
    # The default: an hour of 10M events (14,000 rows of 130 columns) stays in memory, a week
    # of them (2.75M rows) does not.
    limit = Settings().checkpoint_values_max
    assert held_in_memory(14_000, 130, limit) and not held_in_memory(2_750_000, 130, limit)
