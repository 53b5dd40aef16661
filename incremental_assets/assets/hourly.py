"""The load-hour assets: base_events, sessions_lifecycle_manifest, quarantined_sessions and
filtered_events, materialized together by one step (`steps.hourly`) for a range of closed load
hours: one claim and one close for all four, one source read. This module hands what the step
wrote for each asset to Dagster, then the step's check results, each naming its hour's
materialization (a refused step's results alone, with nothing written).
"""

from datetime import datetime

from dagster import AssetExecutionContext, AssetKey, AssetOut, MetadataValue, Output, multi_asset

from incremental_assets.assets.common import (
    CODE_VERSION,
    HOURLY_FRESHNESS,
    OWNERS,
    on_last_partition,
    preview_metadata,
    run_state_metadata,
    schema_metadata,
    settings_metadata,
    table_metadata,
)
from incremental_assets.checks import evaluation_events, run_materializations
from incremental_assets.names import (
    APP_IDS_TAG,
    APPLIED_PLAN_TAG,
    BASE_EVENTS,
    FILTERED_EVENTS,
    HOURLY_ASSETS,
    HOURLY_POOL,
    LIFECYCLE,
    QUARANTINED,
    RUN_LIMITS_TAG,
    SOURCE_EVENTS,
)
from incremental_assets.operator.plans import record_observed_plan
from incremental_assets.partitions import hourly_partitions, hours_per_run
from incremental_assets.planning.app_units import split
from incremental_assets.planning.hours import hour_key, hours_between
from incremental_assets.steps.event_id_check import (
    CHECKED_TABLES,
    EVENT_ID_CHECK_SPECS,
    DuplicateEventIdsError,
    outcomes_by_check,
)
from incremental_assets.steps.hourly import HourlyOutcome, run_hourly_step
from incremental_assets.steps.hourly_compute import HourFigures
from resources.manifest_io_manager import StepOutput
from resources.warehouse import WarehouseResource

GROUP = "load_hours"


def _out(table: str, description: str) -> AssetOut:
    return AssetOut(io_manager_key="manifest_io", group_name=GROUP, kinds={"spark", "delta"}, owners=OWNERS,
                    code_version=CODE_VERSION, description=description, freshness_policy=HOURLY_FRESHNESS,
                    metadata={"table": table, **table_metadata(table)})


@multi_asset(
    name="hourly_assets",
    outs={
        BASE_EVENTS: _out(BASE_EVENTS, "Validated events, one copy of each (the first loaded within "
                          "dedupe_lookback_days), by load hour. Invalid and late-sent rows go to `rejected_events` "
                          "with a reason."),
        LIFECYCLE: _out(LIFECYCLE, "One row per session (start/end in event time, event count, user, first and "
                        "last load), recomputed from all events of every session touched in the hour."),
        QUARANTINED: _out(QUARANTINED, "Sessions longer than max_session_days: their events past start + "
                          "max_session_days are left out of filtered_events."),
        FILTERED_EVENTS: _out(FILTERED_EVENTS, "Relevant events with session fields and event_date: the input of "
                              "the daily layer."),
    },
    deps=[SOURCE_EVENTS],
    internal_asset_deps={
        BASE_EVENTS: {AssetKey(SOURCE_EVENTS)},
        LIFECYCLE: {AssetKey(BASE_EVENTS)},
        QUARANTINED: {AssetKey(LIFECYCLE)},
        FILTERED_EVENTS: {AssetKey(BASE_EVENTS), AssetKey(LIFECYCLE), AssetKey(QUARANTINED)},
    },
    partitions_def=hourly_partitions,
    backfill_policy=hours_per_run,
    can_subset=False,
    pool=HOURLY_POOL,
    check_specs=EVENT_ID_CHECK_SPECS,
)
def hourly_assets(context: AssetExecutionContext, warehouse: WarehouseResource):
    _record_applied_plan(context, warehouse)
    # A catch-up run (its tag names the app ids) replaces those apps' rows of the window alone,
    # and claims the items of that unit: its failure holds back those apps alone.
    app_ids = split(context.run.tags.get(APP_IDS_TAG))
    app_ids = tuple(sorted(app_ids)) if app_ids is not None else None
    hours = hours_between(context.partition_time_window.start, context.partition_time_window.end)
    try:
        done = run_hourly_step(context, warehouse, app_ids, context.run.tags.get(RUN_LIMITS_TAG, "manual run"))
    except DuplicateEventIdsError as refused:
        # Nothing materialized: the failed evaluations show on their hours, linked to nothing.
        yield from evaluation_events(context, outcomes_by_check(refused.counts, hours))
        raise
    _add_hour_metadata(context, done.figures, app_ids)
    yield from _outputs(context, warehouse, done)
    # After the outputs, whose materializations are logged by now: each hour's evaluation names
    # its hour's, which the UI needs to show the check's partition as passed.
    materialized = run_materializations(context, [AssetKey(table) for table in CHECKED_TABLES])
    yield from evaluation_events(context, outcomes_by_check(done.copies, hours), materialized)


