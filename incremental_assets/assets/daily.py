"""The event-day layer: daily_aggregates (rebuilt whole per day) and attributes.

Thin: `daily_steps` computes; the manifest IO manager writes, in the order that keeps a crash
recoverable (see there).
"""

from datetime import date, datetime, timezone

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    MetadataValue,
    RetryRequested,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from incremental_assets.assets.common import (
    CODE_VERSION,
    DAILY_FRESHNESS,
    OWNERS,
    on_last_partition,
    require_table,
    run_state_metadata,
    schema_metadata,
    settings_metadata,
    table_metadata,
)
from incremental_assets.daily_steps import (
    DayFigures,
    aggregate_days,
    attributes_update,
    figures_by_day,
    last_event_day,
)
from incremental_assets.names import (
    AS_OF_TAG,
    ATTRIBUTE_STATES,
    ATTRIBUTES,
    DAILY_AGGREGATES,
    DAY_LEDGER,
    FILTERED_EVENTS,
    TABLE_PARTITIONS,
    USERS_TO_REFRESH,
)
from incremental_assets.partitions import LOAD_SETTINGS, daily_partitions, filtered_hours_of_day, single_run
from incremental_assets.planning.hours import day_key
from incremental_assets.planning.processing_manifest import ItemStatus
from resources.manifest import ItemLockedError, abandoned_lock_check
from resources.manifest_io_manager import TableOutput, TableWrite, claimed
from resources.manifest_items import split_item_id
from resources.tables import rows_collected_at_most
from resources.warehouse import WarehouseResource

# attributes is one manifest item for every user. A second attributes run (the sensor's beside
# the midnight schedule's, or one launched by hand) waits for the run that holds it, then
# computes what is left: the queue of users it did not consume, or a day that moved.
LOCK_WAIT_SECONDS = 30
LOCK_WAIT_RETRIES = 20


