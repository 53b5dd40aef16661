"""Sensors: what the daemon does by itself, using the same steps as `runs.run_until`.

- `hourly_load_sensor` watches the source table's Delta log (no Spark) and launches one
  ranged run of `hourly_job` when a closed load hour has data not processed yet.
- `late_days_sensor`: after a run that materialized `filtered_events` succeeds, plans the
  event days to rebuild (`runs.plan_late_days`) and requests one `daily_job` run per
  contiguous range of days.
- `attributes_sensor`: once every `daily_job` run of one plan has succeeded, requests
  `attributes_job`.

The truth is in the processing manifest; sensor cursors only remember what was launched.
"""


import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pyarrow as pa
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    RunStatusSensorContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_status_sensor,
    sensor,
)
from deltalake import DeltaTable

from incremental_assets.assets.common import RUN_LIMITS_TAG, RUN_STATE_TAG
from incremental_assets.jobs import attributes_job, daily_job, hourly_job
from incremental_assets.partitions import LOAD_SETTINGS, hourly_partitions
from incremental_assets.planning.processing_manifest import ItemStatus, Record, State
from incremental_assets.planning.watermarks import effective_cutoff, windows_to_run
from incremental_assets.runs import (
    DAY_KEY_FORMAT,
    HOUR_KEY_FORMAT,
    HOURLY_MODELS,
    RANGE_END_TAG,
    RANGE_START_TAG,
    contiguous_ranges,
    current_limits,
    floor_hour,
    hour_keys,
    hours_within,
    manifest_for,
    plan_late_days,
)
from incremental_assets.settings import Settings
from resources.manifest import ManifestStore, split_item_id
from resources.manifest_io_manager import run_finished_check

HOUR = timedelta(hours=1)
HOURLY_KEYS = frozenset(AssetKey(name) for name in HOURLY_MODELS)
FILTERED_EVENTS = AssetKey("filtered_events")
DAILY_AGGREGATES = AssetKey("daily_aggregates")
# Tags a late-days plan puts on its daily runs, so attributes can wait for all of them.
PLAN_TAG = "incremental/late_days_of_run"
PLAN_RUNS_TAG = "incremental/late_days_runs"
RUN_KEY_TAG = "dagster/run_key"
BACKFILL_TAG = "dagster/backfill"
UNFINISHED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


def utc_now() -> datetime:
    """The sensor's clock (tests replace it)."""
    return datetime.now(timezone.utc)


def _hour_key(hour: datetime) -> str:
    return hour.strftime(HOUR_KEY_FORMAT)


def _parse_hour_key(key: str) -> datetime:
    return datetime.strptime(key, HOUR_KEY_FORMAT).replace(tzinfo=timezone.utc)


# -- the source: which load hours have which files, from the Delta log only -------------

