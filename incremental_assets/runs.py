"""What an incremental run does, in order: limits, load hours, late days, attributes.

`run_until(ts)` is what the hourly sensor does at time `ts`, executed in this process:
1. the run limits (planning.run_limits) from the manifest's last successes;
2. one ranged run of the hourly assets over the closed load hours inside the limits;
3. the late-day plan (planning.late_days) over the filtered rows those hours produced,
   the pending counts recorded, and daily_aggregates rebuilt for exactly the chosen days;
4. attributes recomputed.
Reading the plan's inputs needs no Spark: small Delta tables read through delta-rs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Callable, Iterable, Sequence

import pyarrow as pa
from deltalake import DeltaTable

from incremental_assets.planning.late_days import LateDaysPlan, days_to_process
from incremental_assets.planning.processing_manifest import State
from incremental_assets.planning.run_limits import RunLimits, get_run_limits
from incremental_assets.settings import Settings
from incremental_assets.transforms.filtered_events import FILTERED_COUNTS
from resources.manifest import ManifestStore, MANIFEST_TABLE, split_item_id

HOURLY_MODELS = ("base_events", "sessions_lifecycle_manifest", "quarantined_sessions", "filtered_events")
DAILY_MANIFEST = "daily_aggregation_manifest"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
HOUR_KEY_FORMAT = "%Y-%m-%d-%H:%M"
DAY_KEY_FORMAT = "%Y-%m-%d"
# Dagster logs a failed step at ERROR with its whole stack trace; the console shows none of
# that by default: _execute prints one line per failed step (the trace stays in the run's
# event log, in the UI). INCREMENTAL_LOG_LEVEL=WARNING shows Dagster's console log again.
CONSOLE_LOG_LEVEL = os.environ.get("INCREMENTAL_LOG_LEVEL", "CRITICAL")


def floor_hour(ts: datetime) -> datetime:
    return ts.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def manifest_for(settings: Settings) -> ManifestStore:
    return ManifestStore(settings.table_path(MANIFEST_TABLE))


@dataclass(frozen=True)
class ModelProgress:
    """One line of the incremental manifest, derived from the model's PROCESSED records."""

    model: str
    first_success: datetime  # start of the earliest load window processed
    last_success: datetime  # end of the latest load window processed: every load before it is done
    last_limits: str
    last_rows_written: int


def incremental_manifest(manifest: ManifestStore, models: Sequence[str] = HOURLY_MODELS) -> dict[str, ModelProgress]:
    progress: dict[str, ModelProgress] = {}
    for record in manifest.records():
        asset, _ = split_item_id(record.item_id)
        payload = record.payload or {}
        if asset not in models or record.state is not State.PROCESSED or "load_window_end" not in payload:
            continue
        start = datetime.fromisoformat(payload["load_window_start"])
        end = datetime.fromisoformat(payload["load_window_end"])
        known = progress.get(asset)
        if known is None or end >= known.last_success:
            progress[asset] = ModelProgress(asset, min(start, known.first_success) if known else start, end,
                                            payload.get("limits", ""), int(payload.get("rows_written", 0)))
        else:
            progress[asset] = ModelProgress(asset, min(start, known.first_success), known.last_success,
                                            known.last_limits, known.last_rows_written)
    return progress


def last_success_by_model(manifest: ManifestStore, models: Sequence[str] = HOURLY_MODELS) -> dict[str, datetime]:
    """Per model, the end of the latest load window it processed: every load before it is done."""
    return {model: p.last_success for model, p in incremental_manifest(manifest, models).items()}


def current_limits(settings: Settings, now: datetime, manifest: ManifestStore | None = None) -> RunLimits:
    manifest = manifest or manifest_for(settings)
    return get_run_limits(last_success_by_model(manifest), list(HOURLY_MODELS),
                          start_date=settings.start_date, backfill_limit_days=settings.backfill_limit_days,
                          lookback_window_hours=settings.lookback_window_hours, now=now)


def hours_within(limits: RunLimits, *, partitions_start: datetime) -> tuple[datetime, datetime] | None:
    """The closed load hours a run with these limits processes, as [first hour, end)."""
    start = max(floor_hour(limits.lower_limit), floor_hour(partitions_start))
    end = floor_hour(limits.upper_limit)
    return (start, end) if start < end else None


def hour_keys(start: datetime, end: datetime) -> tuple[str, str]:
    """First and last hourly partition key of [start, end)."""
    return start.strftime(HOUR_KEY_FORMAT), (end - timedelta(hours=1)).strftime(HOUR_KEY_FORMAT)


