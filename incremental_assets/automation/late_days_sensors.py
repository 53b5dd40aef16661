"""After the load hours: rebuild the event days, then attributes.

- `late_days_sensor` (every minute): once no hourly or daily run is going, plans the event days
  from the daily ledger (`day_ledger.plan_late_days`: every day with unaccounted rows, whatever
  hour touched it, so a lost plan is made again) and requests one `daily_job` run per
  contiguous range of days; a day after the last daily partition that exists (tomorrow's) waits.
- `attributes_sensor` (and `attributes_after_failure_sensor`): once every `daily_job` run of one
  plan has finished and one at least succeeded, requests `attributes_job` (a failed run's days
  wait alone, fail-locked: attributes follow the days rebuilt); `attributes_schedule` recomputes
  attributes each day after midnight (their windows end at the new day), once some event day has
  been aggregated.
"""

import uuid
from datetime import datetime

from dagster import (
    AssetKey,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    RunStatusSensorContext,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SkipReason,
    run_status_sensor,
    schedule,
    sensor,
)
from deltalake import DeltaTable

from incremental_assets.automation.hourly_sensor import HOURLY_KEYS, utc_now, work_in_progress
from incremental_assets.automation.jobs import attributes_job, daily_job, hourly_job
from incremental_assets.automation.status import SCHEDULE_STATUS, SENSOR_STATUS
from incremental_assets.names import (
    DAILY_AGGREGATES,
    PLAN_RUNS_TAG,
    PLAN_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
)
from incremental_assets.planning.hours import contiguous_ranges, day_key
from incremental_assets.planning.late_days import describe_waiting
from incremental_assets.state.day_ledger import DailyLedger, plan_late_days
from incremental_assets.state.progress import fail_locked_days
from resources.warehouse import WarehouseResource

DAILY_KEYS = frozenset({AssetKey(DAILY_AGGREGATES)})


def late_day_requests(warehouse: WarehouseResource, instance, now: datetime) -> list[RunRequest] | SkipReason:
    """The daily_job runs the daily ledger calls for at `now`, one per contiguous range of days."""
    busy = work_in_progress(instance, {hourly_job.name, daily_job.name}, HOURLY_KEYS | DAILY_KEYS)
    if busy:
        return SkipReason(f"waiting for {busy} to finish")
    settings = warehouse.settings
    ledger = DailyLedger(settings)
    if not ledger.unaccounted and not ledger.content_changed_days:
        return SkipReason("every filtered row is aggregated or pending: no event day to rebuild")
    plan = plan_late_days(settings, now, ledger)
    blocked = fail_locked_days(settings, plan.days)
    ranges = contiguous_ranges(day for day in plan.days if day not in blocked)
    if not ranges and blocked:
        return SkipReason(f"{len(blocked)} event day(s) to rebuild are fail-locked: fix the cause, then "
                          f"`incremental-assets manifest resolve {min(blocked.items())[1]}` "
                          "(or run manifest_admin_job)")
    if not ranges:
        return SkipReason("; ".join(filter(None, (
            plan.skipped and f"{sum(plan.skipped.values())} late row(s) pending (below min_rows_to_process)",
            plan.waiting and describe_waiting(plan.waiting)))) or "no event day to rebuild")
    plan_id = uuid.uuid4().hex[:12]
    return [RunRequest(job_name=daily_job.name, run_key=f"late days {day_key(first)}...{day_key(last)} plan {plan_id}",
                       tags={RANGE_START_TAG: day_key(first), RANGE_END_TAG: day_key(last),
                             PLAN_TAG: plan_id, PLAN_RUNS_TAG: str(len(ranges)),
                             **launched_by("LATE_DAYS", f"late_days_sensor: event days {day_key(first)} .. "
                                                        f"{day_key(last)}, run {number} of {len(ranges)} "
                                                        f"of plan {plan_id}")})
            for number, (first, last) in enumerate(ranges, 1)]


def launched_by(state: str, limits: str) -> dict[str, str]:
    """The tags that tell a run's materializations who launched it and over what (else they
    read "Manual run")."""
    return {RUN_STATE_TAG: state, RUN_LIMITS_TAG: limits}


