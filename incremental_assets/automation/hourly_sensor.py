"""hourly_load_sensor: watch the source table's Delta log (no Spark) and launch one ranged run
of hourly_job when closed load hours hold data not processed yet.

Which hours run is `progress.next_load_hours`, the rule `incremental-assets run` uses too.
The truth is in the processing manifest; the cursor only remembers what was launched.
"""

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

from dagster import (
    AssetKey,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.execution.backfill import BulkActionStatus  # not exported at top level

from incremental_assets.automation.jobs import hourly_job
from incremental_assets.names import (
    HOURLY_ASSETS,
    RANGE_END_TAG,
    RANGE_START_TAG,
    REASON_TAG,
    RUN_KEY_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
    SOURCE_VERSION_TAG,
)
from incremental_assets.partitions import LOAD_SETTINGS, floor_hour, hourly_partitions
from incremental_assets.progress import LoadHoursPlan, next_load_hours
from incremental_assets.settings import parse_utc_datetime
from incremental_assets.sources.load_hours import source_fingerprints
from resources.manifest import abandoned_lock_check
from resources.warehouse import WarehouseResource

HOURLY_KEYS = frozenset(AssetKey(name) for name in HOURLY_ASSETS)
UNFINISHED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


# An ISO time the sensor takes as "now" instead of the system clock: for tests and rehearsals of
# the daemon on past data. Unset in production.
SENSOR_CLOCK_ENV = "INCREMENTAL_SENSOR_CLOCK"


def utc_now() -> datetime:
    """The sensor's clock: the system clock, or the fixed time INCREMENTAL_SENSOR_CLOCK names."""
    fixed = os.environ.get(SENSOR_CLOCK_ENV)
    return parse_utc_datetime(SENSOR_CLOCK_ENV, fixed) if fixed else datetime.now(timezone.utc)


@dataclass
class HourlyCursor:
    """What the sensor launched: the source version it last saw and, for the hours that can
    still be re-run within the grace period, the fingerprint of their files at launch."""

    source_version: int | None = None
    launched: dict[str, str] = field(default_factory=dict)  # hour key -> fingerprint ("" = no file)

    @classmethod
    def from_json(cls, text: str | None) -> "HourlyCursor":
        if not text:
            return cls()
        data = json.loads(text)
        return cls(source_version=data.get("source_version"), launched=dict(data.get("launched", {})))

    def to_json(self) -> str:
        return json.dumps({"source_version": self.source_version, "launched": self.launched},
                          sort_keys=True)


def hourly_work_in_progress(instance) -> str | None:
    """A run or asset backfill that may still write the hourly assets, described; else None."""
    for run in instance.get_runs(filters=RunsFilter(statuses=UNFINISHED), limit=50):
        if run.job_name == hourly_job.name or (run.asset_selection and run.asset_selection & HOURLY_KEYS):
            return f"run {run.run_id} ({run.job_name}, {run.status.value})"
    for backfill in instance.get_backfills(status=BulkActionStatus.REQUESTED, limit=50):
        if set(backfill.asset_selection or ()) & HOURLY_KEYS:
            return f"backfill {backfill.backfill_id}"
    return None


def _run_request(plan: LoadHoursPlan, run_key: str, source_version: int) -> RunRequest:
    first, last = plan.keys
    return RunRequest(run_key=run_key, tags={
        RANGE_START_TAG: first, RANGE_END_TAG: last,
        RUN_STATE_TAG: plan.limits.state.name, RUN_LIMITS_TAG: plan.describe(),
        SOURCE_VERSION_TAG: str(source_version), REASON_TAG: plan.reason,
    })


def hourly_run_request(warehouse: WarehouseResource, *, now: datetime, instance,
                       cursor: str | None) -> SensorResult:
    """One evaluation of hourly_load_sensor: at most one ranged run of hourly_job."""
    settings = warehouse.settings
    state = HourlyCursor.from_json(cursor)

    def skip(message: str) -> SensorResult:
        return SensorResult(skip_reason=SkipReason(message), cursor=state.to_json())

    watched = source_fingerprints(settings.source, hourly_partitions.start, floor_hour(now))
    if watched is None:
        return skip(f"no Delta table at the source path {settings.source} (INCREMENTAL_SOURCE_PATH): "
                    "nothing to watch. The sensor reads the Delta log; for a Parquet source run "
                    "`incremental-assets run --until ...` instead")
    state.source_version, fingerprints = watched
    busy = hourly_work_in_progress(instance)
    if busy:
        return skip(f"waiting for {busy} to finish")

    manifest = warehouse.manifest.snapshot()
    plan = next_load_hours(settings, now=now, manifest=manifest, source_fingerprints=fingerprints,
                           partitions_start=hourly_partitions.start, launched=state.launched,
                           lock_released=abandoned_lock_check(instance, settings.max_lock_age_hours))
    if plan.hours is None:
        if not plan.blocked:
            state.launched = dict(plan.remembered)
            return skip(f"{plan.reason}; source version {state.source_version}")
        return skip(plan.reason)

    first, last = plan.keys
    run_key = f"hourly {first}...{last} source-v{state.source_version} manifest-v{manifest.version()}"
    if instance.get_run_ids(filters=RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1):
        return skip(f"load hours {first} .. {last} were already launched with this source and manifest "
                    f"(run key {run_key!r}); waiting for new data or a manifest change")
    state.launched = dict(plan.remembered)
    return SensorResult(run_requests=[_run_request(plan, run_key, state.source_version)],
                        cursor=state.to_json())


@sensor(
    job=hourly_job,
    minimum_interval_seconds=LOAD_SETTINGS.sensor_interval_seconds,
    default_status=DefaultSensorStatus.RUNNING,
    description="Reads the source table's Delta log (no Spark) and launches one ranged run of "
                "hourly_job for the closed load hours with new data, within the run limits; an "
                "hour whose files change within the grace period is run again.",
)
def hourly_load_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource) -> SensorResult:
    return hourly_run_request(warehouse, now=utc_now(), instance=context.instance, cursor=context.cursor)
