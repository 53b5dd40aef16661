"""An event day an operator skipped (`manifest skip daily_aggregates/D`): the late-days plan
leaves it out, so the days around it are rebuilt in ranges of their own instead of one range
whose claim refuses the skipped day at every tick; and its filtered rows, those that land later
and those a rerun removes, are recorded as accounted for. The manifest and the daily ledger are
real (delta-rs); the filtered counts are written as the hourly step writes them. No Spark."""
import datetime as dt

import pyarrow as pa
import pytest
from dagster import build_sensor_context, instance_for_test
from deltalake import DeltaTable, write_deltalake

from incremental_assets import runner
from incremental_assets.automation import late_days_sensors
from incremental_assets.automation.hourly_sensor import SENSOR_CLOCK_ENV
from incremental_assets.definitions import warehouse
from incremental_assets.names import DAY_LEDGER, FILTERED_COUNTS, RANGE_END_TAG, RANGE_START_TAG
from incremental_assets.operator.operations import skip_item
from incremental_assets.state.day_ledger import DailyLedger, rows_accounted_for
from resources.manifest_items import item_id

SKIPPED = dt.date(2026, 1, 6)
AFTER = dt.datetime(2026, 1, 9, tzinfo=dt.timezone.utc)  # every day of these tests has its partition


def load(settings, day: dt.date, rows: int, hour: int = 3) -> None:
    """`rows` filtered rows of event day `day`, loaded at `hour` o'clock that day (on time)."""
    loaded = dt.datetime.combine(day, dt.time(hour), dt.timezone.utc)
    write_deltalake(settings.table_path(FILTERED_COUNTS), pa.table({
        "load_hour_tstamp": pa.array([loaded], pa.timestamp("us", "UTC")),
        "event_date": pa.array([day], pa.date32()),
        "load_date": pa.array([day], pa.date32()),
        "rows": pa.array([rows], pa.int64()),
        "rows_digest": pa.array([rows * 7919], pa.int64()),
    }), mode="append")


def late_days_tick(instance, monkeypatch=None, now: dt.datetime | None = None):
    """One tick of late_days_sensor, at `now` when given (the sensor's clock)."""
    if now is not None:
        monkeypatch.setenv(SENSOR_CLOCK_ENV, now.isoformat())
    with build_sensor_context(instance=instance, resources={"warehouse": warehouse}) as context:
        return late_days_sensors.late_days_sensor.evaluate_tick(context)


def ranges(result) -> list[tuple[str, str]]:
    return [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in result.run_requests]


@pytest.fixture
def settings(empty_warehouse_settings):
    skip_item(empty_warehouse_settings, item_id("daily_aggregates", SKIPPED.isoformat()), note="bad day")
    return empty_warehouse_settings


def test_a_skipped_day_is_left_out_of_the_ranges_and_its_rows_accounted_for(settings):
    for day, rows in ((dt.date(2026, 1, 5), 2), (SKIPPED, 3), (dt.date(2026, 1, 7), 4)):
        load(settings, day, rows)
    with instance_for_test() as instance:
        result = late_days_tick(instance)
    assert ranges(result) == [("2026-01-05", "2026-01-05"), ("2026-01-07", "2026-01-07")]
    ledger = DailyLedger(settings)
    assert (SKIPPED, SKIPPED) not in ledger.unaccounted
    assert ledger.state[2] == {(SKIPPED, SKIPPED): 3}  # held back by the skip, for good


def test_rows_landing_on_or_leaving_a_skipped_day_launch_nothing_and_stay_accounted_for(settings):
    load(settings, SKIPPED, 3)
    with instance_for_test() as instance:
        first = late_days_tick(instance)
        assert not first.run_requests, ranges(first)
        assert rows_accounted_for(settings, AFTER)["broken"] == {}

        load(settings, SKIPPED, 2, hour=9)  # a later load hour lands more rows on the day
        later = late_days_tick(instance)
        assert not later.run_requests, ranges(later)
        assert rows_accounted_for(settings, AFTER)["pending"] == {SKIPPED: 5}

        # A rerun of the first hour removes its rows: fewer rows than accounted for, which on a
        # day not skipped forces a rebuild.
        DeltaTable(settings.table_path(FILTERED_COUNTS)).delete("rows = 3")
        removed = late_days_tick(instance)
    assert not removed.run_requests, ranges(removed)
    assert rows_accounted_for(settings, AFTER)["broken"] == {}
    assert DeltaTable(settings.table_path(DAY_LEDGER)).to_pyarrow_table()["rows_pending"].to_pylist() == [2]


def test_rows_a_rerun_removes_from_a_day_aggregated_before_its_skip_are_accounted_for(settings):
    load(settings, SKIPPED, 3)
    write_deltalake(settings.table_path(DAY_LEDGER), pa.table({  # the day's rebuild before the skip
        "event_date": pa.array([SKIPPED], pa.date32()), "load_date": pa.array([SKIPPED], pa.date32()),
        "rows_aggregated": pa.array([3], pa.int64()), "rows_pending": pa.array([0], pa.int64()),
        "last_rebuilt_at": pa.array([None], pa.timestamp("us", "UTC")),
        "last_rebuilt_run_id": pa.array(["r1"], pa.string()), "digest_aggregated": pa.array([3 * 7919], pa.int64()),
    }))
    DeltaTable(settings.table_path(FILTERED_COUNTS)).delete()
    load(settings, SKIPPED, 1)  # a rerun of the hour left one of its three rows
    with instance_for_test() as instance:
        result = late_days_tick(instance)
    assert not result.run_requests, ranges(result)
    # daily_aggregates still counts the two rows gone: the ledger holds them as -2 pending.
    assert rows_accounted_for(settings, AFTER)["broken"] == {}
    assert DailyLedger(settings).state[1:] == ({(SKIPPED, SKIPPED): 3}, {(SKIPPED, SKIPPED): -2})


def test_a_backfill_naming_a_skipped_day_rebuilds_the_others(settings, monkeypatch):
    rebuilt, lines = [], []
    monkeypatch.setattr(runner, "run_days_and_attributes", lambda days, **_: rebuilt.append(days))
    neighbours = {dt.date(2026, 1, 5), dt.date(2026, 1, 7)}
    runner.late_days_and_attributes(settings, instance=None, report=runner.RunReport(), tags={}, echo=lines.append,
                                    now=dt.datetime(2026, 1, 8, tzinfo=dt.timezone.utc), also=neighbours | {SKIPPED})
    assert rebuilt == [sorted(neighbours)]
    assert any(str(SKIPPED) in line and "skipped" in line for line in lines), lines
