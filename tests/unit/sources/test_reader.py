"""read_source: a window's rows by load time (load_tstamp, else collector_tstamp)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pyspark.sql import functions as F

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
