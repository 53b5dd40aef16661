"""Running the code location's jobs in this process: what the CLI, the demo, the benchmark and
the tests call. It sits above `definitions` (the composition root); nothing below imports it.

- `execute_job(name, ...)`: one job, optionally over a partition range, with one line per
  failed step on the console (the full event log goes to the Dagster instance, the UI);
- `run_until(ts)`: what the daemon would do at time `ts`: the load hours `progress` plans
  (the rule the hourly sensor uses), then the late days, then attributes;
- `backfill(start, end)`: every asset over the loads of [start, end], then the days they touch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Callable, Iterable

from incremental_assets.definitions import defs
from incremental_assets.ledger import days_loaded_between, plan_late_days
from incremental_assets.names import (
    ATTRIBUTES_JOB,
    DAILY_JOB,
    HOURLY_JOB,
    RANGE_END_TAG,
    RANGE_START_TAG,
    REASON_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
)
from incremental_assets.partitions import contiguous_ranges, day_key, floor_hour, hour_keys, hourly_partitions
from incremental_assets.planning.late_days import LateDaysPlan
from incremental_assets.planning.run_limits import RunLimits
from incremental_assets.progress import plan_next_run
from incremental_assets.settings import Settings
from resources.manifest import ManifestStore

Echo = Callable[[str], None]

# Dagster logs a failed step at ERROR with its whole stack trace; the console shows none of
# that by default: execute_job prints one line per failed step (the trace stays in the run's
# event log, in the UI). INCREMENTAL_LOG_LEVEL=WARNING shows Dagster's console log again.
CONSOLE_LOG_LEVEL = os.environ.get("INCREMENTAL_LOG_LEVEL", "CRITICAL")


@dataclass(frozen=True)
class JobRun:
    job: str
    run_id: str
    success: bool
    failures: tuple[str, ...] = ()  # one line per failed step


@dataclass
class RunReport:
    limits: RunLimits | None = None
    hours: tuple[datetime, datetime] | None = None
    late_days: LateDaysPlan | None = None
    runs: list[JobRun] = field(default_factory=list)
    refused: str | None = None  # why nothing could run (a fail-locked or locked item)

    @property
    def success(self) -> bool:
        return self.refused is None and all(run.success for run in self.runs)


def range_tags(first: str, last: str) -> dict[str, str]:
    """The tags that make a run cover the partitions first..last (one run for the range)."""
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}


def execute_job(job_name: str, *, instance, tags: dict[str, str] | None = None,
                partitions: tuple[str, str] | None = None, echo: Echo = print) -> JobRun:
    """Run one job of the code location in this process, over partitions first..last if given."""
    job = defs.resolve_job_def(job_name)
    tags = {**(tags or {}), **(range_tags(*partitions) if partitions else {})}
    result = job.execute_in_process(instance=instance, tags=tags, raise_on_error=False,
                                    run_config={"loggers": {"console": {"config": {"log_level": CONSOLE_LOG_LEVEL}}}})
    failures = tuple(failure_line(e.event_specific_data.error) for e in result.all_events if e.is_step_failure)
    if not result.success:
        echo(f"  {job_name} failed (run {result.run_id}): {'; '.join(failures) or 'see the run log'}")
    return JobRun(job_name, result.run_id, result.success, failures)


def failure_line(error) -> str:
    """The first line of the step's own exception: Dagster wraps it ("Error occurred while
    executing op ...:"), and that wrapper's line says nothing about what went wrong."""
    while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
        error = error.cause
    lines = error.message.strip().splitlines()
    return lines[0] if lines else (error.cls_name or "unknown error")


def _record(report: RunReport, run: JobRun) -> bool:
    report.runs.append(run)
    return run.success


def run_days_and_attributes(days: Iterable[date], *, instance, report: RunReport, tags: dict[str, str],
                            echo: Echo) -> None:
    for first, last in contiguous_ranges(days):
        echo(f"  daily_aggregates: {first} .. {last}")
        if not _record(report, execute_job(DAILY_JOB, instance=instance, tags=tags, echo=echo,
                                           partitions=(day_key(first), day_key(last)))):
            return
    echo("  attributes: recompute")
    _record(report, execute_job(ATTRIBUTES_JOB, instance=instance, tags=tags, echo=echo))


def run_until(until: datetime, *, instance, echo: Echo = print) -> RunReport:
    """Do in this process what the daemon would do at time `until`."""
    settings = Settings.load()
    plan = plan_next_run(settings, until, ManifestStore.of(settings).snapshot(), instance)
    report = RunReport(limits=plan.limits)
    echo(plan.limits.describe())
    if plan.hours is None:
        if plan.blocked:
            report.refused = plan.reason
            echo(f"  {HOURLY_JOB} not run: {plan.reason}")
        else:
            echo(f"  nothing to do: {plan.reason}")
        return report
    report.hours = plan.hours
    tags = {RUN_STATE_TAG: plan.limits.state.name, RUN_LIMITS_TAG: plan.describe(), REASON_TAG: plan.reason}
    first, last = plan.keys
    echo(f"  load hours {first} .. {last}")
    if not _record(report, execute_job(HOURLY_JOB, instance=instance, tags=tags, echo=echo,
                                       partitions=(first, last))):
        return report
    late = plan_late_days(settings, *plan.hours)
    report.late_days = late
    if late.skipped:
        echo("  late rows pending (below min_rows_to_process): "
             + ", ".join(f"{d}: {n}" for d, n in sorted(late.skipped.items())))
    if late.days:
        run_days_and_attributes(late.days, instance=instance, report=report, tags=tags, echo=echo)
    return report


def backfill(start: date, end: date, *, instance, echo: Echo = print, now: datetime | None = None) -> RunReport:
    """Rebuild loads of days [start, end] in every asset, then every event day they touch."""
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
    limits = (f"Backfill: processing loads between {first_hour:%Y-%m-%d %H:%M:%S} "
              f"and {end_hour:%Y-%m-%d %H:%M:%S}")
    tags = {RUN_STATE_TAG: "BACKFILL", RUN_LIMITS_TAG: limits}
    echo(limits)
    if not _record(report, execute_job(HOURLY_JOB, instance=instance, tags=tags, echo=echo,
                                       partitions=hour_keys(first_hour, end_hour))):
        return report
    touched = days_loaded_between(settings, first_hour, end_hour)
    requested = {start + timedelta(days=i) for i in range((end - start).days + 1)}
    # Daily partitions exist from start_date through today: nothing outside them is rebuilt.
    days = {d for d in touched | requested if settings.start_date.date() <= d <= now.date()}
    run_days_and_attributes(sorted(days), instance=instance, report=report, tags=tags, echo=echo)
    return report
