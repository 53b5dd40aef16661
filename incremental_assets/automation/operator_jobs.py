"""apply_job and forget_job: `incremental-assets apply ID` and `forget` in the UI, launched with a
config as plan_job is; apply_plan_sensor launches the runs they apply.

An op cannot run other jobs in its own process safely (a run inside a run, with the step's
resources and the instance's run coordinator bypassed), and submitting runs from an op needs
Dagster's internal workspace machinery. So the job does what must happen once and at once: it
checks the plan still describes what would run (the CLI's `plans.plan_to_apply`, refused with
why), records an erasure's request (`forget.request_erasure`, which makes the hours holding the
ids due), and tags its own run with the plan id. apply_plan_sensor, a run-status sensor, then
requests the plan's runs (`planning.plans.runs_to_launch`) when that run succeeds: Dagster
launches them as any sensor's runs, through the instance's queue, pools and run launcher, each
tagged with the plan id; the days after the load hours and attributes follow from the sensors
that watch the ledgers and the daily runs, as after `backfill --submit`.
"""

from datetime import datetime, timezone
from enum import Enum

from dagster import (
    Config,
    DagsterRunStatus,
    Failure,
    OpExecutionContext,
    RunRequest,
    RunStatusSensorContext,
    SkipReason,
    job,
    op,
    run_status_sensor,
)

from incremental_assets.automation.jobs import attributes_job, daily_job, hourly_job
from incremental_assets.automation.plan_job import plan_observation
from incremental_assets.automation.status import SENSOR_STATUS
from incremental_assets.names import (
    APPLIED_PLAN_TAG,
    APPLY_JOB,
    FORGET_JOB,
    PLAN_RUNS_TAG,
    PLAN_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RUN_LIMITS_TAG,
    RUN_STATE_TAG,
)
from incremental_assets.operator.apply import erased_ids, plan_erasure, plan_to_apply
from incremental_assets.operator.forget import complete_erasure, erased, find, request_erasure
from incremental_assets.operator.plans import PlanRefused, describe, record_plan, recorded_plan
from incremental_assets.planning.plans import Plan, runs_to_launch
from incremental_assets.settings import parse_utc_datetime
from incremental_assets.sources.reader import SourceError, require_source
from resources.warehouse import WarehouseResource

APPLY_SENSOR = "apply_plan_sensor"


def _applied(context: OpExecutionContext, warehouse: WarehouseResource, plan: Plan, note: str) -> None:
    """Start applying `plan`: an erasure's request recorded (complete at once when no table holds
    the ids), and this run tagged with the plan id, for apply_plan_sensor to launch its runs."""
    if plan.erasure is not None:
        request = request_erasure(warehouse.settings, warehouse.tables, erased_ids(plan), instance=context.instance,
                                  now=datetime.now(timezone.utc),
                                  note="; ".join(filter(None, [f"plan {plan.plan_id}", note])))
        left = complete_erasure(warehouse.settings, warehouse.tables, request, now=datetime.now(timezone.utc))
        context.log.info(f"erasure {request.request_id} recorded: {request.found.describe()}\n" + (
            "COMPLETED: no table holds these ids" if not left.rows_in_tables else
            f"{left.describe().splitlines()[0]}; the plan's runs remove them: run forget_job again with the same "
            "ids once they end, to check and record the erasure complete"))
    context.instance.add_run_tags(context.run_id, {APPLIED_PLAN_TAG: plan.plan_id})
    runs = runs_to_launch(plan, warehouse.settings.max_hours_per_run)
    context.log.info(f"plan {plan.plan_id}: {APPLY_SENSOR} launches its {len(runs)} run(s) once this run succeeds "
                     "(turn the sensor on if it is stopped)" if runs else f"plan {plan.plan_id}: nothing to run")


class ApplyConfig(Config):
    plan_id: str  # an id `plan`, plan_job or forget_job (dry_run) recorded


@op(description="Check that a recorded plan still describes what would run (refused, saying why, when the source, "
                "the settings or the work moved) and start it: its runs are launched by apply_plan_sensor, each "
                "tagged with the plan id, like `incremental-assets apply ID`.")
def apply_op(context: OpExecutionContext, config: ApplyConfig, warehouse: WarehouseResource) -> None:
    settings = warehouse.settings
    try:
        erasure = recorded_plan(settings, config.plan_id.strip()).erasure is not None
        plan = plan_to_apply(settings, config.plan_id.strip(), instance=context.instance,
                             tables=warehouse.tables if erasure else None)
    except (ValueError, PlanRefused) as exc:
        raise Failure(description=f"plan_id={config.plan_id!r}: {exc}") from None
    context.log.info(describe(plan, apply_hint=False))
    context.log_event(plan_observation(plan))
    _applied(context, warehouse, plan, note="")


