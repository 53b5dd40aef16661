"""Running the code location's jobs in this process: what the CLI, the demo, the benchmark and
the tests call. It sits above `definitions` (the composition root); nothing below imports it.

- `execute_job(name, ...)`: one job, optionally over a partition range, with one line per
  failed step on the console (the full event log goes to the Dagster instance, the UI);
- `run_until(ts)`: what the daemon would do at time `ts`: the load hours `progress` plans
  (the rule the hourly sensor uses), then the late days, then attributes;
- `backfill(start, end)`: every asset over the loads of [start, end], then the days they touch;
- `apply_plan(id)`: a recorded plan, as shown (`apply_erasure`: an erasure's, at once for `forget`).

With `submit=True` the hourly runs are submitted to the instance instead (`submit_job`): its
queue, pools and run launcher decide where and when they run, as for the UI's and the
sensors' runs, and the sensors then rebuild the days those runs touch and attributes.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Collection, Iterable

from dagster import AssetKey
from dagster._cli.job import execute_launch_command
from dagster._cli.workspace.cli_target import WorkspaceOpts
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.api import execute_run
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from incremental_assets.definitions import defs
from incremental_assets.names import (
    APPLIED_PLAN_TAG,
    AS_OF_TAG,
    ATTRIBUTES_JOB,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    DAILY_JOB,
    HOURLY_JOB,
    MAX_RUNTIME_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    REASON_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
    USER_TAG,
    WORKER_TAG,
)
from incremental_assets.operator.apply import erased_ids, plan_to_apply
from incremental_assets.operator.forget import complete_erasure, request_erasure
from incremental_assets.operator.plans import recorded_plan
from incremental_assets.partition_bounds import last_event_day
from incremental_assets.planning.hours import HOUR, contiguous_ranges, day_key, hour_keys, hours_between, ranges_within
from incremental_assets.planning.late_days import LateDaysPlan, describe_waiting
from incremental_assets.planning.plans import Plan
from incremental_assets.planning.reconcile import split_ranges
from incremental_assets.planning.run_limits import RunLimits
from incremental_assets.process_memory import keep_long_lived_out_of_collections, release_jvm_references
from incremental_assets.run_events import (
    ATTRIBUTES_STEP,
    DAILY_STEP,
    HOURLY_STEP,
    UNOBSERVED,
    JobRun,
    RunObserver,
)
from incremental_assets.settings import Settings
from incremental_assets.sources.reader import require_source
from incremental_assets.state.day_ledger import (
    days_loaded_between,
    declared_attributes_changed,
    plan_late_days,
    skipped_event_days,
    users_queued,
)
from incremental_assets.state.progress import (
    backfill_hours,
    catch_up_tags,
    fail_locked_days,
    plan_next_run,
)
from resources.manifest import ManifestStore
from resources.spark import get_spark
from resources.tables import TableStore
from resources.tables.stores import table_store

Echo = Callable[[str], None]
# The code location as pyproject.toml's [tool.dagster] (and workspace.yaml) name it.
CODE_MODULE, CODE_ATTRIBUTE, CODE_LOCATION = "incremental_assets.definitions", "defs", "incremental_assets"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# run_until plans again after each batch of backfill_limit_days: at most this many batches.
MAX_PLANS = 1000

# Dagster logs a failed step at ERROR with its whole stack trace; the console shows none of
# that by default: execute_job prints one line per failed step (the trace stays in the run's
# event log, in the UI). INCREMENTAL_LOG_LEVEL=WARNING shows Dagster's console log again.
CONSOLE_LOG_LEVEL = os.environ.get("INCREMENTAL_LOG_LEVEL", "CRITICAL")

@dataclass
class RunReport:
    limits: RunLimits | None = None
    hours: tuple[datetime, datetime] | None = None
    late_days: LateDaysPlan | None = None
    rebuilt_days: list[date] = field(default_factory=list)  # the event days daily runs were launched for
    runs: list[JobRun] = field(default_factory=list)
    refused: str | None = None  # what waits: a fail-locked or locked item, an erasure the next runs finish

    @property
    def success(self) -> bool:
        return self.refused is None and all(run.success for run in self.runs)

    def summary(self) -> str:
        """One closing line: the runs, their time, what failed or waits."""
        failed = sum(not run.success for run in self.runs)
        submitted = [run.run_id for run in self.runs if run.submitted]
        if submitted:
            line = (f"submitted: {len(submitted)} run(s) to the instance's queue ({', '.join(submitted)}); the "
                    "sensors rebuild the days they touch and attributes once they finish")
        else:
            line = (f"done: {len(self.runs)} run(s) in {sum(run.seconds for run in self.runs):.0f} s"
                    + (f", {failed} failed" if failed else ""))
        return line + (f"; waiting: {self.refused}" if self.refused else "")


def range_tags(first: str, last: str) -> dict[str, str]:
    """The tags that make a run cover the partitions first..last (one run for the range)."""
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}


def execute_job(job_name: str, *, instance, tags: dict[str, str] | None = None,
                partitions: tuple[str, str] | None = None, echo: Echo = print) -> JobRun:
    """Run one job of the code location in this process, over partitions first..last if given."""
    tags = {**(tags or {}), **(range_tags(*partitions) if partitions else {})}
    keep_long_lived_out_of_collections()
    started = time.monotonic()
    result = execute_with_origin(job_name, instance, tags=tags,
                                 run_config={"loggers": {"console": {"config": {"log_level": CONSOLE_LOG_LEVEL}}}})
    failures = tuple(step_failure_lines(result.all_events))
    rows = rows_written(result.all_events, ROWS_ASSET[job_name]) if job_name in ROWS_ASSET else None
    seconds = time.monotonic() - started
    if not result.success:
        echo(f"  {job_name} failed (run {result.run_id}): {'; '.join(failures) or 'see the run log'}")
    else:
        span = f" {partitions[0]} .. {partitions[1]}" if partitions else ""
        echo(f"  {job_name}{span}: ok in {seconds:.0f} s (run {result.run_id})")
    run = JobRun(job_name, result.run_id, result.success, failures, seconds, rows=rows)
    del result
    release_jvm_references()
    return run


def submit_job(job_name: str, *, instance, tags: dict[str, str] | None = None,
               partitions: tuple[str, str] | None = None, echo: Echo = print) -> JobRun:
    """Submit one run of the code location's job to the instance, as the UI's Launch does: the
    run coordinator queues it, the daemon starts it when the queue and the pools allow, and the
    run launcher puts it in a process of its own (with the production instance, where the
    deployment runs them). Returns at once."""
    tags = {**(tags or {}), **(range_tags(*partitions) if partitions else {})}
    run = execute_launch_command(instance=instance, job_name=job_name, tags=json.dumps(tags),
                                 workspace_opts=WorkspaceOpts(workspace=[str(PROJECT_ROOT / "workspace.yaml")]))
    span = f" {partitions[0]} .. {partitions[1]}" if partitions else ""
    echo(f"  {job_name}{span}: submitted (run {run.run_id}, {run.status.value})")
    return JobRun(job_name, run.run_id, True, submitted=True)


def in_process_tags() -> dict[str, str]:
    """What a run executed in this process says of it: who launched it from where (the UI's
    "Launched by"), the process run monitoring checks instead of a launcher's worker, and no
    maximum runtime: a long backfill from the command line is normal, and monitoring fails the
    run when this process is gone, never while it still writes."""
    host, program = socket.gethostname(), Path(sys.argv[0]).stem or "python"
    return {USER_TAG: f"{getpass.getuser()}@{host} ({program}, pid {os.getpid()})",
            WORKER_TAG: json.dumps({"host": host, "pid": os.getpid()}), MAX_RUNTIME_TAG: "0"}


def execute_with_origin(job_name: str, instance, *, tags: dict[str, str], run_config: dict):
    """Execute the job in this process as a run that belongs to the code location, as if the
    webserver had launched it: the UI lists it under its job and on the timeline, and can
    re-execute it (a run of `execute_in_process` has no origin, so the UI shows none of that).

    Dagster 1.13 has no public call for this: these are the internals its `dagster job launch`
    command uses (tests/integration/test_runner_origin.py checks what the UI relies on)."""
    recon_repo = ReconstructableRepository.for_module(CODE_MODULE, CODE_ATTRIBUTE, working_directory=str(PROJECT_ROOT))
    recon_job = recon_repo.get_reconstructable_job(job_name)
    job = recon_job.get_definition()
    location = ManagedGrpcPythonEnvCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name=CODE_MODULE, attribute=CODE_ATTRIBUTE,
                             working_directory=str(PROJECT_ROOT)),
        location_name=CODE_LOCATION)
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(location, defs.get_repository_def().name), job_name)
    run = instance.create_run_for_job(job_def=job, run_config=run_config,
                                      tags={**job.run_tags, **in_process_tags(), **tags},
                                      remote_job_origin=origin, job_code_origin=recon_job.get_python_origin())
    return execute_run(recon_job, run, instance, raise_on_error=False)


def failure_line(error) -> str:
    """The first line of the step's own exception: Dagster wraps it ("Error occurred while
    executing op ...:"), and that wrapper's line says nothing about what went wrong."""
    while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
        error = error.cause
    lines = error.message.strip().splitlines()
    return lines[0] if lines else (error.cls_name or "unknown error")