@sensor(
    name="late_days_sensor",
    job=daily_job,
    minimum_interval_seconds=60,
    default_status=SENSOR_STATUS,
    description="Once no hourly or daily run is going: plans the event days from the daily ledger "
                "(every day with unaccounted filtered rows; late rows below min_rows_to_process are "
                "recorded as pending) and requests one daily_job run per contiguous range of days.",
)
def late_days_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource):
    return late_day_requests(warehouse, context.instance, utc_now())


FINISHED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)


def attributes_request(instance, run) -> RunRequest | SkipReason:
    """attributes_job once every daily_job run of the run's late-days plan has finished and one
    at least succeeded: a failed run's days wait alone (fail-locked), the users of the days the
    others rebuilt do not wait for them."""
    plan = run.tags.get(PLAN_TAG)
    if plan is None:  # a daily_job run launched by hand
        return RunRequest(run_key=f"attributes after run {run.run_id}", job_name=attributes_job.name,
                          tags=launched_by("AFTER_DAILY", f"attributes_sensor: after daily_job run {run.run_id}"))
    expected = int(run.tags.get(PLAN_RUNS_TAG, "1"))
    runs = instance.get_runs(filters=RunsFilter(job_name=daily_job.name, tags={PLAN_TAG: plan}))
    finished = [r for r in runs if r.status in FINISHED]
    succeeded = sum(r.status is DagsterRunStatus.SUCCESS for r in finished)
    if len(finished) < expected:
        return SkipReason(f"{len(finished)} of {expected} daily runs of plan {plan} finished; "
                          "attributes wait for the others")
    if not succeeded:
        return SkipReason(f"no daily run of plan {plan} succeeded: no rebuilt day for attributes to follow")
    if instance.get_runs(filters=RunsFilter(job_name=attributes_job.name, tags={PLAN_TAG: plan}), limit=1):
        return SkipReason(f"attributes after plan {plan} were requested already")
    failed = "" if succeeded == expected else (f" ({expected - succeeded} failed: their days wait, "
                                               "fail-locked, and their users with them)")
    return RunRequest(run_key=f"attributes after plan {plan}", job_name=attributes_job.name,
                      tags={PLAN_TAG: plan, **launched_by("AFTER_DAILY", f"attributes_sensor: after the {expected} "
                                                                         f"daily_job run(s) of plan {plan}{failed}")})


def _attributes_after_daily(status: DagsterRunStatus, name: str, description: str):
    """A sensor applying `attributes_request` to each daily_job run that ends in `status`."""
    @run_status_sensor(run_status=status, name=name, monitored_jobs=[daily_job], request_job=attributes_job,
                       default_status=SENSOR_STATUS, description=description)
    def attributes_after_daily(context: RunStatusSensorContext):
        return attributes_request(context.instance, context.dagster_run)

    return attributes_after_daily


attributes_sensor = _attributes_after_daily(
    DagsterRunStatus.SUCCESS, "attributes_sensor",
    "Requests attributes_job once every daily_job run of a late-days plan has finished, one at least successfully.")
# The same rule when the last daily_job run of a plan to finish failed: the days the others
# rebuilt do not wait for the failed one.
attributes_after_failure_sensor = _attributes_after_daily(
    DagsterRunStatus.FAILURE, "attributes_after_failure_sensor",
    "attributes_sensor's rule when the last daily_job run of a plan to finish failed: the days the others "
    "rebuilt do not wait for the failed one.")


def new_day_request(warehouse: WarehouseResource, day: str) -> RunRequest | SkipReason:
    """attributes_job as of the new day, once some event day has been aggregated: before that
    (a new deployment's first nights) the run would only fail for want of daily_aggregates."""
    if not DeltaTable.is_deltatable(warehouse.settings.table_path(DAILY_AGGREGATES)):
        return SkipReason("no event day aggregated yet (daily_aggregates does not exist): "
                          "attributes have nothing to be computed from")
    return RunRequest(run_key=f"attributes as of {day}",
                      tags=launched_by("NEW_DAY", f"attributes_schedule: as of the new day {day}"))


@schedule(
    name="attributes_schedule",
    job=attributes_job,
    cron_schedule="5 0 * * *",
    execution_timezone="UTC",
    default_status=SCHEDULE_STATUS,
    description="attributes as of the new day, just after midnight UTC (their windows end at it), "
                "once some event day has been aggregated.",
)
def attributes_schedule(context: ScheduleEvaluationContext, warehouse: WarehouseResource):
    return new_day_request(warehouse, context.scheduled_execution_time.date().isoformat())