@asset(
    partitions_def=daily_partitions,
    backfill_policy=single_run,
    io_manager_key="manifest_io",
    group_name="event_days",
    kinds={"spark", "delta"},
    freshness_policy=DAILY_FRESHNESS,
    deps=[AssetDep(AssetKey(FILTERED_EVENTS),
                   partition_mapping=filtered_hours_of_day(LOAD_SETTINGS.reprocess_days))],
    description="One row per (event_date, domain_userid), rebuilt from every filtered event of "
                "the day; daily_aggregation_manifest records rows aggregated and rows pending.",
    metadata={"table": DAILY_AGGREGATES, "write": "replace_range", "range_column": "event_date",
              "partition_by": list(TABLE_PARTITIONS[DAILY_AGGREGATES]), **table_metadata(DAILY_AGGREGATES)},
    owners=OWNERS,
    code_version=CODE_VERSION,
)
def daily_aggregates(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    window = context.partition_time_window
    first_day, end_day = window.start.date(), window.end.date()
    require_table(warehouse, FILTERED_EVENTS, DAILY_AGGREGATES, "run the load hours (hourly_job) first")
    with claimed(context, warehouse, [DAILY_AGGREGATES]) as claim:
        results = aggregate_days(warehouse, first_day, end_day, context.run_id)
        figures = figures_by_day(warehouse, results, first_day, end_day)
        _add_day_metadata(context, figures)
        on_last_partition(context, {**settings_metadata(warehouse.settings), **schema_metadata(results.daily)})
        # A few days' rows, and the queue's and ledger's (narrow): the table store may collect them.
        small = sum(f.rows for f in figures.values()) <= rows_collected_at_most(len(results.daily.columns))
        return TableOutput(
            df=results.daily, claim=claim, small=small,
            materialized=[results.daily, *([results.states] if results.states is not None else [])],
            # The queue first: it compares the days' rows as stored with their rebuild.
            before=[TableWrite(USERS_TO_REFRESH, results.users_to_refresh, "append", small=True),
                    *([TableWrite(ATTRIBUTE_STATES, results.states, "replace_range", range_column="event_date",
                                  partition_by=TABLE_PARTITIONS[ATTRIBUTE_STATES])]
                      if results.states is not None else [])],
            markers=[TableWrite(DAY_LEDGER, results.ledger, "replace_range", range_column="event_date", small=True)],
            metadata=run_state_metadata(context, warehouse.settings),
            payload={"days": f"{first_day}..{date.fromordinal(end_day.toordinal() - 1)}"})


def _add_day_metadata(context: AssetExecutionContext, figures: dict[date, DayFigures]) -> None:
    """Each event day's own numbers on its partition, and one summary line in the run's log."""
    by_key = {day_key(day): figure for day, figure in figures.items()}
    for key in context.partition_keys:
        figure = by_key.get(key, DayFigures())
        context.add_asset_metadata({
            "dagster/partition_row_count": MetadataValue.int(figure.rows),
            "rows_aggregated": MetadataValue.int(figure.rows_aggregated),
            "rows_pending_before": MetadataValue.int(figure.pending_before),
            "rows_unaccounted_before": MetadataValue.int(figure.unaccounted_before),
            "rebuilt_because": MetadataValue.text(figure.reason),
        }, partition_key=key)
    context.log.info(f"event days {context.partition_keys[0]} .. {context.partition_keys[-1]}: "
                     f"{sum(f.rows for f in figures.values())} daily rows from "
                     f"{sum(f.rows_aggregated for f in figures.values())} filtered rows")


def attributes_as_of(context: AssetExecutionContext, warehouse: WarehouseResource) -> date:
    """The run's day (a tag set by `incremental-assets run --until`), else the setting, else today."""
    tagged = context.run.tags.get(AS_OF_TAG)
    if warehouse.settings.attributes_as_of is None and tagged:
        return date.fromisoformat(tagged)
    return warehouse.settings.as_of_date(datetime.now(timezone.utc))


@asset(
    io_manager_key="manifest_io",
    group_name="event_days",
    kinds={"spark", "delta"},
    freshness_policy=DAILY_FRESHNESS,
    deps=[daily_aggregates],
    description="One row per user: the declared attributes (by default twelve lifetime and last-N-days metrics) "
                "as of attributes_as_of, from daily_aggregates and the attributes' states (only users whose "
                "daily rows or states changed are recomputed, and those a move of the day changes).",
    metadata={"table": ATTRIBUTES, "write": "replace_keys", "key": "domain_userid", **table_metadata(ATTRIBUTES)},
    owners=OWNERS,
    code_version=CODE_VERSION,
)
def attributes(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    require_table(warehouse, DAILY_AGGREGATES, ATTRIBUTES, "materialize daily_aggregates (daily_job) first")
    try:
        with claimed(context, warehouse, [ATTRIBUTES]) as claim:
            return _attributes_output(context, warehouse, claim)
    except ItemLockedError as exc:
        context.log.info(f"{exc}: waiting for it, trying again in {LOCK_WAIT_SECONDS} s")
        raise RetryRequested(max_retries=LOCK_WAIT_RETRIES, seconds_to_wait=LOCK_WAIT_SECONDS) from exc


def _daily_runs_in_progress(context: AssetExecutionContext, warehouse: WarehouseResource) -> set[str]:
    """The daily runs that may still commit: those holding a daily_aggregates item the manifest's
    lock rules do not count as abandoned (a run whose process died, or that Dagster reports
    finished, holds nothing: its queue rows are consumed)."""
    abandoned = abandoned_lock_check(context.instance, warehouse.settings.max_lock_age_hours)
    return {state.open_lock.run_id for item, state in warehouse.manifest.unsettled_states().items()
            if state.status is ItemStatus.LOCKED and split_item_id(item)[0] == DAILY_AGGREGATES
            and abandoned(state.open_lock) is None}


def _attributes_output(context: AssetExecutionContext, warehouse: WarehouseResource, claim) -> TableOutput:
    as_of = attributes_as_of(context, warehouse)
    running = _daily_runs_in_progress(context, warehouse)
    update = attributes_update(warehouse, as_of, warehouse.settings.run_type, in_progress=running.__contains__)
    after = [TableWrite(USERS_TO_REFRESH, None, "delete", key="append_id", keys=update.consumed)] \
        if update.consumed else []
    # The new attributes' states first (any rows a daily run wrote of them since they were
    # declared are replaced). A crash before the table's commit leaves the table with the
    # versions it held, so the next run computes the same states again.
    before = [TableWrite(ATTRIBUTE_STATES, None, "delete", key="attribute", keys=update.backfilled),
              TableWrite(ATTRIBUTE_STATES, update.backfill, "append",
                         partition_by=TABLE_PARTITIONS[ATTRIBUTE_STATES])] \
        if update.backfill is not None else []
    last_day = last_event_day(warehouse)
    context.log.info(f"attributes as of {as_of}: {update.how}")
    if update.new:
        context.log.info(f"declared attributes new to the table, computed for every user: "
                         f"{', '.join(d.name for d in update.new)}; states computed from every day for "
                         f"{len(update.backfilled)} state key(s) no attribute the table held reads")
    # The queued users' rows are few after an hour (more after a backfill: the store then stages them).
    return TableOutput(df=update.rows, claim=claim, write="overwrite" if update.full else None,
                       keys=update.keys, before=before, after=after, small=not update.full,
                       materialized=[update.backfill] if update.backfill is not None else [], metadata={
                           **run_state_metadata(context, warehouse.settings),
                           **settings_metadata(warehouse.settings),
                           **schema_metadata(update.rows, {d.name: f"{d.describe()} (version {d.version})"
                                                           + (f": {d.description}" if d.description else "")
                                                           for d in update.declared}),
                           "attributes_as_of": str(as_of), "run_type": warehouse.settings.run_type,
                           "how": update.how, "last_event_day": str(last_day),
                           **declared_metadata(update.declared),
                           **as_of_warning(context, as_of, last_day)})


def declared_metadata(declared) -> dict:
    """Each declared attribute's definition and version, as a table in the materialization."""
    if not declared:
        return {}
    rows = [TableRecord({"attribute": d.name, "version": d.version, "definition": d.describe(),
                         "description": d.description}) for d in declared]
    schema = TableSchema(columns=[TableColumn("attribute", "string"), TableColumn("version", "string"),
                                  TableColumn("definition", "string"), TableColumn("description", "string")])
    return {"declared_attributes": MetadataValue.table(rows, schema=schema)}


def as_of_warning(context: AssetExecutionContext, as_of: date, last_day: date | None) -> dict:
    """Flag an as-of day past the data: every last-N-days metric then counts days with no data."""
    if last_day is None or (as_of - last_day).days <= 1:
        return {"as_of_after_last_event_day": False}
    text = (f"attributes_as_of {as_of} is {(as_of - last_day).days} days after the last event day "
            f"{last_day}: the last-N-days metrics count days without data (set INCREMENTAL_ATTRIBUTES_AS_OF "
            "to the data's last day, or run `incremental-assets run --until` at a time within the data)")
    context.log.warning(text)
    return {"as_of_after_last_event_day": True, "as_of_warning": MetadataValue.md(f"**Warning:** {text}")}
