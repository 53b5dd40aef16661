"""A source lake with the Delta table features its users' lakes have: each case is a tiny source
written by delta-spark in the test (as Databricks or a Spark loader writes it), landing in two
batches, processed hour by hour and compared with the documented rules; then the source is
compacted (OPTIMIZE) and no hour runs again.

Planning reads the source's log with delta-rs, whichever engine writes the tables: these cases
concern the planner and the reader, which both engines share, so they run on the default engine.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from incremental_assets.names import HOURLY_JOB
from tests.differential import hostile, reference
from tests.differential.hostile import at, copy_loaded_at, event
from tests.differential.test_differential import (
    AS_OF,
    assert_same_tables,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _batches() -> tuple[list[dict], list[dict]]:
    """Rows of load hours 0 and 1, then of hours 2 and 3 (a replayed copy of an early event among them)."""
    first = [event(at(0, 0, 10), session="s1", user="u1"), event(at(0, 0, 40), session="s1", user="u1"),
             event(at(0, 1, 5), session="s2", user="u2"), event(at(0, 1, 20), session="s1", user="u1"),
             event(at(0, 1, 40), session="s2", user="u2", name="transaction", tr_total=Decimal("12.50"))]
    second = [event(at(0, 2, 15), session="s1", user="u1"), event(at(0, 2, 30), session="s2", user="u2"),
              event(at(0, 3, 10), session="s3", user="u3", name="page_ping"), event(at(0, 3, 20), session="s3",
                                                                                    user="u3"),
              copy_loaded_at(first[2], at(0, 3, 40))]
    return first, second


@dataclass(frozen=True)
class Feature:
    """How a source with one table feature is created, and what it takes between the batches."""

    options: dict[str, str] = field(default_factory=dict)
    between: tuple[str, ...] = ()  # SQL run after the first batch ({path} is the table)
    partitioned: bool = True
    cluster_by: str | None = None
    widen: str | None = None  # a column the second batch writes as bigint (after the ALTER in `between`)
    ntz_column: str | None = None  # an extra timestamp_ntz column every batch carries
    load_date_of: Callable[[dict], dt.date | None] = hostile.load_date  # a row's load_date partition value
    load_date_type: str = "date"  # the load_date column's type in the source


def _loaders_local_date(row: dict) -> dt.date:
    """A loader in UTC-3 names its folders by its own date: rows loaded before 03:00 UTC sit in
    the previous day's folder."""
    return (row["load_tstamp"] - dt.timedelta(hours=3)).date()


def _null_for_session_s2(row: dict) -> dt.date | None:
    """A loader that left load_date empty on some rows (those of session s2)."""
    return None if row["domain_sessionid"] == "s2" else hostile.load_date(row)


