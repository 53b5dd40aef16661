"""A read that selects no file is known to be empty: Spark plans away whatever is built on it
(`no_rows`), so the hourly step's queries over an empty range (the copies loaded after the
newest hour, an empty refilter queue) run no Spark job."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import functions as F

from resources.materialized import materialized
from resources.tables import no_rows
from resources.tables.stores import table_store
from tests.integration.test_table_store_contract import events, ns, utc

pytestmark = pytest.mark.spark


def jobs_run_by(spark, action) -> tuple[int, object]:
    """How many Spark jobs `action()` ran, and its result."""
    group = uuid.uuid4().hex
    spark.sparkContext.setJobGroup(group, "counting jobs")
    try:
        result = action()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group)), result


def test_queries_over_an_empty_range_read_run_no_spark_job(spark, tmp_path):
    store = table_store(spark, str(tmp_path / "w"), "delta-rs")
    store.replace_range("t", events(spark, *[(utc(5, h), h) for h in range(6)]), column="ts", start=utc(5),
                        end=utc(6), partition_by=["event_date"])
    stored = materialized(store.read("t"))
    later = store.read_range("t", "ts", utc(6), utc(30))  # no file holds a row from day 6 on

    jobs, rows = jobs_run_by(spark, lambda: stored.join(later, "n", "left_semi").select("n").distinct().collect())
    assert (jobs, rows) == (0, [])
    jobs, kept = jobs_run_by(spark, lambda: materialized(later.join(stored.select("n"), "n", "left_semi")))
    assert jobs == 0 and sorted(kept.columns) == sorted(later.columns)
    # The same query over a range that holds rows runs, and finds them.
    earlier = store.read_range("t", "ts", utc(5, 2), utc(5, 4))
    jobs, rows = jobs_run_by(spark, lambda: stored.join(earlier, "n", "left_semi").select("n").distinct().collect())
    assert jobs > 0 and sorted(r.n for r in rows) == [2, 3]
    assert ns(store.read("t")) == [0, 1, 2, 3, 4, 5]


def test_no_rows_has_the_schema_and_unions_with_rows(spark):
    empty = no_rows(spark, "n long, s string")
    assert empty.dtypes == [("n", "bigint"), ("s", "string")]
    assert empty.count() == 0
    both = empty.unionByName(spark.createDataFrame([(1, "a")], "n long, s string"))
    assert [tuple(r) for r in both.where(F.col("n") > 0).collect()] == [(1, "a")]
