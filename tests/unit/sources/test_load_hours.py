"""sources.load_hours: which load hours a source's files hold, from its Delta log only."""

import datetime as dt
import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction

from incremental_assets.sources.load_hours import hours_changed_by_commits, source_snapshot

UTC = dt.timezone.utc


@pytest.fixture
def berlin_host(monkeypatch):
    """The process runs in Europe/Berlin (UTC+1 in January), as a sensor on such a host would."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_timestamp_ntz_load_times_are_utc_hours_whatever_the_host_time_zone(tmp_path, berlin_host):
    # A TIMESTAMP_NTZ load_tstamp is a UTC wall time to the runs (Spark's
    # session time zone is UTC); the sensor placed it in the host's zone, an hour off here.
    loads = [dt.datetime(2026, 1, 5, 10, 30), dt.datetime(2026, 1, 5, 11, 59)]
    table = pa.table({"event_id": ["a", "b"], "load_tstamp": pa.array(loads, pa.timestamp("us")),
                      "collector_tstamp": pa.array(loads, pa.timestamp("us"))})
    write_deltalake(str(tmp_path / "src"), table)
    snapshot = source_snapshot(str(tmp_path / "src"), dt.datetime(2026, 1, 5, tzinfo=UTC),
                               dt.datetime(2026, 1, 6, tzinfo=UTC))
    assert sorted(snapshot.fingerprints) == [dt.datetime(2026, 1, 5, 10, tzinfo=UTC),
                                             dt.datetime(2026, 1, 5, 11, tzinfo=UTC)]


def test_partition_days_name_the_folders_that_hold_the_hours_asked_for(tmp_path):
    # A loader in UTC+2 writes load_date as its local date, so the rows
    # loaded at 22:30 UTC on the 5th sit in load_date=2026-01-06. The plan places them by
    # their load_tstamp statistics; the reader must read the folder the plan found them in.
    def load_file(load: dt.datetime, local_day: dt.date):
        table = pa.table({"event_id": [str(load)], "load_tstamp": pa.array([load], pa.timestamp("us", "UTC")),
                          "collector_tstamp": pa.array([load], pa.timestamp("us", "UTC")),
                          "load_date": pa.array([local_day], pa.date32())})
        write_deltalake(str(tmp_path / "src"), table, mode="append", partition_by=["load_date"])

    load_file(dt.datetime(2026, 1, 5, 10, 30, tzinfo=UTC), dt.date(2026, 1, 5))
    load_file(dt.datetime(2026, 1, 5, 22, 30, tzinfo=UTC), dt.date(2026, 1, 6))
    load_file(dt.datetime(2026, 1, 6, 9, 0, tzinfo=UTC), dt.date(2026, 1, 6))

    def days(start_hour: int, hours: int = 1):
        start = dt.datetime(2026, 1, 5, tzinfo=UTC) + dt.timedelta(hours=start_hour)
        return source_snapshot(str(tmp_path / "src"), start, start + dt.timedelta(hours=hours)).partition_days

    assert days(22) == (dt.date(2026, 1, 6), dt.date(2026, 1, 6))  # the 5th's hour, in the 6th's folder
    assert days(10) == (dt.date(2026, 1, 5), dt.date(2026, 1, 5))
    assert days(0, 24) == (dt.date(2026, 1, 5), dt.date(2026, 1, 6))
    assert days(12) is None  # no file holds the hour


def test_a_file_with_garbage_load_times_counts_only_in_the_hours_it_holds(tmp_path):
    # One row loaded "in 1970" and one "in 2099" stretch the file's
    # statistics over every hour of the history; the file is read to find its real hours.
    loads = [dt.datetime(2026, 1, 5, 10, 30, tzinfo=UTC), dt.datetime(2026, 1, 5, 10, 45, tzinfo=UTC),
             dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2099, 12, 31, 23, tzinfo=UTC),
             None]  # no load_tstamp: its collector_tstamp's hour (13:00)
    collector = [dt.datetime(2026, 1, 5, 10, 30, tzinfo=UTC)] * 4 + [dt.datetime(2026, 1, 5, 13, 5, tzinfo=UTC)]
    table = pa.table({"event_id": list("abcde"), "load_tstamp": pa.array(loads, pa.timestamp("us", "UTC")),
                      "collector_tstamp": pa.array(collector, pa.timestamp("us", "UTC"))})
    write_deltalake(str(tmp_path / "src"), table)

    snapshot = source_snapshot(str(tmp_path / "src"), dt.datetime(2026, 1, 1, tzinfo=UTC),
                               dt.datetime(2026, 2, 1, tzinfo=UTC))
    assert sorted(snapshot.fingerprints) == [dt.datetime(2026, 1, 5, 10, tzinfo=UTC),
                                             dt.datetime(2026, 1, 5, 13, tzinfo=UTC)]


def test_rows_estimate_spreads_each_files_rows_over_the_hours_it_may_hold(tmp_path):
    # The hourly step sizes its window by this (resources.materialized): a file of one hour
    # counts whole, a compacted file of several hours counts its share, a file of other hours
    # not at all, rows a delete removed not at all.
    def load_file(hours: list[int], rows_per_hour: int):
        loads = [dt.datetime(2026, 1, 5, h, i, tzinfo=UTC) for h in hours for i in range(rows_per_hour)]
        table = pa.table({"event_id": [f"{t:%H}-{t.minute}" for t in loads],
                          "load_tstamp": pa.array(loads, pa.timestamp("us", "UTC")),
                          "collector_tstamp": pa.array(loads, pa.timestamp("us", "UTC"))})
        write_deltalake(str(tmp_path / "src"), table, mode="append")

    load_file([10], 3)
    load_file([11], 5)
    load_file([14, 15, 16, 17], 6)  # compacted: 24 rows over four hours

    def rows_estimate(start_hour: int, hours: int = 1):
        start = dt.datetime(2026, 1, 5, start_hour, tzinfo=UTC)
        return source_snapshot(str(tmp_path / "src"), start, start + dt.timedelta(hours=hours)).rows_estimate

    assert [rows_estimate(10), rows_estimate(11), rows_estimate(10, 2), rows_estimate(0, 24)] == [3, 5, 8, 32]
    assert [rows_estimate(15), rows_estimate(16, 4), rows_estimate(12, 2)] == [6, 12, 0]
    DeltaTable(str(tmp_path / "src")).delete("event_id = '11-0'")  # rewrites the file without the row
    assert rows_estimate(11) == 4


def test_files_the_log_keeps_no_load_statistics_of_count_in_the_hours_they_hold(tmp_path):
    # A writer that indexes the first column only, folders named by a loader's local date
    # (UTC-3): the rows loaded before 03:00 UTC on the 5th sit in load_date=2026-01-04. The
    # file's footer places them; a file whose footer keeps no bounds either (INT96
    # timestamps, as older Spark writers store them) is read for its load times.
    path = tmp_path / "src"
    loads = [dt.datetime(2026, 1, 5, 0, 30, tzinfo=UTC), dt.datetime(2026, 1, 5, 1, 10, tzinfo=UTC)]
    write_deltalake(str(path), pa.table({
        "event_id": ["a", "b"], "load_tstamp": pa.array(loads, pa.timestamp("us", "UTC")),
        "collector_tstamp": pa.array(loads, pa.timestamp("us", "UTC")),
        "load_date": pa.array([dt.date(2026, 1, 4)] * 2, pa.date32())}),
        partition_by=["load_date"], configuration={"delta.dataSkippingNumIndexedCols": "1"})
    assert "min.load_tstamp" not in pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).column_names

    late = dt.datetime(2026, 1, 5, 2, 20, tzinfo=UTC)
    relative = "load_date=2026-01-04/int96.parquet"
    pq.write_table(pa.table({"event_id": ["c"], "load_tstamp": pa.array([late], pa.timestamp("us", "UTC")),
                             "collector_tstamp": pa.array([late], pa.timestamp("us", "UTC"))}),
                   path / relative, use_deprecated_int96_timestamps=True)
    table = DeltaTable(str(path))
    table.create_write_transaction(
        [AddAction(relative, (path / relative).stat().st_size, {"load_date": "2026-01-04"},
                   int(time.time() * 1000), True, json.dumps({"numRecords": 1}))],
        mode="append", schema=table.schema(), partition_by=["load_date"])

    hours = [dt.datetime(2026, 1, 5, hour, tzinfo=UTC) for hour in (0, 1, 2)]
    snapshot = source_snapshot(str(path), dt.datetime(2026, 1, 4, tzinfo=UTC), dt.datetime(2026, 1, 6, tzinfo=UTC))
    assert sorted(snapshot.fingerprints) == hours
    assert snapshot.partition_days == (dt.date(2026, 1, 4), dt.date(2026, 1, 4))
    assert hours_changed_by_commits(str(path), 0, 1) == [(1, frozenset(hours[2:]))]
