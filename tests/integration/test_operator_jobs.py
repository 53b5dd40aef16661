"""apply_job from the UI: a recorded plan is checked as `incremental-assets apply` checks it, the
run is tagged with its id, and apply_plan_sensor requests the plan's runs once the run succeeds;
a bad or stale plan id fails the run with a message naming it. No Spark: the source is a small
Delta table written with delta-rs, and a due plan reads only its log."""

from datetime import datetime, timedelta, timezone

from dagster import DagsterEventType, build_run_status_sensor_context

from incremental_assets.automation.operator_jobs import apply_plan_sensor
from incremental_assets.definitions import defs, warehouse
from incremental_assets.names import APPLIED_PLAN_TAG, RANGE_END_TAG, RANGE_START_TAG
from incremental_assets.operator import plans
from incremental_assets.settings import Settings
from tests.integration.test_sensors import add_loads

DAY = datetime(2026, 1, 5, tzinfo=timezone.utc)


def at(hour: float) -> datetime:
    return DAY + timedelta(hours=hour)


def apply(instance, plan_id: str):
    return defs.resolve_job_def("apply_job").execute_in_process(
        run_config={"ops": {"apply_op": {"config": {"plan_id": plan_id}}}}, instance=instance, raise_on_error=False)


def failure_message(result) -> str:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    return failure.event_specific_data.error.message


def sensor_requests(instance, result):
    run = instance.get_run_by_id(result.run_id)
    (record,) = instance.get_records_for_run(result.run_id, of_type=DagsterEventType.RUN_SUCCESS).records
    event = record.event_log_entry.dagster_event
    with build_run_status_sensor_context(sensor_name="apply_plan_sensor", dagster_event=event,
                                         dagster_instance=instance, dagster_run=run,
                                         resources={"warehouse": warehouse}) as context:
        return apply_plan_sensor(context)


def test_apply_job_starts_a_recorded_plan_and_the_sensor_launches_its_runs(env, monkeypatch):
    source, instance = env
    monkeypatch.setenv("INCREMENTAL_MAX_HOURS_PER_RUN", "2")
    add_loads(source, at(0.2), at(1.5), at(2.1))
    plan = plans.make_plan(Settings.load(), at(3.5))
    plans.record_plan(Settings.load(), plan, at(3.5))

    result = apply(instance, plan.plan_id)
    assert result.success
    assert instance.get_run_by_id(result.run_id).tags[APPLIED_PLAN_TAG] == plan.plan_id

    requests = sensor_requests(instance, result)
    assert [(r.job_name, r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in requests] == [
        ("hourly_job", "2026-01-05-00:00", "2026-01-05-01:00"), ("hourly_job", "2026-01-05-02:00", "2026-01-05-02:00")]
    assert {r.tags[APPLIED_PLAN_TAG] for r in requests} == {plan.plan_id}
    assert len({r.run_key for r in requests}) == 2  # each requested once for this apply run


def test_apply_job_fails_naming_a_plan_id_unknown_or_moved(env):
    source, instance = env
    unknown = apply(instance, "no-such-plan")
    assert not unknown.success
    assert "plan_id='no-such-plan'" in failure_message(unknown) and "is recorded" in failure_message(unknown)

    add_loads(source, at(0.2))
    plan = plans.make_plan(Settings.load(), at(3.5))
    plans.record_plan(Settings.load(), plan, at(3.5))
    add_loads(source, at(1.2))  # the source moved since the plan was shown
    moved = apply(instance, plan.plan_id)
    assert not moved.success
    assert f"plan_id={plan.plan_id!r}" in failure_message(moved) and "not applied" in failure_message(moved)
    assert APPLIED_PLAN_TAG not in instance.get_run_by_id(moved.run_id).tags
