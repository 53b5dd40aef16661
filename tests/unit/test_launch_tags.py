"""Runs launched by the sensors, the schedule and the CLI say who launched them and over what:
their materializations show it instead of "Manual run"."""
from types import SimpleNamespace

from incremental_assets import runner
from incremental_assets.automation import late_days_sensors
from incremental_assets.names import AS_OF_TAG, RUN_LIMITS_TAG, RUN_STATE_TAG


def test_attributes_after_a_hand_launched_daily_run_say_so():
    request = late_days_sensors.attributes_request(None, SimpleNamespace(run_id="r9", tags={}))
    assert request.tags == {RUN_STATE_TAG: "AFTER_DAILY", RUN_LIMITS_TAG: "attributes_sensor: after daily_job run r9"}


def test_attributes_runs_of_the_cli_keep_the_callers_state_and_say_why():
    assert runner.attributes_tags({AS_OF_TAG: "2026-01-09"}, "after the event days") == {
        AS_OF_TAG: "2026-01-09", RUN_STATE_TAG: "AFTER_DAILY",
        RUN_LIMITS_TAG: "incremental-assets: attributes after the event days, as of 2026-01-09"}
    assert runner.attributes_tags({RUN_STATE_TAG: "BACKFILL"}, "x")[RUN_STATE_TAG] == "BACKFILL"