def step_failure_lines(events) -> list[str]:
    """One line per failed step among Dagster events: its own exception's first line."""
    return [failure_line(e.event_specific_data.error) for e in events if e.is_step_failure]


# The asset whose partitions' row counts are a run's rows: what its hours or days hold once written.
ROWS_ASSET = {HOURLY_JOB: BASE_EVENTS, DAILY_JOB: DAILY_AGGREGATES}
# A catch-up run's partition counts are its apps' rows alone, under their own name.
ROW_COUNT_KEYS = ("dagster/partition_row_count", "rows_of_these_app_ids")


def rows_written(events, asset: str) -> int | None:
    """The rows of `asset`'s partitions that a run's materializations count; None: none counted."""
    counts = [value.value for event in events
              if event.is_step_materialization and event.asset_key == AssetKey(asset)
              for key, value in event.step_materialization_data.materialization.metadata.items()
              if key in ROW_COUNT_KEYS]
    return sum(counts) if counts else None


def _record(report: RunReport, run: JobRun) -> bool:
    report.runs.append(run)
    return run.success


def _observed(report: RunReport, observer: RunObserver, step: str, units: int, run_job: Callable[..., JobRun],
              job_name: str, **kwargs) -> bool:
    """One run of `step` over `units` load hours or event days, its start and end told to `observer`."""
    observer.started(step, kwargs.get("partitions"))
    run = run_job(job_name, **kwargs)
    observer.finished(step, units, run)
    return _record(report, run)


