"""The event-day layer: daily_aggregates (rebuilt whole per day) and attributes.

Thin: each runs its step (`steps.daily`) and hands Dagster what it wrote and its figures.
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
from incremental_assets.names import AS_OF_TAG, ATTRIBUTES, DAILY_AGGREGATES, FILTERED_EVENTS
from incremental_assets.partitions import LOAD_SETTINGS, daily_partitions, filtered_hours_of_day, single_run
from incremental_assets.planning.hours import day_key
from incremental_assets.steps.daily import run_attributes_step, run_daily_step
from incremental_assets.steps.daily_compute import DayFigures, last_event_day
from resources.manifest import ItemLockedError
from resources.manifest_io_manager import StepOutput
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
    metadata={"table": DAILY_AGGREGATES, **table_metadata(DAILY_AGGREGATES)},
    owners=OWNERS,
    code_version=CODE_VERSION,
)
def daily_aggregates(context: AssetExecutionContext, warehouse: WarehouseResource) -> StepOutput:
    require_table(warehouse, FILTERED_EVENTS, DAILY_AGGREGATES, "run the load hours (hourly_job) first")
    done = run_daily_step(context, warehouse)
    _add_day_metadata(context, done.figures)
    on_last_partition(context, {**settings_metadata(warehouse.settings), **schema_metadata(done.results.daily)})
    return StepOutput(DAILY_AGGREGATES, done.written[DAILY_AGGREGATES], last=True,
                      metadata=run_state_metadata(context, warehouse.settings))


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
    metadata={"table": ATTRIBUTES, **table_metadata(ATTRIBUTES)},
    owners=OWNERS,
    code_version=CODE_VERSION,
)
def attributes(context: AssetExecutionContext, warehouse: WarehouseResource) -> StepOutput:
    require_table(warehouse, DAILY_AGGREGATES, ATTRIBUTES, "materialize daily_aggregates (daily_job) first")
    as_of = attributes_as_of(context, warehouse)
    try:
        update, written = run_attributes_step(context, warehouse, as_of)
    except ItemLockedError as exc:
        context.log.info(f"{exc}: waiting for it, trying again in {LOCK_WAIT_SECONDS} s")
        raise RetryRequested(max_retries=LOCK_WAIT_RETRIES, seconds_to_wait=LOCK_WAIT_SECONDS) from exc
    last_day = last_event_day(warehouse)
    context.log.info(f"attributes as of {as_of}: {update.how}")
    if update.new:
        context.log.info(f"declared attributes new to the table, computed for every user: "
                         f"{', '.join(d.name for d in update.new)}; states computed from every day for "
                         f"{len(update.backfilled)} state key(s) no attribute the table held reads")
    descriptions = {d.name: f"{d.describe()} (version {d.version})" + (f": {d.description}" if d.description else "")
                    for d in update.declared}
    return StepOutput(ATTRIBUTES, written[ATTRIBUTES], last=True, metadata={
        **run_state_metadata(context, warehouse.settings), **settings_metadata(warehouse.settings),
        **schema_metadata(update.rows, descriptions),
        "attributes_as_of": str(as_of), "run_type": warehouse.settings.run_type,
        "how": update.how, "last_event_day": str(last_day),
        **declared_metadata(update.declared), **as_of_warning(context, as_of, last_day)})


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
