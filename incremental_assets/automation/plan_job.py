"""plan_job: `incremental-assets plan` in the UI, and the plans as the UI shows them.

Every plan the job or the hourly sensor records is also observed on the `plans` asset: its page
lists them, newest first, each with its id, trigger, hours, days, rows, estimate and its text
as `plan` prints it. Applying stays with the sensor (what is due) and the CLI (`apply ID`).
"""

import json
from datetime import date, datetime, timezone

from dagster import AssetObservation, Config, Failure, MetadataValue, OpExecutionContext, job, op

from incremental_assets.names import PLAN_JOB, PLANS
from incremental_assets.operator.operations import describe_limits
from incremental_assets.operator.plans import PLAN_JSON, as_json, describe, make_plan, record_plan
from incremental_assets.planning.plans import Plan
from incremental_assets.settings import parse_utc_datetime
from resources.warehouse import WarehouseResource


def plan_observation(plan: Plan, *, limits: str | None = None, extra: dict | None = None) -> AssetObservation:
    """The plan as an observation of the `plans` asset (a figure the plan lacks is left out), with
    the plan itself (`plan_json`): a run that applies a plan the sensor only showed records it
    from there (`plans.record_observed_plan`). `limits`: what `incremental-assets limits` prints
    at the plan's time, shown beside it."""
    figures = {"plan_id": plan.plan_id, "trigger": plan.trigger, "until": plan.until.isoformat(),
               "source_version": plan.source_version, "load_hours": len(plan.hours), "event_days": len(plan.days),
               "runs": plan.runs, "source_rows": plan.rows,
               "estimate_seconds": None if plan.estimate_seconds is None else round(plan.estimate_seconds, 1)}
    return AssetObservation(PLANS, metadata={
        **{name: value for name, value in figures.items() if value is not None},
        "plan": MetadataValue.md(f"```\n{describe(plan, full=True)}\n```"),
        **({"limits": MetadataValue.md(f"```\n{limits}\n```")} if limits is not None else {}), **(extra or {}),
        PLAN_JSON: MetadataValue.json(json.loads(as_json(plan)))})


class PlanConfig(Config):
    until: str = ""  # plan what is due at this ISO time (empty: now)
    restate_first: str = ""  # with restate_last: plan a rebuild of the load days FIRST..LAST
    restate_last: str = ""
    restate_asset: str = ""  # with the days: daily_aggregates restates those event days alone


def _restated(config: PlanConfig) -> tuple[date, date] | None:
    if not config.restate_first and not config.restate_last:
        return None
    days = []
    for name in ("restate_first", "restate_last"):
        value = getattr(config, name)
        try:
            days.append(date.fromisoformat(value))
        except ValueError:
            raise Failure(description=f"{name}={value!r} is not a date (YYYY-MM-DD); give both restate_first "
                                      "and restate_last, or neither") from None
    return days[0], days[1]


@op(description="Make the plan of what is due (or of a restatement of load days restate_first..restate_last): "
                "the hours, rows, days and cost it will recompute, under an id; recorded and observed on the "
                "`plans` asset, like `incremental-assets plan`.")
def plan_op(context: OpExecutionContext, config: PlanConfig, warehouse: WarehouseResource) -> None:
    try:
        now = parse_utc_datetime("until", config.until) if config.until else datetime.now(timezone.utc)
        plan = make_plan(warehouse.settings, now, restate=_restated(config), asset=config.restate_asset or None,
                         instance=context.instance)
    except ValueError as exc:
        raise Failure(description=str(exc)) from None
    record_plan(warehouse.settings, plan, datetime.now(timezone.utc))
    context.log.info(describe(plan))
    context.log_event(plan_observation(plan, limits=describe_limits(warehouse.settings, now)))


@job(name=PLAN_JOB, description="What the next runs (or a restatement) will recompute, with rows, days and cost, "
                                "under an id: config {until: ISO time, restate_first: day, restate_last: day, "
                                "restate_asset: daily_aggregates}, all optional. The plan shows on the `plans` asset.")
def plan_job():
    plan_op()
