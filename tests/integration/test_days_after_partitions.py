"""An event day whose daily partition does not exist yet: an event loaded today and derived up
to 24 h after its load (a skewed device clock) has tomorrow's date. The day waits: the late-days
sensor and `run` leave it out (a daily run naming it would fail until midnight), the
conservation check does not call it broken, and once the day exists it is rebuilt like any
other. The daily ledger is real (delta-rs); the filtered counts are written as the hourly step
writes them; the clock is injected. No Spark."""
import datetime as dt

import pyarrow as pa
import pytest
from dagster import instance_for_test
from deltalake import write_deltalake

from incremental_assets import runner
from incremental_assets.names import FILTERED_COUNTS
from incremental_assets.settings import Settings
from incremental_assets.state.day_ledger import rows_accounted_for
from tests.integration.test_skipped_days import late_days_tick, ranges

TODAY, TOMORROW = dt.date(2026, 1, 7), dt.date(2026, 1, 8)
NOON = dt.datetime(2026, 1, 7, 12, tzinfo=dt.timezone.utc)


def load(settings, event_day: dt.date, rows: int, loaded: dt.datetime) -> None:
    """`rows` filtered rows of `event_day`, loaded in the hour of `loaded`."""
    write_deltalake(settings.table_path(FILTERED_COUNTS), pa.table({
        "load_hour_tstamp": pa.array([loaded.replace(minute=0)], pa.timestamp("us", "UTC")),
        "event_date": pa.array([event_day], pa.date32()),
        "load_date": pa.array([loaded.date()], pa.date32()),
        "rows": pa.array([rows], pa.int64()),
        "rows_digest": pa.array([rows * 7919], pa.int64()),
    }), mode="append")


@pytest.fixture
def settings(empty_warehouse_settings):
    load(empty_warehouse_settings, TODAY, 2, dt.datetime(2026, 1, 7, 3, tzinfo=dt.timezone.utc))
    # Loaded at 03:00 today, derived up to 24 h later: tomorrow's event day.
    load(empty_warehouse_settings, TOMORROW, 1, dt.datetime(2026, 1, 7, 3, tzinfo=dt.timezone.utc))
    return empty_warehouse_settings


def test_tomorrows_day_waits_for_its_partition_then_is_rebuilt(settings, monkeypatch):
    with instance_for_test() as instance:
        today = late_days_tick(instance, monkeypatch, NOON)
        assert ranges(today) == [("2026-01-07", "2026-01-07")]
        # The day of tomorrow is neither rebuilt nor broken; its row waits, unaccounted.
        accounted = rows_accounted_for(settings, NOON)
        assert accounted["broken"] == {TODAY: 2} and accounted["waiting"] == {TOMORROW: 1}
        after_midnight = late_days_tick(instance, monkeypatch, dt.datetime(2026, 1, 8, 0, 1, tzinfo=dt.timezone.utc))
    assert ranges(after_midnight) == [("2026-01-07", "2026-01-08")]


def test_the_sensor_says_a_day_waits_when_that_is_all_there_is(empty_warehouse_settings, monkeypatch):
    load(empty_warehouse_settings, TOMORROW, 1, dt.datetime(2026, 1, 7, 3, tzinfo=dt.timezone.utc))
    with instance_for_test() as instance:
        result = late_days_tick(instance, monkeypatch, NOON)
    assert not result.run_requests, ranges(result)
    assert "2026-01-08" in result.skip_message and "partition" in result.skip_message, result.skip_message


def test_with_end_date_days_after_the_last_partition_never_run(empty_warehouse_settings, monkeypatch):
    # Loads end with 2026-01-06, event days with 2026-01-07; a day after that never exists.
    monkeypatch.setenv("INCREMENTAL_END_DATE", "2026-01-06")
    settings = Settings.load()
    load(settings, TODAY, 2, dt.datetime(2026, 1, 6, 23, tzinfo=dt.timezone.utc))
    load(settings, TOMORROW, 1, dt.datetime(2026, 1, 7, 3, tzinfo=dt.timezone.utc))  # from an earlier end_date
    later = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    with instance_for_test() as instance:
        result = late_days_tick(instance, monkeypatch, later)
    assert ranges(result) == [("2026-01-07", "2026-01-07")]
    assert rows_accounted_for(settings, later)["waiting"] == {TOMORROW: 1}


def test_run_leaves_the_day_out_and_says_so_in_one_line(settings, monkeypatch):
    rebuilt, lines = [], []
    monkeypatch.setattr(runner, "run_days_and_attributes", lambda days, **_: rebuilt.append(days))
    runner.late_days_and_attributes(settings, instance=None, report=runner.RunReport(), tags={}, echo=lines.append,
                                    now=NOON)
    assert rebuilt == [[TODAY]]
    waiting = [line for line in lines if "2026-01-08" in line]
    assert len(waiting) == 1 and "partition" in waiting[0], lines