def run_days_and_attributes(days: Iterable[date], *, instance, report: RunReport, tags: dict[str, str],
                            echo: Echo, observer: RunObserver = UNOBSERVED) -> None:
    """The event days, a run per contiguous range, then attributes. A failed range waits alone
    (its days fail-locked): the other ranges run, and attributes follow what they rebuilt."""
    days = sorted(days)
    report.rebuilt_days += days
    ranges = contiguous_ranges(days)
    observer.planned(DAILY_STEP, len(days), len(ranges))
    rebuilt = 0
    for number, (first, last) in enumerate(ranges, 1):
        echo(f"  daily_aggregates: {first} .. {last}")
        launch = {RUN_STATE_TAG: tags.get(RUN_STATE_TAG, "LATE_DAYS"),
                  RUN_LIMITS_TAG: f"incremental-assets: event days {first} .. {last}, run {number} of {len(ranges)}"}
        rebuilt += _observed(report, observer, DAILY_STEP, (last - first).days + 1, execute_job, DAILY_JOB,
                             instance=instance, tags={**tags, **launch}, echo=echo,
                             partitions=(day_key(first), day_key(last)))
    if not rebuilt:
        return
    echo("  attributes: recompute")
    run_attributes(report, observer, instance=instance, tags=attributes_tags(tags, "after the event days"), echo=echo)


def run_attributes(report: RunReport, observer: RunObserver, *, instance, tags: dict[str, str], echo: Echo) -> None:
    """One attributes run (a step of one run, whatever its users)."""
    observer.planned(ATTRIBUTES_STEP, 1, 1)
    _observed(report, observer, ATTRIBUTES_STEP, 1, execute_job, ATTRIBUTES_JOB, instance=instance, tags=tags,
              echo=echo)


