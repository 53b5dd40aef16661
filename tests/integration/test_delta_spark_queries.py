"""The delta-spark engine asks Spark only for what Delta's own operations need: its bookkeeping
(whether a table exists, its version, the commit a write made, the rows an overwrite replaced,
what maintenance has to do) comes from the Delta log, as the delta-rs engine reads it.

Each write is compared with the same Delta operation issued directly on a twin table that holds
the same rows and history: the store may add no Spark query (SQL execution) to it.
"""

from __future__ import annotations

import datetime as dt

import pytest
from delta.tables import DeltaTable as SparkDeltaTable
from deltalake import DeltaTable
from pyspark.sql import functions as F

from bench.engine_queries import SparkWork
from resources.tables.delta_spark import delta_spark_unavailable_reason
from resources.tables.stores import table_store

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
SCHEMA = "ts timestamp, event_date date, n long"


def rows(spark, *numbers: int, day: int = 5):
    data = [(dt.datetime(2026, 1, day, n % 24, tzinfo=UTC), dt.date(2026, 1, day), n) for n in numbers]
    return spark.createDataFrame(data, SCHEMA)


@pytest.fixture
def store(spark, tmp_path):
    reason = delta_spark_unavailable_reason(spark)
    assert reason is None, reason  # `make setup` caches the Delta jars: never a skip
    return table_store(spark, str(tmp_path / "warehouse"), engine="delta-spark")


@pytest.fixture
def twins(spark, store, tmp_path):
    """The store's table "t" and a twin at another path, each written by the same two plain
    Delta writes (one file a day, in two day partitions)."""
    twin = str(tmp_path / "twin")
    for path in (store.path("t"), twin):
        rows(spark, 1, 2, day=5).coalesce(1).write.format("delta").partitionBy("event_date").save(path)
        rows(spark, 3, day=6).write.format("delta").mode("append").save(path)
    return twin


def queries_of(spark, action) -> int:
    """The Spark queries (SQL executions) `action` issues."""
    work = SparkWork(spark)
    before = work.now()[0]
    action()
    return work.now()[0] - before


def test_delta_spark_writes_add_no_spark_query_to_deltas_own(spark, store, twins):
    def plain_append():
        rows(spark, 4).write.format("delta").mode("append").option("mergeSchema", "true").save(twins)

    def plain_overwrite():
        rows(spark, 5).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(twins)

    results = {}

    def store_overwrite():
        results["overwrite"] = store.overwrite("t", rows(spark, 5))

    assert queries_of(spark, lambda: store.append("t", rows(spark, 4))) == queries_of(spark, plain_append)
    assert queries_of(spark, store_overwrite) == queries_of(spark, plain_overwrite)
    assert (results["overwrite"].rows_written, results["overwrite"].rows_deleted) == (1, 4)
    assert queries_of(spark, lambda: store.delete_where_in("t", "n", [5])) == queries_of(
        spark, lambda: SparkDeltaTable.forPath(spark, twins).delete(F.col("n").isin([5])))
    assert store.version("t") == DeltaTable(twins).version() == 4
    assert store.read("t").count() == 0


def test_delta_spark_maintenance_with_nothing_to_do_issues_no_spark_query(spark, store, twins):
    # One file per partition: nothing to merge; the files the overwrite removed are newer than
    # the retention: nothing to delete.
    store.overwrite("t", rows(spark, 7, 8).coalesce(1), partition_by=["event_date"])
    assert queries_of(spark, lambda: store.compact("t")) == 0
    assert queries_of(spark, lambda: store.compact("t", partitions=["2026-01-05"])) == 0
    assert queries_of(spark, lambda: store.vacuum("t", retention_hours=168)) == 0
    assert store.compact("t") == 0 and store.vacuum("t", retention_hours=168) == 0
    assert sorted(r.n for r in store.read("t").collect()) == [7, 8]


def test_delta_spark_vacuum_costs_what_spark_vacuum_costs(spark, store, twins, tmp_path):
    for path in (store.path("t"), twins):
        rows(spark, 9).write.format("delta").mode("overwrite").save(path)  # the old files unreferenced
    table_dir = tmp_path / "warehouse" / "t"
    before = {p.name for p in table_dir.rglob("*.parquet")}
    live = {p.rsplit("/", 1)[-1] for p in DeltaTable(store.path("t")).file_uris()}
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    removed = {}

    def store_vacuum():
        removed["files"] = store.vacuum("t", retention_hours=0)

    assert queries_of(spark, store_vacuum) == queries_of(
        spark, lambda: spark.sql(f"VACUUM delta.`{twins}` RETAIN 0.0 HOURS"))
    assert {p.name for p in table_dir.rglob("*.parquet")} == live
    assert removed["files"] == len(before - live) > 0
