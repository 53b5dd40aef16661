"""hourly_load_sensor: watch the source (its Delta log: no Spark) and launch one ranged run of
hourly_job for the oldest load hours whose data differs from what they were processed from.
Each run applies the first range of a plan the sensor shows (the `plans` observation), named
by its tags; the run records it (`plans`) when it starts, so the tick itself writes nothing.
Each tick also tells the catalog of the source's hours and of the work due (source_status.py).

Which hours run is `progress.plan_load_hours`, the rule `incremental-assets run` uses too; the
truth is the ledger of processed hours, so the sensor keeps no cursor.
"""

import hashlib
import os
from datetime import datetime, timedelta, timezone

from dagster import (
    AssetKey,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.execution.backfill import BulkActionStatus  # not exported at top level

from incremental_assets.automation.jobs import hourly_job
from incremental_assets.automation.source_status import (
    changed_due_observation,
    due_observation,
    source_hour_reports,
)
from incremental_assets.automation.status import SENSOR_STATUS
from incremental_assets.names import (
    APPLIED_PLAN_TAG,
    HOURLY_ASSETS,
    LAUNCH_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    REASON_TAG,
    REQUESTED_AT_TAG,
    RUN_KEY_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
    SOURCE_VERSION_TAG,
)
from incremental_assets.operator.plans import due_plan
from incremental_assets.partitions import LOAD_SETTINGS
from incremental_assets.planning.hours import hour_keys, hours_between
from incremental_assets.process_memory import keep_long_lived_out_of_collections
from incremental_assets.settings import parse_utc_datetime
from incremental_assets.sources.load_hours import source_snapshot
from incremental_assets.state.progress import catch_up_tags, first_load_hour, plan_load_hours
from resources.manifest import abandoned_lock_check
from resources.warehouse import WarehouseResource

HOURLY_KEYS = frozenset(AssetKey(name) for name in HOURLY_ASSETS)
UNFINISHED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
ENDED_UNSUCCESSFULLY = frozenset({DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED})
# A launch that keeps failing before its claim is launched again at most this seldom.
RELAUNCH_WAIT_MAX = timedelta(hours=1)

# An ISO time the sensor takes as "now" instead of the system clock: for tests and rehearsals of
# the daemon on past data. Unset in production.
SENSOR_CLOCK_ENV = "INCREMENTAL_SENSOR_CLOCK"


def utc_now() -> datetime:
    """The sensor's clock: the system clock, or the fixed time INCREMENTAL_SENSOR_CLOCK names."""
    fixed = os.environ.get(SENSOR_CLOCK_ENV)
    return parse_utc_datetime(SENSOR_CLOCK_ENV, fixed) if fixed else datetime.now(timezone.utc)


def work_in_progress(instance, job_names: set[str], asset_keys: frozenset[AssetKey]) -> str | None:
    """A run of these jobs or assets, or an asset backfill of these assets, still going; else None."""
    for run in instance.get_runs(filters=RunsFilter(statuses=UNFINISHED), limit=50):
        if run.job_name in job_names or (run.asset_selection and run.asset_selection & asset_keys):
            return f"run {run.run_id} ({run.job_name}, {run.status.value})"
    for backfill in instance.get_backfills(status=BulkActionStatus.REQUESTED, limit=50):
        if set(backfill.asset_selection or ()) & asset_keys:
            return f"backfill {backfill.backfill_id}"
    return None


def hourly_run_request(warehouse: WarehouseResource, *, now: datetime, instance) -> SensorResult:
    """One evaluation of hourly_load_sensor: at most one ranged run of hourly_job, with what the
    catalog shows of the source's hours and of the work due (automation/source_status.py)."""
    settings = warehouse.settings
    since = first_load_hour(settings)
    snapshot = source_snapshot(settings.source, since, now)
    if snapshot is None:
        return SensorResult(skip_reason=SkipReason(
            f"no table at the source path {settings.source} (INCREMENTAL_SOURCE_PATH): nothing to watch"))
    reports = source_hour_reports(instance, snapshot, since=since, now=now)
    busy = work_in_progress(instance, {hourly_job.name}, HOURLY_KEYS)
    if busy:
        return SensorResult(skip_reason=SkipReason(f"waiting for {busy} to finish"), asset_events=reports)
    result = next_run_request(warehouse, now=now, instance=instance, snapshot=snapshot)
    return SensorResult(run_requests=result.run_requests, skip_reason=result.skip_reason,
                        asset_events=[*reports, *result.asset_events])


def next_run_request(warehouse: WarehouseResource, *, now: datetime, instance, snapshot) -> SensorResult:
    """The run of the oldest hours due, unless it was launched already; else why not. Either way
    the work due, when it changed."""
    settings = warehouse.settings
    manifest = warehouse.manifest.snapshot()
    plan = plan_load_hours(settings, now=now, manifest=manifest, snapshot=snapshot,
                           lock_released=abandoned_lock_check(instance, settings.max_lock_age_hours))

    def skip(reason: str) -> SensorResult:
        hours_due = bool(plan.hours.due or plan.hours.deferred or plan.hours.waiting)
        return SensorResult(skip_reason=SkipReason(reason), asset_events=changed_due_observation(
            instance, settings, now, hours_due=hours_due,
            plan_due=lambda: due_plan(settings, now, manifest=manifest, snapshot=snapshot, due=plan)))

    if plan.next_run() is None:
        why = "nothing to run" if plan.blocked or plan.hours.waiting else "no new data in a closed load hour"
        return skip(f"{why}: {plan.describe()}")
    start, end, app_ids = plan.next_run()
    first, last = hour_keys(start, end)
    # The range, the data it holds and the manifest: the same request twice is dropped.
    fingerprints = "".join(snapshot.fingerprints.get(hour, "") for hour in hours_between(start, end))
    data = hashlib.sha1(fingerprints.encode()).hexdigest()[:12]
    apps = "" if app_ids is None else f" apps-{','.join(app_ids)}"
    launch = f"hourly {first}...{last}{apps} data-{data} manifest-v{manifest.version()}"
    earlier = earlier_runs(instance, launch)
    if any(run.status not in ENDED_UNSUCCESSFULLY for run in earlier):
        return skip(f"load hours {first} .. {last} were already launched with this data and manifest "
                    f"(run key {launch!r}); waiting for new data or a manifest change")
    # Every earlier run failed before its claim (a claim changes the manifest, so the launch):
    # launched again under a new run key, which Dagster does not drop, once the wait is over.
    again_at = relaunch_at([requested_at(run) for run in earlier], LOAD_SETTINGS.sensor_interval_seconds)
    if again_at is not None and now < again_at:
        return skip(f"load hours {first} .. {last} failed {len(earlier)} time(s) before claiming anything with "
                    f"this data and manifest (last run {earlier[0].run_id}); launched again from "
                    f"{again_at:%Y-%m-%d %H:%M:%S}")
    run_key = launch if not earlier else f"{launch} attempt-{len(earlier) + 1}"
    # The run carries out the first range of a plan: its id on the run names every hour and day
    # due with why, and the estimate. The tick only shows it (on the `plans` observation, which
    # the daemon stores before it launches the run): a preview of the tick writes nothing, and
    # the run records the plan when it starts.
    shown = due_plan(settings, now, manifest=manifest, snapshot=snapshot, due=plan)
    return SensorResult(run_requests=[RunRequest(run_key=run_key, tags={
        RANGE_START_TAG: first, RANGE_END_TAG: last, RUN_STATE_TAG: plan.state.name,
        RUN_LIMITS_TAG: plan.limits(start, end).describe(),
        REASON_TAG: plan.reason() if app_ids is None else f"catching up: {plan.catch_up.runs[0].describe()}",
        SOURCE_VERSION_TAG: str(snapshot.version), APPLIED_PLAN_TAG: shown.plan_id, **catch_up_tags(app_ids),
        LAUNCH_TAG: launch, REQUESTED_AT_TAG: now.isoformat(),
    })], asset_events=[due_observation(settings, shown, now)])


def earlier_runs(instance, launch: str) -> list[DagsterRun]:
    """The runs of a launch, newest first: tagged with it, or (launched before the tag) keyed by it."""
    runs = {run.run_id: run for tags in ({LAUNCH_TAG: launch}, {RUN_KEY_TAG: launch})
            for run in instance.get_runs(filters=RunsFilter(tags=tags), limit=100)}
    return sorted(runs.values(), key=lambda run: requested_at(run) or datetime.min.replace(tzinfo=timezone.utc),
                  reverse=True)


def requested_at(run: DagsterRun) -> datetime | None:
    """When the sensor requested the run (None: before runs carried the time)."""
    at = run.tags.get(REQUESTED_AT_TAG)
    return datetime.fromisoformat(at) if at else None


def relaunch_at(failed: list[datetime | None], interval_seconds: int) -> datetime | None:
    """When a launch whose runs all failed before their claim (`failed`: when each was requested)
    may go again: a sensor interval after the last request, doubled with each failure, at most
    RELAUNCH_WAIT_MAX; None: at once (never failed, or requested before runs carried the time)."""
    times = [at for at in failed if at is not None]
    if not times:
        return None
    wait = min(timedelta(seconds=interval_seconds) * 2 ** (len(failed) - 1), RELAUNCH_WAIT_MAX)
    return max(times) + wait


@sensor(
    job=hourly_job,
    minimum_interval_seconds=LOAD_SETTINGS.sensor_interval_seconds,
    default_status=SENSOR_STATUS,
    description="Reads the source's metadata (no Spark) and launches one ranged run of hourly_job for "
                "the oldest load hours whose data differs from what they were processed from.",
)
def hourly_load_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource) -> SensorResult:
    keep_long_lived_out_of_collections()  # the code server's modules, from its first tick on
    return hourly_run_request(warehouse, now=utc_now(), instance=context.instance)