def _record_applied_plan(context: AssetExecutionContext, warehouse: WarehouseResource) -> None:
    """The plan the run's tags name, recorded from the hourly sensor's observation if the sensor
    only showed it: the tick writes nothing, so a preview of it changes nothing."""
    plan_id = context.run.tags.get(APPLIED_PLAN_TAG)
    if plan_id and record_observed_plan(warehouse.settings, context.instance, plan_id) is not None:
        context.log.info(f"plan {plan_id} recorded: this run applies its first range")


def _outputs(context: AssetExecutionContext, warehouse: WarehouseResource, done: HourlyOutcome):
    """One output per asset: what the step wrote for it, and the run's metadata (the step's own
    figures, sessions changed and copies dominated, are the run's, not an hour's)."""
    results = done.results
    state, settings = run_state_metadata(context, warehouse.settings), settings_metadata(warehouse.settings)
    on_last_partition(context, {**settings, **schema_metadata(results.kept)}, BASE_EVENTS)
    on_last_partition(context, {**settings, **results.facts, **schema_metadata(results.lifecycle)}, LIFECYCLE)
    on_last_partition(context, {**settings, **preview_metadata(done.quarantined_preview, results.quarantined.schema),
                                **schema_metadata(results.quarantined)}, QUARANTINED)
    on_last_partition(context, {**settings, **schema_metadata(results.filtered)}, FILTERED_EVENTS)
    for asset in HOURLY_ASSETS:
        yield Output(StepOutput(asset, done.written[asset], metadata=state, last=asset == HOURLY_ASSETS[-1]),
                     output_name=asset)


def _add_hour_metadata(context: AssetExecutionContext, figures: dict[datetime, HourFigures],
                       app_ids: tuple[str, ...] | None) -> None:
    """Each load hour's own numbers on its partition (the run's totals are on every partition
    under other names), and one summary line in the run's log. A catch-up run's figures are its
    apps' rows alone: they are named so, not as the partition's row count."""
    by_key = {hour_key(hour): figure for hour, figure in figures.items()}
    rows_key = "dagster/partition_row_count" if app_ids is None else "rows_of_these_app_ids"
    scope = {} if app_ids is None else {"catch_up_app_ids": MetadataValue.text(",".join(app_ids))}
    for key in context.partition_keys:
        figure = by_key.get(key, HourFigures())
        context.add_asset_metadata({
            rows_key: MetadataValue.int(figure.kept), **scope,
            "rejected_rows": MetadataValue.int(sum(figure.rejected.values())),
            "rejected_by_reason": MetadataValue.json(dict(sorted(figure.rejected.items()))),
        }, asset_key=BASE_EVENTS, partition_key=key)
        context.add_asset_metadata({
            rows_key: MetadataValue.int(sum(figure.filtered.values())), **scope,
            "rows_by_event_day": MetadataValue.json({str(day): n for day, n in sorted(figure.filtered.items())}),
        }, asset_key=FILTERED_EVENTS, partition_key=key)
    totals = list(figures.values())
    context.log.info(
        f"load hours {context.partition_keys[0]} .. {context.partition_keys[-1]}: "
        f"{sum(f.kept for f in totals)} events kept, {sum(sum(f.rejected.values()) for f in totals)} rejected, "
        f"{sum(sum(f.filtered.values()) for f in totals)} filtered rows of these hours")


HOURLY_ASSET_DEFS = [hourly_assets]
