"""The hourly step hands filtered_events its rows in load-time order within each event day, so
that the files it writes hold contiguous load times and a later hour's changed sessions rewrite
only the last of them (resources.tables: a predicate overwrite rewrites whole files)."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from tests.reliability.helpers import FIRST_RUN, SECOND_RUN, run_in_process

pytestmark = [pytest.mark.spark]

BROADCASTS = "spark.sql.autoBroadcastJoinThreshold"


def shuffled_copy(spark, lake: str, out) -> str:
    """The lake's rows in random order (a loader need not write them in load-time order)."""
    from pyspark.sql import functions as F

    from incremental_assets.sources.writer import write_source_table

    rows = spark.read.parquet(*DeltaTable(lake).file_uris()).withColumn("load_date", F.to_date("load_tstamp"))
    write_source_table(rows.orderBy(F.rand(seed=7)).coalesce(1), out)
    return str(out)


def test_filtered_rows_reach_the_write_in_load_time_order(spark, lake, tmp_path, monkeypatch):
    from incremental_assets.steps import hourly
    from incremental_assets.steps.hourly_compute import compute

    partitions = []

    def keeping_filtered_partitions(warehouse, start, end, **scope):
        results = compute(warehouse, start, end, **scope)
        partitions.extend(results.filtered.select("event_date", "load_tstamp").rdd.glom().collect())
        return results

    monkeypatch.setattr(hourly, "compute", keeping_filtered_partitions)
    source = shuffled_copy(spark, lake, tmp_path / "source")
    # Joins as a big window's are (sort-merge, by session): they do not keep the load-time order.
    broadcasts = spark.conf.get(BROADCASTS)
    spark.conf.set(BROADCASTS, "-1")
    try:
        for until in (FIRST_RUN, SECOND_RUN):  # one hour, then five in one window
            report = run_in_process(until, source, tmp_path / "warehouse")
            assert report.success, report.runs
    finally:
        spark.conf.set(BROADCASTS, broadcasts)
    rows = [row for partition in partitions for row in partition]
    assert len({row.load_tstamp.hour for row in rows}) >= 5, "the window spans several load hours"
    for partition in partitions:
        keys = [(row.event_date, row.load_tstamp) for row in partition]
        assert keys == sorted(keys)