def source_hours(table: DeltaTable, since: datetime, until: datetime) -> dict[datetime, str]:
    """Each load hour in [since, until) that source files may hold rows of, with a fingerprint
    of those files (it changes when a file holding the hour is added or removed).

    A file's hours come from its min/max `load_tstamp` statistics; rows without a
    `load_tstamp` count in the hour of their `collector_tstamp` (as base_events places them).
    Without usable statistics the file's `load_date` partition stands for all its hours, and
    without either the file may hold any hour.
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return {}

    def column(name: str) -> list:
        return actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows

    files_by_hour: dict[datetime, list[str]] = {}
    for path, day, low, high, nulls, c_low, c_high in zip(
            column("path"), column("partition.load_date"), column("min.load_tstamp"),
            column("max.load_tstamp"), column("null_count.load_tstamp"),
            column("min.collector_tstamp"), column("max.collector_tstamp")):
        if day is not None and datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(days=1) <= since:
            continue  # a load day before the window: skip it without looking further
        first, last = _file_hours(day, low, high, nulls, c_low, c_high)
        hour = max(first or since, floor_hour(since))
        stop = min(last + HOUR if last else until, until)
        while hour < stop:
            files_by_hour.setdefault(hour, []).append(path)
            hour += HOUR
    return {hour: hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest()[:12]
            for hour, paths in files_by_hour.items()}


def _file_hours(day, low, high, nulls, c_low, c_high) -> tuple[datetime | None, datetime | None]:
    """First and last load hour a file may hold; None where unknown."""
    if low is not None and high is not None and nulls == 0:
        return floor_hour(low), floor_hour(high)
    if low is not None and high is not None and c_low is not None and c_high is not None:
        return floor_hour(min(low, c_low)), floor_hour(max(high, c_high))  # null load_tstamps too
    if day is not None:
        start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        return start, start + timedelta(hours=23)
    return None, None


# -- the manifest: which hours are processed, failed, locked, skipped ------------------

class ManifestSnapshot(ManifestStore):
    """The manifest read once: the limits and the hour states of one tick see the same records."""

    def __init__(self, path: str):
        super().__init__(path)
        self._all: list[Record] | None = None

    def records(self, items=None) -> list[Record]:
        if self._all is None:
            self._all = super().records()
        wanted = set(items) if items is not None else None
        return [r for r in self._all if wanted is None or r.item_id in wanted]


@dataclass
class HourStates:
    processed: set[datetime] = field(default_factory=set)  # every hourly model processed it last
    fail_locked: dict[datetime, str] = field(default_factory=dict)  # hour -> an item id
    locks: dict[datetime, Record] = field(default_factory=dict)  # hour -> an open PROCESSING record
    skipped: set[datetime] = field(default_factory=set)


def hour_states(manifest: ManifestStore) -> HourStates:
    states = HourStates()
    done: dict[datetime, int] = {}
    for item, state in manifest.states().items():
        asset, key = split_item_id(item)
        if asset not in HOURLY_MODELS:
            continue
        hour = _parse_hour_key(key)
        if state.status is ItemStatus.FAIL_LOCKED:
            states.fail_locked[hour] = item
        elif state.status is ItemStatus.LOCKED:
            states.locks[hour] = state.open_lock
        elif state.status is ItemStatus.SKIPPED:
            states.skipped.add(hour)
        elif state.last is not None and state.last.state is State.PROCESSED:
            done[hour] = done.get(hour, 0) + 1
    states.processed = {hour for hour, models in done.items() if models == len(HOURLY_MODELS)}
    return states


# -- hourly_load_sensor ------------------------------------------------------------------

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
    from dagster._core.execution.backfill import BulkActionStatus  # not exported at top level

    for backfill in instance.get_backfills(status=BulkActionStatus.REQUESTED, limit=50):
        if set(backfill.asset_selection or ()) & HOURLY_KEYS:
            return f"backfill {backfill.backfill_id}"
    return None


def hourly_run_request(settings: Settings, *, now: datetime, instance,
                       cursor: str | None) -> SensorResult:
    """One evaluation of hourly_load_sensor: at most one ranged run of hourly_job.

    An hour is due when the watermark rules (planning.watermarks) say so: it has data and no
    successful history, or it lies within the grace period of the latest processed hour. A
    due hour is launched when it was never processed, or when its files changed since it was
    launched. The run covers the run limits' hours (like `incremental-assets run`), widened
    to the due hours; hours past the limits' upper limit wait for a later run.
    """
    state = HourlyCursor.from_json(cursor)

    def skip(message: str) -> SensorResult:
        return SensorResult(skip_reason=SkipReason(message), cursor=state.to_json())

    source = settings.source
    if not DeltaTable.is_deltatable(source):
        return skip(f"no Delta table at the source path {source} (INCREMENTAL_SOURCE_PATH): nothing to "
                    "watch. The sensor reads the Delta log; for a Parquet source run "
                    "`incremental-assets run --until ...` instead")
    table = DeltaTable(source)
    state.source_version = table.version()
    busy = hourly_work_in_progress(instance)
    if busy:
        return skip(f"waiting for {busy} to finish")

    manifest = ManifestSnapshot(manifest_for(settings).path)
    limits = current_limits(settings, now, manifest)
    span = hours_within(limits, partitions_start=hourly_partitions.start)
    hours = hour_states(manifest)
    closed_end = floor_hour(now)
    last_processed_end = max(hours.processed) + HOUR if hours.processed else None
    cutoff = effective_cutoff(last_processed_end, start=limits.lower_limit, grace_period=settings.grace,
                              abstinent_period=settings.abstinent)
    # Only hours ending after the cut-off can be re-run; forget the files of older ones.
    state.launched = {k: v for k, v in state.launched.items() if _parse_hour_key(k) + HOUR > cutoff}
    earliest = max(floor_hour(min(limits.lower_limit, cutoff)), floor_hour(hourly_partitions.start))
    # An hour an operator skipped is a wall: a run over it would fail, so look only after it.
    walls = [h for h in hours.skipped if earliest <= h < closed_end]
    if walls:
        earliest = max(walls) + HOUR
        span = (max(span[0], earliest), span[1]) if span and span[1] > earliest else None
    fingerprints = source_hours(table, earliest, closed_end)

    watermarks = {h: h + HOUR for h in hours.processed}
    due = sorted({floor_hour(start) for start, _ in windows_to_run(
        [(h, h + HOUR) for h in sorted(fingerprints)], watermarks,
        grace_period=settings.grace, abstinent_period=settings.abstinent)})
    new = [h for h in due if h not in hours.processed]
    changed = []
    for h in due:
        if h in hours.processed:
            # Processed outside this sensor (CLI, UI backfill): today's files are the baseline.
            launched = state.launched.setdefault(_hour_key(h), fingerprints[h])
            if launched != fingerprints[h]:
                changed.append(h)
    if not new and not changed:
        return skip(f"no new data in a closed load hour (source version {state.source_version}; "
                    + (f"loads processed until {last_processed_end:%Y-%m-%d %H:%M})" if last_processed_end
                       else "nothing processed yet)"))

    # The run limits' hours, widened to the due hours; new hours past the upper limit wait.
    bounds = [span] if span else []
    bounds += [(h, h + HOUR) for h in changed]
    bounds += [(h, h + HOUR) for h in new if span is None or h < span[1]]
    start, end = min(b[0] for b in bounds), max(b[1] for b in bounds)
    first, last = hour_keys(start, end)

    if not settings.auto_resolve_failures:
        failed = sorted(item for h, item in hours.fail_locked.items() if start <= h < end)
        if failed:
            return skip(f"load hours {first} .. {last} have {len(failed)} fail-locked item(s), e.g. "
                        f"{failed[0]}: fix the cause, then `incremental-assets manifest resolve ITEM` "
                        "(or run manifest_admin_job)")
    lock_released = run_finished_check(instance, settings.max_lock_age_hours)
    for h, lock in sorted(hours.locks.items()):
        if start <= h < end and lock_released(lock) is None:
            return skip(f"load hour {_hour_key(h)} is locked by run {lock.run_id}; waiting for it")

    manifest_version = DeltaTable(manifest.path).version() if DeltaTable.is_deltatable(manifest.path) else -1
    run_key = f"hourly {first}...{last} source-v{state.source_version} manifest-v{manifest_version}"
    if instance.get_run_ids(filters=RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1):
        return skip(f"load hours {first} .. {last} were already launched with this source and manifest "
                    f"(run key {run_key!r}); waiting for new data or a manifest change")

    # After this run only hours ending after end + abstinent - grace can be re-run: remember
    # their files ("" = none yet), to see whether they change.
    h = start
    while h < end:
        if h + HOUR > end + settings.abstinent - settings.grace:
            state.launched[_hour_key(h)] = fingerprints.get(h, "")
        h += HOUR

    why = []
    if new:
        why.append(f"new data in {len(new)} hour(s) from {_hour_key(new[0])}")
    if changed:
        why.append("changed within the grace period: " + ", ".join(_hour_key(h) for h in changed))
    described = limits.describe() if span and (start, end) == span else \
        f"{limits.describe()}; launched for load hours {first} .. {last}"
    request = RunRequest(run_key=run_key, tags={
        RANGE_START_TAG: first, RANGE_END_TAG: last,
        RUN_STATE_TAG: limits.state.name, RUN_LIMITS_TAG: described,
        "incremental/source_version": str(state.source_version),
        "incremental/reason": "; ".join(why),
    })
    return SensorResult(run_requests=[request], cursor=state.to_json())


@sensor(
    job=hourly_job,
    minimum_interval_seconds=LOAD_SETTINGS.sensor_interval_seconds,
    default_status=DefaultSensorStatus.RUNNING,
    description="Reads the source table's Delta log (no Spark) and launches one ranged run of "
                "hourly_job for the closed load hours with new data, within the run limits; an "
                "hour whose files change within the grace period is run again.",
)
def hourly_load_sensor(context: SensorEvaluationContext) -> SensorResult:
    return hourly_run_request(Settings.load(), now=utc_now(), instance=context.instance,
                              cursor=context.cursor)


# -- late days and attributes ---------------------------------------------------------------

def filtered_load_window(instance, run_id: str) -> tuple[datetime, datetime] | None:
    """The load hours [start, end) whose filtered_events the run materialized, or None."""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    keys = [r.event_log_entry.dagster_event.partition for r in records
            if r.event_log_entry.dagster_event.asset_key == FILTERED_EVENTS]
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
    if data is None or DAILY_AGGREGATES not in data.target_subset.partitions_subsets_by_asset_key:
        return set()
    return set(data.target_subset.get_partitions_subset(DAILY_AGGREGATES).get_partition_keys())


def late_day_requests(settings: Settings, instance, run) -> list[RunRequest] | SkipReason | None:
    """The daily_job runs that follow `run`, per planning.late_days; None if it made no filtered_events."""
    window = filtered_load_window(instance, run.run_id)
    if window is None:
        return None
    plan = plan_late_days(settings, *window)
    loads = f"{window[0]:%Y-%m-%d %H:%M} .. {window[1]:%Y-%m-%d %H:%M}"
    owned = days_rebuilt_by_backfill(instance, run)
    ranges = contiguous_ranges(d for d in plan.days if d.strftime(DAY_KEY_FORMAT) not in owned)
    if not ranges:
        pending = sum(plan.skipped.values())
        return SkipReason(f"loads {loads} (run {run.run_id}): no event day to rebuild"
                          + (f" besides the {len(owned)} day(s) its backfill rebuilds" if owned else "")
                          + (f"; {pending} late row(s) pending" if pending else ""))
    carried = {k: v for k, v in run.tags.items() if k in (RUN_STATE_TAG, RUN_LIMITS_TAG)}
    requests = []
    for first_day, last_day in ranges:
        first, last = first_day.strftime(DAY_KEY_FORMAT), last_day.strftime(DAY_KEY_FORMAT)
        requests.append(RunRequest(
            job_name=daily_job.name,
            # A rerun of the same hours is another run: its days are planned again.
            run_key=f"late days {first}...{last} after run {run.run_id}",
            tags={**carried, RANGE_START_TAG: first, RANGE_END_TAG: last,
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
def late_days_sensor(context: RunStatusSensorContext):
    return late_day_requests(Settings.load(), context.instance, context.dagster_run)


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
    carried = {k: v for k, v in run.tags.items() if k in (RUN_STATE_TAG, RUN_LIMITS_TAG)}
    return RunRequest(run_key=f"attributes after late days of run {plan}", job_name=attributes_job.name,
                      tags={**carried, PLAN_TAG: plan})


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


SENSORS = [hourly_load_sensor, late_days_sensor, attributes_sensor]
