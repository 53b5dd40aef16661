"""write_source_table: Spark writes the Parquet files, delta-rs commits them."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.dataset  # noqa: F401 - pa.dataset below
import pytest
from deltalake import DeltaTable
from pyarrow.fs import LocalFileSystem, SubTreeFileSystem
from pyspark.sql import functions as F

from incremental_assets.sources.writer import write_source_table
from tests.delta_reads import read_table

T0 = datetime(2026, 1, 5, 23, 59, 59, 123456, tzinfo=timezone.utc)  # microseconds on purpose


def events(spark, ids: range, *, shift: timedelta = timedelta(0)):
    """Rows with load times an hour apart from T0 (+ shift), crossing midnight."""
    rows = [(f"e{i}", T0 + shift + timedelta(hours=i), T0 + shift + timedelta(hours=i, minutes=-5)) for i in ids]
    df = spark.createDataFrame(rows, "event_id string, load_tstamp timestamp, collector_tstamp timestamp")
    return df.withColumn("load_date", F.to_date(F.coalesce("load_tstamp", "collector_tstamp")))


def instants(table: pa.Table, column: str) -> list[datetime]:
    return sorted(table.column(column).to_pylist())


def test_new_table_round_trip_keeps_microsecond_utc_instants(spark, tmp_path):
    out = tmp_path / "events"
    result = write_source_table(events(spark, range(4)), out)

    assert result == {"rows": 4, "files": result["files"], "version": 0, "path": str(out)}
    dt = DeltaTable(str(out))
    assert dt.metadata().partition_columns == ["load_date"]
    table = read_table(out)
    assert table.schema.field("load_tstamp").type == pa.timestamp("us", tz="UTC")
    assert instants(table, "load_tstamp") == [T0 + timedelta(hours=i) for i in range(4)]
    assert sorted(table.column("load_date").to_pylist()) == [date(2026, 1, 5)] + [date(2026, 1, 6)] * 3

    # Spark reads the committed files back as the same instants.
    files = dt.file_uris()
    back = spark.read.parquet(*files).select("load_tstamp").collect()
    assert sorted(r.load_tstamp.astimezone(timezone.utc) for r in back) == [T0 + timedelta(hours=i) for i in range(4)]
    # No stray files beside the data: no _SUCCESS, no checksum files.
    assert not [p for p in out.rglob("*") if p.name.startswith(".") or p.name.startswith("_SUCCESS")]


def test_file_stats_let_readers_skip_files_by_load_time(spark, tmp_path):
    out = tmp_path / "events"
    write_source_table(events(spark, range(4)).coalesce(1), out)
    actions = pa.table(DeltaTable(str(out)).get_add_actions(flatten=True)).to_pylist()
    by_day = {a["partition.load_date"]: a for a in actions}
    first_day = by_day[date(2026, 1, 5)]
    assert first_day["num_records"] == 1
    # Bounds are kept to the millisecond, rounded outwards.
    assert first_day["min.load_tstamp"] == datetime(2026, 1, 5, 23, 59, 59, 123000, tzinfo=timezone.utc)
    assert first_day["max.load_tstamp"] == datetime(2026, 1, 5, 23, 59, 59, 124000, tzinfo=timezone.utc)
    assert first_day["null_count.load_tstamp"] == 0
    # A reader filtering on load_tstamp opens only the matching files.
    dataset = DeltaTable(str(out)).to_pyarrow_dataset(filesystem=SubTreeFileSystem(str(out), LocalFileSystem()))
    hour_two = (pa.dataset.field("load_tstamp") >= pa.scalar(T0 + timedelta(hours=2))) & (
        pa.dataset.field("load_tstamp") < pa.scalar(T0 + timedelta(hours=2, minutes=1))
    )
    assert len(list(dataset.get_fragments())) == 2
    assert len(list(dataset.get_fragments(filter=hour_two))) == 1


def test_append_adds_files_and_rows_in_a_new_version(spark, tmp_path):
    out = tmp_path / "events"
    first = write_source_table(events(spark, range(3)), out)
    second = write_source_table(events(spark, range(3, 5), shift=timedelta(days=2)), out, mode="append")

    assert second["version"] == first["version"] + 1
    assert second["rows"] == 2
    dt = DeltaTable(str(out))
    assert len(dt.file_uris()) == first["files"] + second["files"]
    table = read_table(out)
    assert sorted(table.column("event_id").to_pylist()) == [f"e{i}" for i in range(5)]
    commit = json.loads((out / "_delta_log" / "00000000000000000001.json").read_text().splitlines()[0])
    assert commit["commitInfo"]["operationParameters"]["mode"] == "Append"


def test_error_mode_refuses_an_existing_table_and_overwrite_replaces_it(spark, tmp_path):
    out = tmp_path / "events"
    write_source_table(events(spark, range(3)), out)
    with pytest.raises(FileExistsError, match=str(out)):
        write_source_table(events(spark, range(3)), out)

    result = write_source_table(events(spark, range(10, 12)), out, mode="overwrite")
    assert result["version"] == 1 and result["rows"] == 2
    table = read_table(out)
    assert sorted(table.column("event_id").to_pylist()) == ["e10", "e11"]
    # The replaced version stays readable.
    assert read_table(out, version=0).num_rows == 3


def test_refuses_a_foreign_directory_and_appends_of_other_columns(spark, tmp_path):
    foreign = tmp_path / "not_delta"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a Delta table"):
        write_source_table(events(spark, range(2)), foreign, mode="overwrite")
    assert (foreign / "notes.txt").exists()

    out = tmp_path / "events"
    write_source_table(events(spark, range(2)), out)
    with pytest.raises(ValueError, match="new \\['extra'\\]"):
        write_source_table(events(spark, range(2)).withColumn("extra", F.lit(1)), out, mode="append")


def test_rows_without_any_load_time_go_to_a_null_partition(spark, tmp_path):
    out = tmp_path / "events"
    df = spark.createDataFrame([("e1", None, None)],
                               "event_id string, load_tstamp timestamp, collector_tstamp timestamp")
    write_source_table(df.withColumn("load_date", F.to_date("load_tstamp")), out)
    table = read_table(out)
    assert table.column("event_id").to_pylist() == ["e1"]
    assert table.column("load_date").to_pylist() == [None]