def contiguous_ranges(days: Iterable[date]) -> list[tuple[date, date]]:
    """Sorted days grouped into inclusive (first, last) runs of consecutive days."""
    ranges: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if ranges and day == ranges[-1][1] + timedelta(days=1):
            ranges[-1] = (ranges[-1][0], day)
        else:
            ranges.append((day, day))
    return ranges


def _read_small_table(path: str, filters=None) -> pa.Table | None:
    if not DeltaTable.is_deltatable(path):
        return None
    return DeltaTable(path).to_pyarrow_table(filters=filters)


def plan_late_days(settings: Settings, load_start: datetime, load_end: datetime) -> LateDaysPlan:
    """Which event days to rebuild after filtered_events landed for loads in [load_start, load_end).

    Inputs are derived, so a rerun plans the same: new rows = the window's filtered rows per
    (event day, load day); a day's stored skipped count = its filtered rows outside the window
    that no rebuild has aggregated yet. Days not rebuilt get their pending count recorded.
    """
    counts = _read_small_table(settings.table_path(FILTERED_COUNTS))
    if counts is None or counts.num_rows == 0:
        return LateDaysPlan(days=[], skipped={})
    new_rows: dict[tuple[date, date], int] = {}
    total: dict[date, int] = {}
    new_total: dict[date, int] = {}
    for row in counts.to_pylist():
        day = row["event_date"]
        total[day] = total.get(day, 0) + row["rows"]
        if load_start <= row["load_hour_tstamp"] < load_end:
            key = (day, row["load_date"])
            new_rows[key] = new_rows.get(key, 0) + row["rows"]
            new_total[day] = new_total.get(day, 0) + row["rows"]
    aggregated = _aggregated_by_day(settings)
    skipped = {day: max(0, total[day] - new_total[day] - aggregated.get(day, 0)) for day in new_total}
    plan = days_to_process(new_rows, {d: n for d, n in skipped.items() if n}, reprocess_days=settings.reprocess_days,
                           min_rows_to_process=settings.min_rows_to_process,
                           start_date=settings.start_date.date())
    pending = {day: total[day] - aggregated.get(day, 0) for day in new_total if day not in plan.days
               and day >= settings.start_date.date()}
    record_pending(settings, pending)
    return plan


def _aggregated_by_day(settings: Settings) -> dict[date, int]:
    table = _read_small_table(settings.table_path(DAILY_MANIFEST))
    if table is None:
        return {}
    return {row["event_date"]: row["rows_aggregated"] for row in table.to_pylist()}


def record_pending(settings: Settings, pending: dict[date, int]) -> None:
    """Store each day's pending (late, not yet aggregated) row count in daily_aggregation_manifest."""
    if not pending:
        return
    source = pa.table({
        "event_date": pa.array(list(pending), pa.date32()),
        "rows_aggregated": pa.array([0] * len(pending), pa.int64()),
        "rows_pending": pa.array(list(pending.values()), pa.int64()),
        "last_rebuilt_at": pa.array([None] * len(pending), pa.timestamp("us", tz="UTC")),
        "last_rebuilt_run_id": pa.array([None] * len(pending), pa.string()),
    })
    path = settings.table_path(DAILY_MANIFEST)
    from deltalake import write_deltalake

    if not DeltaTable.is_deltatable(path):
        write_deltalake(path, source, mode="append")
        return
    (DeltaTable(path).merge(source, predicate="t.event_date = s.event_date", source_alias="s",
                            target_alias="t")
     .when_matched_update({"rows_pending": "s.rows_pending"})
     .when_not_matched_insert_all()
     .execute())


# -- executing runs in this process -----------------------------------------------------

@dataclass
class RunReport:
    limits: RunLimits | None = None
    hours: tuple[datetime, datetime] | None = None
    late_days: LateDaysPlan | None = None
    runs: list[tuple[str, str, bool]] = field(default_factory=list)  # (job, run_id, success)

    @property
    def success(self) -> bool:
        return all(ok for _, _, ok in self.runs)


