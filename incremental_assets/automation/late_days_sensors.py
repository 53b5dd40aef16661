"""After the hourly assets: plan the late days and rebuild them, then attributes.

- `late_days_sensor`: after a run that materialized `filtered_events` succeeds, plans the
  event days to rebuild (`ledger.plan_late_days`) and requests one `daily_job` run per
  contiguous range of days.
- `attributes_sensor`: once every `daily_job` run of one plan has succeeded, requests
  `attributes_job`.
"""

from datetime import datetime

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    RunStatusSensorContext,
    SkipReason,
    run_status_sensor,
)

from incremental_assets.automation.jobs import attributes_job, daily_job
from incremental_assets.ledger import plan_late_days
from incremental_assets.names import (
    BACKFILL_TAG,
    DAILY_AGGREGATES,
    PLAN_RUNS_TAG,
    PLAN_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
)
from incremental_assets.partitions import contiguous_ranges, day_key, hourly_partitions
from incremental_assets.settings import Settings
from resources.warehouse import WarehouseResource

FILTERED_EVENTS_KEY = AssetKey("filtered_events")
DAILY_AGGREGATES_KEY = AssetKey(DAILY_AGGREGATES)


def filtered_load_window(instance, run_id: str) -> tuple[datetime, datetime] | None:
    """The load hours [start, end) whose filtered_events the run materialized, or None."""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    keys = [r.event_log_entry.dagster_event.partition for r in records
            if r.event_log_entry.dagster_event.asset_key == FILTERED_EVENTS_KEY]
    keys = [k for k in keys if k]
    if not keys:
        return None
    windows = [hourly_partitions.time_window_for_partition_key(k) for k in keys]
    return min(w.start for w in windows), max(w.end for w in windows)


def days_rebuilt_by_backfill(instance, run) -> set[str]:
    """The daily_aggregates partitions of the asset backfill `run` belongs to (it rebuilds them)."""
    backfill_id = run.tags.get(BACKFILL_TAG)
    backfill = instance.get_backfill(backfill_id) if backfill_id else None
    data = backfill.asset_backfill_data if backfill is not None else None  # Dagster-internal data
    if data is None or DAILY_AGGREGATES_KEY not in data.target_subset.partitions_subsets_by_asset_key:
        return set()
    return set(data.target_subset.get_partitions_subset(DAILY_AGGREGATES_KEY).get_partition_keys())


def _carried_tags(run) -> dict[str, str]:
    """The run state and limits in words, passed on from the run that started the chain."""
    return {k: v for k, v in run.tags.items() if k in (RUN_STATE_TAG, RUN_LIMITS_TAG)}


def late_day_requests(settings: Settings, instance, run) -> list[RunRequest] | SkipReason | None:
    """The daily_job runs that follow `run`, per planning.late_days; None if it made no filtered_events."""
    window = filtered_load_window(instance, run.run_id)
    if window is None:
        return None
    plan = plan_late_days(settings, *window)
    loads = f"{window[0]:%Y-%m-%d %H:%M} .. {window[1]:%Y-%m-%d %H:%M}"
    owned = days_rebuilt_by_backfill(instance, run)
    ranges = contiguous_ranges(d for d in plan.days if day_key(d) not in owned)
    if not ranges:
        pending = sum(plan.skipped.values())
        return SkipReason(f"loads {loads} (run {run.run_id}): no event day to rebuild"
                          + (f" besides the {len(owned)} day(s) its backfill rebuilds" if owned else "")
                          + (f"; {pending} late row(s) pending" if pending else ""))
    requests = []
    for first_day, last_day in ranges:
        first, last = day_key(first_day), day_key(last_day)
        requests.append(RunRequest(
            job_name=daily_job.name,
            # A rerun of the same hours is another run: its days are planned again.
            run_key=f"late days {first}...{last} after run {run.run_id}",
            tags={**_carried_tags(run), RANGE_START_TAG: first, RANGE_END_TAG: last,
                  PLAN_TAG: run.run_id, PLAN_RUNS_TAG: str(len(ranges))}))
    return requests


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    name="late_days_sensor",
    request_job=daily_job,
    default_status=DefaultSensorStatus.RUNNING,
    description="After a run that materialized filtered_events succeeds: plans the event days to "
                "rebuild (planning.late_days; pending rows are recorded) and requests one "
                "daily_job run per contiguous range of days.",
)
def late_days_sensor(context: RunStatusSensorContext, warehouse: WarehouseResource):
    return late_day_requests(warehouse.settings, context.instance, context.dagster_run)


def attributes_request(instance, run) -> RunRequest | SkipReason:
    """attributes_job once every daily_job run of the run's late-days plan has succeeded."""
    plan = run.tags.get(PLAN_TAG)
    if plan is None:  # a daily_job run launched by hand
        return RunRequest(run_key=f"attributes after run {run.run_id}", job_name=attributes_job.name)
    expected = int(run.tags.get(PLAN_RUNS_TAG, "1"))
    runs = instance.get_runs(filters=RunsFilter(job_name=daily_job.name, tags={PLAN_TAG: plan}))
    succeeded = sum(1 for r in runs if r.status is DagsterRunStatus.SUCCESS)
    if succeeded < expected:
        return SkipReason(f"{succeeded} of {expected} daily runs planned after run {plan} succeeded; "
                          "attributes wait for all of them")
    return RunRequest(run_key=f"attributes after late days of run {plan}", job_name=attributes_job.name,
                      tags={**_carried_tags(run), PLAN_TAG: plan})


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    name="attributes_sensor",
    monitored_jobs=[daily_job],
    request_job=attributes_job,
    default_status=DefaultSensorStatus.RUNNING,
    description="Requests attributes_job once every daily_job run of a late-days plan has succeeded.",
)
def attributes_sensor(context: RunStatusSensorContext):
    return attributes_request(context.instance, context.dagster_run)