# `make test` runs the cases a fix was needed for and one unpartitioned source; `make test-long` all.
# The string and null load_date cases are long: tests/unit/sources/test_reader.py reads such
# folders in `make test`.
LONG = pytest.mark.long
FEATURES = {
    "type widening": Feature({"delta.enableTypeWidening": "true"},
                             ("ALTER TABLE delta.`{path}` ALTER COLUMN domain_sessionidx TYPE BIGINT",),
                             widen="domain_sessionidx"),
    "vacuumProtocolCheck": Feature({"delta.feature.vacuumProtocolCheck": "supported"}),
    "column mapping by name": Feature({"delta.columnMapping.mode": "name"}),
    "column mapping by id": Feature({"delta.columnMapping.mode": "id"}),
    "deletion vectors, none written": Feature({"delta.enableDeletionVectors": "true"}),
    "timestampNtz": Feature({"delta.feature.timestampNtz": "supported"}, ntz_column="dvce_local_tstamp"),
    "v2 checkpoints": Feature({"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "1"}),
    "row tracking": Feature({"delta.enableRowTracking": "true"}),
    "liquid clustering": Feature(partitioned=False, cluster_by="load_tstamp"),
    # Writers keep statistics of the first columns only: load_tstamp, near the end of the
    # atomic schema, has none in the log, and the folders are the loader's local dates.
    "no load_tstamp statistics": Feature({"delta.dataSkippingNumIndexedCols": "2"},
                                         load_date_of=_loaders_local_date),
    "string load_date": Feature(load_date_type="string"),
    "null load_date": Feature(load_date_of=_null_for_session_s2),
}


def _land(spark, path: str, rows: list[dict], feature: Feature, staging, first: bool) -> None:
    staged = str(staging / f"landing-{'first' if first else 'second'}.parquet")
    pq.write_table(hostile.source_table(rows, feature.load_date_of), staged)
    df = spark.read.parquet(staged)
    if feature.load_date_type != "date":
        df = df.withColumn("load_date", F.col("load_date").cast(feature.load_date_type))
    if feature.ntz_column:
        df = df.withColumn(feature.ntz_column, F.col("derived_tstamp").cast("timestamp_ntz"))
    if feature.widen and not first:
        df = df.withColumn(feature.widen, F.col(feature.widen).cast("bigint"))
    if first and feature.cluster_by:
        df.createOrReplaceTempView("landing")
        properties = ", ".join(f"'{k}' = '{v}'" for k, v in feature.options.items())
        spark.sql(f"CREATE TABLE delta.`{path}` USING delta CLUSTER BY ({feature.cluster_by})"
                  + (f" TBLPROPERTIES ({properties})" if properties else "") + " AS SELECT * FROM landing")
        return
    writer = df.write.format("delta").mode("append")
    if first:
        writer = writer.partitionBy("load_date") if feature.partitioned else writer
        for key, value in feature.options.items():
            writer = writer.option(key, value)
    writer.save(path)


def _due_hours(t: dt.datetime) -> list[dt.datetime]:
    from incremental_assets.operator import plans
    from incremental_assets.settings import Settings

    return [planned.hour for planned in plans.make_plan(Settings.load(), t).hours]


def _run(instance, t: dt.datetime):
    from incremental_assets import runner

    report = runner.run_until(t, instance=instance, echo=quiet)
    assert report.success, (t, report.refused, report.runs)
    return report


RUN_IN_MAKE_TEST = ("type widening", "column mapping by name", "liquid clustering", "no load_tstamp statistics")


@pytest.mark.parametrize("name", [name if name in RUN_IN_MAKE_TEST else pytest.param(name, marks=LONG)
                                  for name in FEATURES])
def test_a_source_with_a_table_feature_gives_the_documented_tables_and_no_rerun_after_optimize(
        spark, instance, tmp_path, monkeypatch, name):
    feature = FEATURES[name]
    path, warehouse = str(tmp_path / "events"), tmp_path / "incremental"
    first, second = _batches()
    use(monkeypatch, path, warehouse)

    _land(spark, path, first, feature, tmp_path, first=True)
    for statement in feature.between:
        spark.sql(statement.format(path=path))
    assert _due_hours(at(0, 2, 5)) == [at(0, 0), at(0, 1)]
    _run(instance, at(0, 2, 5))

    _land(spark, path, second, feature, tmp_path, first=False)
    # Only the hours the second batch landed in: the first batch's hours have the same files.
    assert _due_hours(at(0, 4, 5)) == [at(0, 2), at(0, 3)]
    _run(instance, at(0, 4, 5))
    expected = reference.expected_tables(first + second, reference_settings(), AS_OF)
    assert_same_tables(pipeline_tables(warehouse), expected, f"a source with {name} vs the documented rules")

    spark.sql(f"OPTIMIZE delta.`{path}`")
    assert _due_hours(at(0, 4, 10)) == []
    report = _run(instance, at(0, 4, 10))
    assert not [run for run in report.runs if run.job == HOURLY_JOB], report.runs
    assert_same_tables(pipeline_tables(warehouse), expected, f"a source with {name}, compacted, vs the rules")


def test_a_source_whose_deletion_vectors_delta_rs_cannot_read_is_refused_naming_the_feature(
        spark, instance, tmp_path, monkeypatch):
    """Deletion vectors beside vacuumProtocolCheck (as Databricks creates tables): delta-rs reads
    the log but refuses the vectors, without which no hour's rows are known: the runs refuse at
    start, naming the table, the feature and what to do."""
    from incremental_assets import runner
    from resources.tables.delta_log import UnreadableTableFeature

    path = str(tmp_path / "events")
    first, _ = _batches()
    _land(spark, path, first, Feature({"delta.enableDeletionVectors": "true",
                                       "delta.feature.vacuumProtocolCheck": "supported"}), tmp_path, first=True)
    use(monkeypatch, path, tmp_path / "incremental")
    with pytest.raises(UnreadableTableFeature) as refusal:
        runner.run_until(at(0, 2, 5), instance=instance, echo=quiet)
    assert all(part in str(refusal.value) for part in (path, "vacuumProtocolCheck", "DROP FEATURE")), refusal.value


def test_a_source_with_deletion_vectors_written_is_read_on_the_executors_hour_by_hour(
        spark, instance, tmp_path, monkeypatch):
    """A delete after the first hours writes a deletion vector: the hour it hid a row of runs
    again, and the tables follow the rules on the rows left. Every read of the source goes
    through Spark's Delta reader (on the executors, the window pushed down to it), none through
    delta-rs into the driver; a compaction that purges the vector runs no hour."""
    from pyspark.sql.readwriter import DataFrameReader

    from resources.tables.delta_rs import DeltaRsTableStore

    delta_reads, driver_reads = [], []  # the paths Spark's Delta reader, and delta-rs into the driver, read
    load, arrow_dataframe = DataFrameReader.load, DeltaRsTableStore._arrow_dataframe
    monkeypatch.setattr(DataFrameReader, "load",
                        lambda reader, read=None, *rest, **options: delta_reads.append(read) or load(
                            reader, read, *rest, **options))
    monkeypatch.setattr(DeltaRsTableStore, "_arrow_dataframe",
                        lambda store, read, *rest: driver_reads.append(read) or arrow_dataframe(store, read, *rest))
    feature = Feature({"delta.enableDeletionVectors": "true"})
    path, warehouse = str(tmp_path / "events"), tmp_path / "incremental"
    first, second = _batches()
    use(monkeypatch, path, warehouse)

    _land(spark, path, first, feature, tmp_path, first=True)
    _run(instance, at(0, 2, 5))
    deleted = first[3]  # loaded in hour 1
    spark.sql(f"DELETE FROM delta.`{path}` WHERE event_id = '{deleted['event_id']}'")
    assert '"deletionVector":{' in (tmp_path / "events" / "_delta_log" / f"{1:020d}.json").read_text()
    _land(spark, path, second, feature, tmp_path, first=False)
    # The hours of the file the vector hides a row of (0 and 1), and the new ones.
    assert _due_hours(at(0, 4, 5)) == [at(0, 0), at(0, 1), at(0, 2), at(0, 3)]
    _run(instance, at(0, 4, 5))
    expected = reference.expected_tables([row for row in first if row is not deleted] + second,
                                         reference_settings(), AS_OF)
    assert_same_tables(pipeline_tables(warehouse), expected, "a source with deletion vectors vs the documented rules")
    assert path in delta_reads and path not in driver_reads, (delta_reads, driver_reads)

    spark.sql(f"OPTIMIZE delta.`{path}`")
    assert _due_hours(at(0, 4, 10)) == []