def _execute(job_name: str, *, instance, tags: dict[str, str], report: RunReport,
             echo: Callable[[str], None]) -> bool:
    from incremental_assets.definitions import defs

    job = defs.resolve_job_def(job_name)
    # The full event log goes to the Dagster instance (the UI); the console gets warnings only.
    result = job.execute_in_process(instance=instance, tags=tags, raise_on_error=False,
                                    run_config={"loggers": {"console": {"config": {"log_level": CONSOLE_LOG_LEVEL}}}})
    report.runs.append((job_name, result.run_id, result.success))
    if not result.success:
        errors = [_failure_line(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
        echo(f"  {job_name} failed (run {result.run_id}): {'; '.join(errors) or 'see the run log'}")
    return result.success


def _failure_line(error) -> str:
    """The first line of the step's own exception: Dagster wraps it ("Error occurred while
    executing op ...:"), and that wrapper's line says nothing about what went wrong."""
    while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
        error = error.cause
    lines = error.message.strip().splitlines()
    return lines[0] if lines else (error.cls_name or "unknown error")


def _range_tags(first: str, last: str) -> dict[str, str]:
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}


def run_days_and_attributes(days: Iterable[date], *, instance, report: RunReport, tags: dict[str, str],
                            echo: Callable[[str], None]) -> None:
    for first, last in contiguous_ranges(days):
        echo(f"  daily_aggregates: {first} .. {last}")
        if not _execute("daily_job", instance=instance, report=report, echo=echo,
                        tags={**tags, **_range_tags(first.strftime(DAY_KEY_FORMAT), last.strftime(DAY_KEY_FORMAT))}):
            return
    echo("  attributes: recompute")
    _execute("attributes_job", instance=instance, report=report, echo=echo, tags=tags)


def run_until(until: datetime, *, instance, echo: Callable[[str], None] = print) -> RunReport:
    """Do in this process what the hourly sensor would do at time `until`."""
    from incremental_assets.partitions import hourly_partitions

    settings = Settings.load()
    limits = current_limits(settings, until)
    report = RunReport(limits=limits)
    echo(limits.describe())
    partitions_start = hourly_partitions.start
    hours = hours_within(limits, partitions_start=partitions_start)
    if hours is None:
        echo("  nothing to do: no closed load hour inside the limits")
        return report
    report.hours = hours
    tags = {"incremental/run_state": limits.state.name, "incremental/limits": limits.describe()}
    first, last = hour_keys(*hours)
    echo(f"  load hours {first} .. {last}")
    if not _execute("hourly_job", instance=instance, report=report, echo=echo,
                    tags={**tags, **_range_tags(first, last)}):
        return report
    plan = plan_late_days(settings, *hours)
    report.late_days = plan
    if plan.skipped:
        echo("  late rows pending (below min_rows_to_process): "
             + ", ".join(f"{d}: {n}" for d, n in sorted(plan.skipped.items())))
    if plan.days:
        run_days_and_attributes(plan.days, instance=instance, report=report, tags=tags, echo=echo)
    return report


def backfill(start: date, end: date, *, instance, echo: Callable[[str], None] = print,
             now: datetime | None = None) -> RunReport:
    """Rebuild loads of days [start, end] in every asset, then every event day they touch."""
    from incremental_assets.partitions import hourly_partitions

    settings = Settings.load()
    now = now or datetime.now(timezone.utc)
    first_hour = max(datetime.combine(start, datetime.min.time(), tzinfo=timezone.utc),
                     floor_hour(hourly_partitions.start))
    end_hour = min(datetime.combine(end + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc),
                   floor_hour(now))
    report = RunReport()
    if first_hour >= end_hour:
        echo(f"  nothing to backfill between {start} and {end}")
        return report
    report.hours = (first_hour, end_hour)
    tags = {"incremental/run_state": "BACKFILL",
            "incremental/limits": f"Backfill: processing loads between {first_hour:%Y-%m-%d %H:%M:%S} "
                                  f"and {end_hour:%Y-%m-%d %H:%M:%S}"}
    echo(tags["incremental/limits"])
    first, last = hour_keys(first_hour, end_hour)
    if not _execute("hourly_job", instance=instance, report=report, echo=echo,
                    tags={**tags, **_range_tags(first, last)}):
        return report
    touched = _days_loaded_between(settings, first_hour, end_hour)
    requested = {start + timedelta(days=i) for i in range((end - start).days + 1)}
    # Daily partitions exist from start_date through today: nothing outside them is rebuilt.
    days = {d for d in touched | requested if settings.start_date.date() <= d <= now.date()}
    run_days_and_attributes(sorted(days), instance=instance, report=report, tags=tags, echo=echo)
    return report


def _days_loaded_between(settings: Settings, start: datetime, end: datetime) -> set[date]:
    counts = _read_small_table(settings.table_path(FILTERED_COUNTS))
    if counts is None:
        return set()
    return {row["event_date"] for row in counts.to_pylist() if start <= row["load_hour_tstamp"] < end}
