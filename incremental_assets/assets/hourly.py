"""The load-hour assets: base_events, sessions_lifecycle_manifest, quarantined_sessions and
filtered_events, materialized together by one step for a range of closed load hours.

One step: one manifest claim and one close for all four, one source read, shared materialized
DataFrames. The computation is `hourly_step`; this module hands its results to the manifest
IO manager in the asset graph's order: base_events, the sessions, filtered_events (and their
counts); once the manifest records them PROCESSED, the hours' ledger rows, the completion marker.
A crash anywhere leaves what the next run needs to redo it (see `hourly_step`).
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
from incremental_assets.checks import evaluation_events
from incremental_assets.event_id_check import (
    EVENT_ID_CHECK_SPECS,
    DuplicateEventIdsError,
    PendingWrite,
    copies_once_written,
    failures,
    outcomes_by_check,
)
from incremental_assets.hourly_step import (
    HourFigures,
    HourlyResults,
    catch_up_begun,
    compute,
    figures_by_hour,
    filtered_counts,
    hours_to_run_again,
    processed_hours,
    verdicts_of_maintenance,
)
from incremental_assets.names import (
    APP_IDS_TAG,
    APPLIED_PLAN_TAG,
    BASE_EVENTS,
    EVENT_COPIES,
    FILTERED_COUNTS,
    FILTERED_EVENTS,
    HOUR_LEDGER,
    HOURLY_ASSETS,
    HOURLY_POOL,
    HOURLY_TURN,
    LIFECYCLE,
    QUARANTINED,
    REJECTED_EVENTS,
    RUN_LIMITS_TAG,
    SESSIONS_TO_REFILTER,
    SOURCE_EVENTS,
    TABLE_PARTITIONS,
)
from incremental_assets.partitions import hourly_partitions, hours_per_run
from incremental_assets.planning.app_units import joined, split
from incremental_assets.planning.hours import hour_key, hours_between
from incremental_assets.plans import record_observed_plan
from incremental_assets.progress import recorded_hours, unit_items_fail_locked
from incremental_assets.sources.reader import require_source
from incremental_assets.start_moved import remove_rows_before_start
from resources.manifest_io_manager import TableOutput, TableWrite, claimed
from resources.materialized import release
from resources.tables import rows_collected_at_most
from resources.warehouse import WarehouseResource

GROUP = "load_hours"


def _out(description: str, **metadata) -> AssetOut:
    return AssetOut(io_manager_key="manifest_io", group_name=GROUP, kinds={"spark", "delta"}, owners=OWNERS,
                    code_version=CODE_VERSION, description=description, freshness_policy=HOURLY_FRESHNESS,
                    metadata={**metadata, **table_metadata(metadata["table"])})


@multi_asset(
    name="hourly_assets",
    outs={
        BASE_EVENTS: _out("Validated events, one copy of each (the first loaded within dedupe_lookback_days), "
                          "by load hour. Invalid and late-sent rows go to `rejected_events` with a reason.",
                          table=BASE_EVENTS, write="replace", range_column="load_tstamp",
                          partition_by=list(TABLE_PARTITIONS[BASE_EVENTS])),
        LIFECYCLE: _out("One row per session (start/end in event time, event count, user, first and last load), "
                        "recomputed from all events of every session touched in the hour.",
                        table=LIFECYCLE, write="replace_keys", key="domain_sessionid"),
        QUARANTINED: _out("Sessions longer than max_session_days: their events past start + max_session_days "
                          "are left out of filtered_events.",
                          table=QUARANTINED, write="replace_keys", key="domain_sessionid"),
        FILTERED_EVENTS: _out("Relevant events with session fields and event_date: the input of the daily layer.",
                              table=FILTERED_EVENTS, write="replace", range_column="load_tstamp",
                              partition_by=list(TABLE_PARTITIONS[FILTERED_EVENTS])),
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
    window = context.partition_time_window
    # No source table is a precondition, checked before the claim: nothing is left fail-locked.
    # A source that is there but unreadable fails inside the claim, as any failed read does.
    require_source(warehouse.settings.source)
    _record_applied_plan(context, warehouse)
    # A catch-up run (its tag names the app ids) replaces those apps' rows of the window alone,
    # and claims the items of that unit: its failure holds back those apps alone.
    app_ids = split(context.run.tags.get(APP_IDS_TAG))
    app_ids = tuple(sorted(app_ids)) if app_ids is not None else None
    # The turn: one hourly step at a time on any instance, as the hourly_sessions pool does on
    # a configured one. Two at once would each keep their copy of an event (rules 3).
    with claimed(context, warehouse, HOURLY_ASSETS, turn=HOURLY_TURN,
                 unit=None if app_ids is None else joined(app_ids)) as claim:
        if (moved := remove_rows_before_start(warehouse, context.run_id)) is not None:
            context.log.info(f"start_date moved later: removed what {moved.hours} load hour(s) and {moved.days} "
                             f"event day(s) before {moved.first_hour:%Y-%m-%d %H:%M} left in the tables")
        recorded = recorded_hours(warehouse.settings) if app_ids is not None else {}
        if app_ids is None:
            _resolve_catch_ups(context, warehouse)
        results = compute(warehouse, window.start, window.end, app_ids=app_ids)
        try:
            yield from _checked_and_written(context, warehouse, results, app_ids, recorded, claim)
        finally:  # written, refused by the check, or failed
            for df in results.materialized:
                release(df)


def _record_applied_plan(context: AssetExecutionContext, warehouse: WarehouseResource) -> None:
    """The plan the run's tags name, recorded from the hourly sensor's observation if the sensor
    only showed it: the tick writes nothing, so a preview of it changes nothing."""
    plan_id = context.run.tags.get(APPLIED_PLAN_TAG)
    if plan_id and record_observed_plan(warehouse.settings, context.instance, plan_id) is not None:
        context.log.info(f"plan {plan_id} recorded: this run applies its first range")


def _checked_and_written(context: AssetExecutionContext, warehouse: WarehouseResource, results: HourlyResults,
                         app_ids: tuple[str, ...] | None, recorded: dict, claim):
    """The window's check evaluations, then its outputs: each written by the IO manager as it is yielded."""
    window = context.partition_time_window
    within = None if app_ids is None else ("app_id", app_ids)
    # What each write replaces besides the window: the check and the outputs say it once.
    base_replaced, filtered_replaced = [results.dominated], [results.dominated, results.changed]
    # The blocking check, on the rows about to be written: a failure leaves the tables as they were.
    copies = copies_once_written(warehouse, results.window_rows, [
        PendingWrite(BASE_EVENTS, results.kept, base_replaced),
        PendingWrite(FILTERED_EVENTS, results.filtered, filtered_replaced)], few_rows=results.few_rows)
    yield from evaluation_events(context, outcomes_by_check(copies, hours_between(window.start, window.end)))
    if failed := failures(copies):
        raise DuplicateEventIdsError(
            f"{len(failed)} load hour(s) would hold an event_id twice within dedupe_lookback_days or a null "
            f"one, so nothing was written: {'; '.join(failed[:5])}. The hours stay FAILED until resolved "
            "(`incremental-assets manifest resolve`) once the cause is found (docs/operations.md, Checks)")
    figures = figures_by_hour(window.start, window.end, read=results.read, kept=results.kept,
                              rejected=results.rejected, filtered=results.filtered)
    _add_hour_metadata(context, figures, app_ids)
    state = run_state_metadata(context, warehouse.settings)
    settings = settings_metadata(warehouse.settings)
    on_last_partition(context, {**settings, **schema_metadata(results.kept)}, BASE_EVENTS)
    # The step's own figures (sessions changed, copies dominated) are the run's, not an hour's.
    on_last_partition(context, {**settings, **results.facts, **schema_metadata(results.lifecycle)}, LIFECYCLE)
    on_last_partition(context, {**settings, **preview_metadata(results.quarantined),
                                **schema_metadata(results.quarantined)}, QUARANTINED)
    on_last_partition(context, {**settings, **schema_metadata(results.filtered)}, FILTERED_EVENTS)
    # The record of the hours (the IO manager adds the window: what was processed, between which
    # limits) says why the run processed them.
    # The source rows it read: the cost model's (`planning.estimates`).
    source_rows = sum(f.read for f in figures.values())
    payload = {"limits": context.run.tags.get(RUN_LIMITS_TAG, "manual run"), "source_rows": source_rows}
    # An hour's rows are few: the table store may collect them rather than stage files.
    small = source_rows <= rows_collected_at_most(len(results.kept.columns))
    # A catch-up's hours are due again for every app before its first write (`catch_up_begun`).
    begun = [TableWrite(HOUR_LEDGER, lambda: catch_up_begun(warehouse, results, context.run_id), "merge",
                        merge_keys=("load_hour_tstamp",), small=True)] if app_ids is not None else []
    yield Output(TableOutput(results.kept, claim, completes=False, rows=base_replaced, within=within, before=[
        *begun,
        TableWrite(EVENT_COPIES, results.copies, "replace_range", range_column="load_tstamp",
                   partition_by=TABLE_PARTITIONS[EVENT_COPIES], small=small),
        TableWrite(REJECTED_EVENTS, results.rejected, "replace_range", range_column="load_hour_tstamp",
                   within=within, small=small),
    ], metadata=state, small=small), output_name=BASE_EVENTS)
    queue = [TableWrite(SESSIONS_TO_REFILTER, results.to_refilter, "append", small=True)] \
        if results.changed.values else []
    yield Output(TableOutput(results.lifecycle, claim, completes=False, keys=results.touched, before=queue,
                             metadata=state, small=small), output_name=LIFECYCLE)
    yield Output(TableOutput(results.quarantined, claim, completes=False, keys=results.touched,
                             metadata=state, small=small),
                 output_name=QUARANTINED)
    refiltered = [TableWrite(SESSIONS_TO_REFILTER, None, "delete", key="append_id", keys=results.refiltered)] \
        if results.refiltered else []
    rerun = [TableWrite(HOUR_LEDGER, lambda: hours_to_run_again(warehouse, results, context.run_id),
                        "merge", merge_keys=("load_hour_tstamp",), small=True)] if results.revived else []
    # Hours only source maintenance rewrote are recorded as processed from their files as they
    # are now: the plan then reads no commit for them again.
    verdicts = verdicts_of_maintenance(warehouse, results)
    verified = [TableWrite(HOUR_LEDGER, verdicts, "merge", merge_keys=("load_hour_tstamp",), small=True)] \
        if verdicts is not None else []
    yield Output(TableOutput(
        results.filtered, claim, rows=filtered_replaced, within=within, payload=payload,
        metadata=state, small=small,
        # Counts per (load hour, event day) and ledger rows per hour: few, whatever the window.
        after=[TableWrite(FILTERED_COUNTS, lambda: filtered_counts(warehouse, results), "replace_range",
                          range_column="load_hour_tstamp", range=results.counts_range, small=True),
               *refiltered, *rerun],
        markers=[TableWrite(HOUR_LEDGER, lambda: processed_hours(warehouse, results, context.run_id, recorded),
                            "replace_range", range_column="load_hour_tstamp", small=True), *verified]),
        output_name=FILTERED_EVENTS)


def _resolve_catch_ups(context: AssetExecutionContext, warehouse: WarehouseResource) -> None:
    """A run of every app processes every declared app's rows of its hours, and removes the
    others': the failed catch-ups of those hours (fail-locked, for any app ids, declared or taken
    out since) have nothing left to do, and are resolved rather than left locked for good."""
    window = context.partition_time_window
    items = unit_items_fail_locked(warehouse.manifest, hours_between(window.start, window.end))
    if items:
        warehouse.manifest.resolve(items, note="a run of the hour for every app processes it", run_id=context.run_id)
        context.log.info(f"resolved {len(items)} failed catch-up item(s) of these hours: {items[0]} ...")


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
