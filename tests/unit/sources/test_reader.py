"""read_source: a window's rows by load time (load_tstamp, else collector_tstamp)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F

from incremental_assets.sources.load_hours import source_snapshot
from incremental_assets.sources.reader import read_source
from incremental_assets.sources.writer import write_source_table
from resources.tables.stores import table_store

HOUR = datetime(2026, 1, 5, 10, tzinfo=timezone.utc)


def source_with_load_times(spark, out, rows):
    """A source of (event_id, load_tstamp, collector_tstamp) rows, one file per row."""
    df = spark.createDataFrame(rows, "event_id string, load_tstamp timestamp, collector_tstamp timestamp")
    write_source_table(df.withColumn("load_date", F.to_date(F.coalesce("load_tstamp", "collector_tstamp")))
                       .repartition(len(rows), "event_id"), out)
    return str(out)


def test_a_window_holds_the_rows_whose_load_time_is_in_it(spark, tmp_path):
    inside, before, after = HOUR + timedelta(minutes=5), HOUR - timedelta(minutes=5), HOUR + timedelta(hours=1)
    source = source_with_load_times(spark, tmp_path / "source", [
        ("loaded in it", inside, before),
        ("no load_tstamp, collected in it", None, inside),
        ("loaded after it, collected in it", after, inside),
        ("loaded before it", before, before),
        ("loaded at its end", after, after),
        ("no load_tstamp, collected before it", None, before),
    ])
    tables = table_store(spark, str(tmp_path / "warehouse"), "delta-rs")

    rows = read_source(tables, source, HOUR, HOUR + timedelta(hours=1))
    assert sorted(r.event_id for r in rows.select("event_id").collect()) == [
        "loaded in it", "no load_tstamp, collected in it"]
    # Open-ended windows: from the hour on, and before it.
    assert sorted(r.event_id for r in read_source(tables, source, HOUR).select("event_id").collect()) == [
        "loaded after it, collected in it", "loaded at its end", "loaded in it", "no load_tstamp, collected in it"]
    assert sorted(r.event_id for r in read_source(tables, source, None, HOUR).select("event_id").collect()) == [
        "loaded before it", "no load_tstamp, collected before it"]


def test_the_load_time_condition_reaches_the_parquet_reader(spark, tmp_path):
    """Pushed down, the condition lets the reader skip a day's files of other hours by their
    statistics instead of decoding them (a condition on coalesce(...) is not pushed)."""
    source = source_with_load_times(spark, tmp_path / "source", [
        (f"e{hour}", HOUR + timedelta(hours=hour), None) for hour in range(3)])
    tables = table_store(spark, str(tmp_path / "warehouse"), "delta-rs")

    rows = read_source(tables, source, HOUR + timedelta(hours=1), HOUR + timedelta(hours=2))
    plan = rows._jdf.queryExecution().executedPlan().toString()
    pushed = plan[plan.index("PushedFilters:"):].split("]", 1)[0]
    assert "load_tstamp" in pushed and "collector_tstamp" in pushed, plan
    assert [r.event_id for r in rows.select("event_id").collect()] == ["e1"]


@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_rows_in_load_date_folders_of_text_or_without_a_date_are_read_in_their_hour(spark, tmp_path, engine):
    """A loader that writes load_date as text, leaves it empty on some rows and writes no date
    on others: each row is read in its load hour, wherever its folder is, as the plan placed it."""
    inside = HOUR + timedelta(minutes=5)
    df = spark.createDataFrame([("in its folder", inside, "2026-01-05"), ("in the null folder", inside, None),
                                ("in a folder of text that is no date", inside, "20260105"),
                                ("in its folder, another hour", HOUR + timedelta(hours=1), "2026-01-05"),
                                ("in the null folder, another hour", HOUR - timedelta(hours=1), None)],
                               "event_id string, load_tstamp timestamp, load_date string")
    source = str(tmp_path / "source")
    df.write.format("delta").partitionBy("load_date").save(source)
    tables = table_store(spark, str(tmp_path / "warehouse"), engine)

    snapshot = source_snapshot(source, HOUR, HOUR + timedelta(hours=1))
    rows = read_source(tables, source, HOUR, HOUR + timedelta(hours=1), version=snapshot.version,
                       partition_days=snapshot.partition_days, undated_folders=snapshot.undated_folders)
    assert sorted(r.event_id for r in rows.select("event_id").collect()) == [
        "in a folder of text that is no date", "in its folder", "in the null folder"]
