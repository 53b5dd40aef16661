"""A fail-locked event day: the late-days sensor and `run` rebuild the other
days and name the locked one, instead of launching a daily run that fails at its claim, every
minute. The manifest is real (delta-rs); the daily ledger's plan is given. No Spark."""
import datetime as dt
from types import SimpleNamespace

import pytest
from dagster import build_sensor_context, instance_for_test

from incremental_assets import runner
from incremental_assets.automation import late_days_sensors
from incremental_assets.definitions import warehouse
from incremental_assets.names import RANGE_END_TAG, RANGE_START_TAG, RUN_LIMITS_TAG, RUN_STATE_TAG
from incremental_assets.planning.late_days import LateDaysPlan
from incremental_assets.planning.processing_manifest import State
from resources.manifest import ManifestStore
from resources.manifest_items import item_id

DAYS = [dt.date(2026, 1, d) for d in (5, 6, 7, 8)]
LOCKED = item_id("daily_aggregates", "2026-01-07")


def never_finished(_lock):
    return None


@pytest.fixture
def settings(empty_warehouse_settings, monkeypatch):
    for module in (late_days_sensors, runner):
        monkeypatch.setattr(module, "plan_late_days", lambda *_: LateDaysPlan(days=DAYS, skipped={}))
    # The daily ledger has rows nobody planned yet.
    monkeypatch.setattr(late_days_sensors, "DailyLedger", lambda _settings: SimpleNamespace(
        unaccounted={(DAYS[0], DAYS[0]): 1}, content_changed_days=set()))
    monkeypatch.setattr(late_days_sensors, "work_in_progress", lambda *_: None)
    settings = empty_warehouse_settings
    manifest = ManifestStore.of(settings)
    manifest.claim([LOCKED], application="daily_aggregates", run_id="r1", run_finished=never_finished)
    manifest.close([LOCKED], run_id="r1", state=State.FAILED, application="daily_aggregates",
                   payload={"reason": "boom"})
    return settings


def late_days_tick(instance):
    with build_sensor_context(instance=instance, resources={"warehouse": warehouse}) as context:
        return late_days_sensors.late_days_sensor.evaluate_tick(context)


def test_the_sensor_rebuilds_the_other_days_around_a_fail_locked_one(settings):
    with instance_for_test() as instance:
        requests = late_days_tick(instance).run_requests
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in requests] == \
        [("2026-01-05", "2026-01-06"), ("2026-01-08", "2026-01-08")]
    # Their materializations say who launched them (not "Manual run").
    assert [r.tags[RUN_STATE_TAG] for r in requests] == ["LATE_DAYS", "LATE_DAYS"]
    assert requests[1].tags[RUN_LIMITS_TAG].startswith(
        "late_days_sensor: event days 2026-01-08 .. 2026-01-08, run 2 of 2")


def test_the_sensor_skips_naming_the_item_when_only_locked_days_are_due(settings, monkeypatch):
    monkeypatch.setattr(late_days_sensors, "plan_late_days",
                        lambda *_: LateDaysPlan(days=[dt.date(2026, 1, 7)], skipped={}))
    with instance_for_test() as instance:
        result = late_days_tick(instance)
    assert not result.run_requests
    assert "fail-locked" in result.skip_message and LOCKED in result.skip_message


def test_run_rebuilds_the_other_days_and_reports_the_locked_one(settings, monkeypatch):
    rebuilt, lines = [], []
    monkeypatch.setattr(runner, "run_days_and_attributes", lambda days, **_: rebuilt.append(days))
    report = runner.RunReport()
    runner.late_days_and_attributes(settings, instance=None, report=report, tags={}, echo=lines.append,
                                    now=dt.datetime(2026, 1, 9, tzinfo=dt.timezone.utc))
    assert rebuilt == [[DAYS[0], DAYS[1], DAYS[3]]]
    assert not report.success and "fail-locked" in report.refused
    assert any(LOCKED in line for line in lines), lines


def test_with_auto_resolve_no_day_waits(settings, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_AUTO_RESOLVE_FAILURES", "true")
    with instance_for_test() as instance:
        requests = late_days_tick(instance).run_requests
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in requests] == [("2026-01-05", "2026-01-08")]



def test_a_failed_daily_range_leaves_the_other_ranges_and_attributes_running(monkeypatch):
    launched = []

    def execute_job(job_name, *, instance, tags=None, partitions=None, echo=print):
        launched.append((job_name, partitions))
        return runner.JobRun(job_name, f"r{len(launched)}", success=partitions != ("2026-01-05", "2026-01-06"))

    monkeypatch.setattr(runner, "execute_job", execute_job)
    report = runner.RunReport()
    runner.run_days_and_attributes(DAYS[:2] + DAYS[3:], instance=None, report=report, tags={}, echo=lambda _: None)
    assert launched == [("daily_job", ("2026-01-05", "2026-01-06")), ("daily_job", ("2026-01-08", "2026-01-08")),
                        ("attributes_job", None)]
    assert not report.success  # the failed range is reported; its days wait, fail-locked


def test_limits_shows_the_locked_day_waiting_alone_in_daily_aggregates_own_progress(settings, monkeypatch):
    from incremental_assets.operator import operations

    monkeypatch.setattr(operations, "late_days", lambda *_: (LateDaysPlan(days=DAYS, skipped={}), {}))
    text = operations.describe_limits(settings, dt.datetime(2026, 1, 9, tzinfo=dt.timezone.utc))
    assert (f"daily_aggregates: nothing to aggregate yet; 4 event day(s) to rebuild, 1 of them fail-locked "
            f"(first: {LOCKED}), waiting alone") in text, text
    assert "attributes: never computed" in text