def attributes_tags(tags: dict[str, str], why: str) -> dict[str, str]:
    """An attributes run's tags: the caller's, with who launched it and why in words."""
    return {**tags, RUN_STATE_TAG: tags.get(RUN_STATE_TAG, "AFTER_DAILY"), RUN_LIMITS_TAG: f"incremental-assets: "
            f"attributes {why}, as of {tags.get(AS_OF_TAG, 'today')}"}


def run_until(until: datetime, *, instance, echo: Echo = print, submit: bool = False,
              tags: dict[str, str] | None = None, only: Collection[datetime] | None = None,
              observer: RunObserver = UNOBSERVED) -> RunReport:
    """Do in this process what the daemon would do at time `until`: every due load hour (oldest
    first, `backfill_limit_days` at a time), then the event days the ledger calls for, then
    attributes as of `until`'s day. With `submit`, the hourly runs of the first plan are
    submitted to the instance instead, as the hourly sensor's would be (the next plan depends
    on their outcome: the sensor makes it after they finish). `tags` go on every run. With
    `only` (an applied plan's hours), no other load hour runs, and each of them once: rows a
    loader commits meanwhile in other hours wait for the next plan."""
    settings = Settings.load()
    require_source(settings.source)
    tags = {**(tags or {}), AS_OF_TAG: until.astimezone(timezone.utc).date().isoformat()}
    report = RunReport()
    ran: set[datetime] = set()
    caught_up: set[tuple[datetime, tuple[str, ...]]] = set()
    for _ in range(MAX_PLANS):
        plan = plan_next_run(settings, until, ManifestStore.of(settings).snapshot(), instance)
        if plan.blocked:
            report.refused = plan.blocked[min(plan.blocked)]
        elif plan.catch_up.blocked:
            report.refused = (f"the catch-up of {len(plan.catch_up.blocked)} load hour(s) is fail-locked, for its app "
                              f"ids alone: resolve {plan.catch_up.blocked[min(plan.catch_up.blocked)]}")
        # Hours due for every app first; once none is left, the apps' catch-up runs (each once).
        catch_up = [run for run in plan.catch_up.runs if (run.start, run.app_ids) not in caught_up]
        if ran and not plan.hours.deferred and not set(plan.hours.due) - ran and not catch_up:
            break  # what is left (look-back hours) ran already
        if not plan.ranges and not catch_up:
            if not report.runs:
                echo(f"  nothing to do: {plan.describe()}" if not plan.blocked else f"  {HOURLY_JOB} not run: "
                     f"{report.refused}")
            break
        runs = [(start, end, None, plan.reason()) for start, end in plan.ranges] or [
            (run.start, run.end, run.app_ids, f"catching up: {run.describe()}") for run in catch_up]
        if only is not None:
            runs = _within(runs, set(only) - ran)
            if not runs:
                break
        observer.planned(HOURLY_STEP, sum((end - start) // HOUR for start, end, _, _ in runs), len(runs))
        for start, end, app_ids, reason in runs:
            limits = plan.limits(start, end)
            report.limits, report.hours = limits, (start, end)
            echo(limits.describe())
            first, last = hour_keys(start, end)
            echo(f"  load hours {first} .. {last} ({reason})")
            run_tags = {**tags, RUN_STATE_TAG: limits.state.name, RUN_LIMITS_TAG: limits.describe(),
                        REASON_TAG: reason, **catch_up_tags(app_ids)}
            run_job = submit_job if submit else execute_job
            if not _observed(report, observer, HOURLY_STEP, (end - start) // HOUR, run_job, HOURLY_JOB,
                             instance=instance, tags=run_tags, echo=echo, partitions=(first, last)):
                return report
            if app_ids is not None:
                caught_up.add((start, app_ids))
        if submit:
            return report
        # Plan again while hours are deferred, or when a run made other hours due (a copy gone
        # from the source revives later copies): each round runs hours not run yet, so it ends.
        ran.update(plan.hours.hours if only is None else (h for run in runs for h in hours_between(*run[:2])))
    if report.refused and report.runs:
        echo(f"  {HOURLY_JOB} not run for some hours: {report.refused}")
    late_days_and_attributes(settings, instance=instance, report=report, tags=tags, echo=echo, now=until,
                             observer=observer)
    return report


def _within(runs: list[tuple], allowed: set[datetime]) -> list[tuple]:
    """`runs` (start, end, app ids, reason) cut to the stretches of their hours in `allowed`."""
    return [(first, end, app_ids, reason) for start, stop, app_ids, reason in runs
            for first, end in ranges_within(start, stop, allowed)]


def late_days_and_attributes(settings: Settings, *, instance, report: RunReport, tags: dict[str, str],
                             echo: Echo, now: datetime, also: Iterable[date] = (),
                             observer: RunObserver = UNOBSERVED) -> None:
    """The event days the daily ledger calls for at `now` (and `also`), rebuilt; then attributes
    (also when no day is rebuilt but users are still queued for it, or the declared attributes
    changed). A day whose daily partition does not exist at `now` waits."""
    late = plan_late_days(settings, now)
    report.late_days = late
    if late.skipped:
        echo("  late rows pending (below min_rows_to_process): "
             + ", ".join(f"{d}: {n}" for d, n in sorted(late.skipped.items())))
    if late.waiting:
        echo(f"  daily_aggregates not run yet: {describe_waiting(late.waiting)}")
    days = set(late.days) | set(also)
    skipped = days & skipped_event_days(settings) if also else set()  # the plan leaves them out already
    if skipped:
        echo(f"  daily_aggregates not run for {len(skipped)} event day(s) an operator skipped: "
             + ", ".join(str(d) for d in sorted(skipped)))
        days -= skipped
    blocked = fail_locked_days(settings, days)
    if blocked:
        echo(f"  daily_aggregates not run for {len(blocked)} fail-locked event day(s): resolve "
             + ", ".join(sorted(blocked.values())))
        report.refused = "; ".join(filter(None, [report.refused, f"{len(blocked)} event day(s) fail-locked"]))
        days -= set(blocked)
    if days:
        run_days_and_attributes(sorted(days), instance=instance, report=report, tags=tags, echo=echo,
                                observer=observer)
        return
    why = ("for users queued by an earlier run" if users_queued(settings)
           else "for the declared attributes, changed" if declared_attributes_changed(settings) else None)
    if why:
        echo(f"  attributes: {why}")
        run_attributes(report, observer, instance=instance, tags=attributes_tags(tags, why), echo=echo)


def backfill(start: date, end: date, *, instance, echo: Echo = print, now: datetime | None = None,
             submit: bool = False, tags: dict[str, str] | None = None,
             observer: RunObserver = UNOBSERVED) -> RunReport:
    """Rebuild loads of days [start, end] in every asset (whatever the ledger says; one hourly
    run per max_hours_per_run hours, oldest first), then the event days they touch and
    [start, end], then attributes. With `submit`, the hourly runs are submitted to the
    instance (its queue runs them oldest first, one hourly step at a time) and the days they
    touch follow from the sensors. `tags` go on every run."""
    settings = Settings.load()
    now = now or datetime.now(timezone.utc)
    first_hour, end_hour = backfill_hours(settings, start, end, now)
    report = RunReport()
    if first_hour >= end_hour:
        echo(f"  nothing to backfill between {start} and {end}")
        return report
    report.hours = (first_hour, end_hour)
    limits = (f"Backfill: processing loads between {first_hour:%Y-%m-%d %H:%M:%S} "
              f"and {end_hour:%Y-%m-%d %H:%M:%S}")
    tags = {**(tags or {}), RUN_STATE_TAG: "BACKFILL", RUN_LIMITS_TAG: limits, AS_OF_TAG: now.date().isoformat()}
    echo(limits)
    # Oldest first, at most max_hours_per_run hours a run: a run's memory follows its hours.
    chunks = split_ranges([(first_hour, end_hour)], settings.max_hours_per_run)
    run_job = submit_job if submit else execute_job
    observer.planned(HOURLY_STEP, (end_hour - first_hour) // HOUR, len(chunks))
    for number, (chunk_start, chunk_end) in enumerate(chunks, 1):
        first, last = hour_keys(chunk_start, chunk_end)
        hours = (chunk_end - chunk_start) // HOUR
        echo(f"run {number}/{len(chunks)}: load hours {first} .. {last} ({hours} h)")
        if not _observed(report, observer, HOURLY_STEP, hours, run_job, HOURLY_JOB, instance=instance, tags=tags,
                         echo=echo, partitions=(first, last)):
            return report
    if submit:
        return report
    touched = days_loaded_between(settings, first_hour, end_hour)
    requested = {start + timedelta(days=i) for i in range((end - start).days + 1)}
    # Daily partitions exist from start_date through today, or the partitions' end: nothing
    # outside them is rebuilt.
    days = {d for d in touched | requested if settings.start_date.date() <= d <= last_event_day(settings, now)}
    late_days_and_attributes(settings, instance=instance, report=report, tags=tags, echo=echo, now=now, also=days,
                             observer=observer)
    return report


def apply_plan(settings: Settings, plan_id: str, *, instance, echo: Echo = print,
               observer: RunObserver = UNOBSERVED) -> RunReport:
    """Run plan `plan_id` as it was shown (`incremental-assets plan`): its load hours alone, at
    its time, then its days and attributes, every run tagged with its id; refused
    (plans.PlanRefused) when it no longer describes what would run."""
    tables = _tables(settings) if recorded_plan(settings, plan_id).erasure else None
    plan = plan_to_apply(settings, plan_id, instance=instance, tables=tables)
    if tables is not None:
        return apply_erasure(settings, plan, tables, instance=instance, echo=echo, observer=observer)
    echo(f"applying plan {plan_id}: {len(plan.hours)} load hour(s), {len(plan.days)} event day(s)")
    observer.applying(plan_id)
    tags = {APPLIED_PLAN_TAG: plan_id}
    if plan.restated_days is None:
        return run_until(plan.until, instance=instance, echo=echo, tags=tags, only={h.hour for h in plan.hours},
                         observer=observer)
    if plan.restated_asset == DAILY_AGGREGATES:
        report = RunReport()
        tags = {**tags, RUN_STATE_TAG: "RESTATE", AS_OF_TAG: plan.until.date().isoformat()}
        run_days_and_attributes([d.day for d in plan.days], instance=instance, report=report, tags=tags, echo=echo,
                                observer=observer)
        return report
    first, last = plan.restated_days
    return backfill(first, last, instance=instance, echo=echo, now=plan.until, tags=tags, observer=observer)


def apply_erasure(settings: Settings, plan: Plan, tables: TableStore, *, instance, echo: Echo = print,
                  note: str = "", now: datetime | None = None, observer: RunObserver = UNOBSERVED) -> RunReport:
    """Run an erasure's plan (`plans.plan_erasure`): record the request (`forget.request_erasure`,
    which makes the hours holding the ids due), run what is due at the plan's time, then record
    the erasure COMPLETED once no table holds the ids. An erasure the runs leave incomplete (a
    failed run) waits for the next runs: the report's `refused` says so."""
    request = request_erasure(settings, tables, erased_ids(plan), instance=instance,
                              now=now or datetime.now(timezone.utc),
                              note="; ".join(filter(None, [f"plan {plan.plan_id}", note])))
    echo(f"erasure {request.request_id} recorded (plan {plan.plan_id})\n{request.found.describe()}")
    observer.applying(plan.plan_id)
    report = run_until(plan.until, instance=instance, echo=echo, tags={APPLIED_PLAN_TAG: plan.plan_id},
                       observer=observer)
    left = complete_erasure(settings, tables, request, now=now or datetime.now(timezone.utc))
    if left.rows_in_tables:
        report.refused = (f"erasure {request.request_id} not complete: {left.describe().splitlines()[0]}; the next "
                          "runs (the hourly sensor, or `incremental-assets run --until now`) finish it; forget the "
                          "same ids again to check and record it complete")
    else:
        echo(f"erasure {request.request_id} COMPLETED: no table holds these ids. Files of earlier table versions "
             f"keep the old rows until vacuum deletes them, {settings.vacuum_retention_hours} h after "
             "(`incremental-assets maintain`, or the daily maintenance schedule)")
    return report


def _tables(settings: Settings) -> TableStore:
    return table_store(get_spark(), settings.warehouse_root, settings.table_engine, shared=settings.warehouse_shared)