@job(name=APPLY_JOB, description="Apply a recorded plan, as shown, like `incremental-assets apply ID`: config "
                                 "{plan_id: ID}. Its runs are launched by apply_plan_sensor, tagged with the plan id.")
def apply_job():
    apply_op()


class IdColumn(Enum):
    domain_userid = "domain_userid"
    user_id = "user_id"


class ForgetConfig(Config):
    ids: list[str]  # the users' ids, all of the column `column`
    column: IdColumn = IdColumn.domain_userid
    dry_run: bool = True  # only plan it (rows per table, hours and days run again, cost); apply_job applies the plan
    note: str = ""  # why (kept in erasure_requests), e.g. a ticket number
    until: str = ""  # run what is due up to this ISO time (empty: now)


def _erased_ids(config: ForgetConfig):
    if not config.ids:
        raise Failure(description="ids=[]: name at least one user's id")
    for number, value in enumerate(config.ids):
        if not value.strip():
            raise Failure(description=f"ids[{number}]={value!r}: each id must be non-empty")
    return erased([(config.column.value, value) for value in config.ids])


@op(description="Erase users from every table, like `incremental-assets forget`: plans the erasure (rows per table, "
                "the processed hours and event days run again without them, the cost) under an id; unless dry_run, "
                "records the request and starts the plan (its runs launched by apply_plan_sensor).")
def forget_op(context: OpExecutionContext, config: ForgetConfig, warehouse: WarehouseResource) -> None:
    ids, settings = _erased_ids(config), warehouse.settings
    try:
        until = parse_utc_datetime("until", config.until) if config.until else datetime.now(timezone.utc)
        require_source(settings.source)
    except (ValueError, SourceError) as exc:
        raise Failure(description=str(exc)) from None
    found = find(settings, warehouse.tables, ids)
    plan = plan_erasure(settings, until, warehouse.tables, ids, instance=context.instance, found=found)
    record_plan(settings, plan, datetime.now(timezone.utc))
    context.log.info(describe(plan, apply_hint=config.dry_run) + (
        f"\n{found.describe().splitlines()[-1]}" if found.linked_domain_userids else ""))
    context.log_event(plan_observation(plan))
    if not config.dry_run:
        _applied(context, warehouse, plan, note=config.note)


@job(name=FORGET_JOB, description="Erase users, like `incremental-assets forget`: config {ids: [ID, ...], column: "
                                  "domain_userid|user_id, dry_run: true (the default: only plan it; apply_job "
                                  "applies the plan), note: 'why', until: ISO time}.")
def forget_job():
    forget_op()


def plan_run_requests(run, warehouse: WarehouseResource) -> list[RunRequest] | SkipReason:
    """The runs of the plan an apply_job or forget_job run started (its plan id tag), each
    tagged with the plan id and keyed by that run, so each is requested once."""
    plan_id = run.tags.get(APPLIED_PLAN_TAG)
    if plan_id is None:
        return SkipReason(f"run {run.run_id} applied no plan (a dry run, or nothing to apply)")
    runs = runs_to_launch(recorded_plan(warehouse.settings, plan_id), warehouse.settings.max_hours_per_run)
    if not runs:
        return SkipReason(f"plan {plan_id} has nothing to run")
    daily = sum(r.job == daily_job.name for r in runs)
    requests = []
    for number, planned in enumerate(runs, 1):
        span = f" {planned.first} .. {planned.last}" if planned.first else ""
        tags = {APPLIED_PLAN_TAG: plan_id, RUN_STATE_TAG: "APPLY",
                RUN_LIMITS_TAG: f"{APPLY_SENSOR}: {planned.job}{span}, run {number} of {len(runs)} of plan {plan_id}",
                **({RANGE_START_TAG: planned.first, RANGE_END_TAG: planned.last} if planned.first else {}),
                # attributes_sensor follows once every daily run of the plan ended.
                **({PLAN_TAG: f"apply {plan_id}", PLAN_RUNS_TAG: str(daily)} if planned.job == daily_job.name else {})}
        requests.append(RunRequest(run_key=f"{run.run_id} {planned.job}{span}", job_name=planned.job, tags=tags))
    return requests


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, name=APPLY_SENSOR, monitored_jobs=[apply_job, forget_job],
                   request_jobs=[hourly_job, daily_job, attributes_job], default_status=SENSOR_STATUS,
                   description="Launches the runs of the plan an apply_job (or forget_job without dry_run) run "
                               "started, once that run succeeds, each tagged with the plan id.")
def apply_plan_sensor(context: RunStatusSensorContext, warehouse: WarehouseResource):
    return plan_run_requests(context.dagster_run, warehouse)
