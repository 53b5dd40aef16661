"""The event-day layer: daily_aggregates (rebuilt whole per day) and attributes.

Thin: `daily_steps` computes; the manifest IO manager writes, in the order that keeps a crash
recoverable (see there).
"""

from datetime import date, datetime, timezone

from dagster import AssetDep, AssetExecutionContext, AssetKey, asset

from incremental_assets.assets.common import run_state_metadata, schema_metadata
from incremental_assets.daily_steps import aggregate_days, attributes_update
from incremental_assets.names import (
    AS_OF_TAG,
    ATTRIBUTES,
    DAILY_AGGREGATES,
    DAILY_MANIFEST,
    FILTERED_EVENTS,
    USERS_TO_REFRESH,
)
from incremental_assets.partitions import LOAD_SETTINGS, daily_partitions, filtered_hours_of_day, single_run
from resources.manifest_io_manager import TableOutput, TableWrite, claimed
from resources.warehouse import WarehouseResource


@asset(
    partitions_def=daily_partitions,
    backfill_policy=single_run,
    io_manager_key="manifest_io",
    group_name="event_days",
    kinds={"spark", "delta"},
    deps=[AssetDep(AssetKey(FILTERED_EVENTS),
                   partition_mapping=filtered_hours_of_day(LOAD_SETTINGS.reprocess_days))],
    description="One row per (event_date, domain_userid), rebuilt from every filtered event of "
                "the day; daily_aggregation_manifest records rows aggregated and rows pending.",
    metadata={"table": DAILY_AGGREGATES, "write": "replace_range", "range_column": "event_date",
              "partition_by": ["event_date"]},
)
def daily_aggregates(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    window = context.partition_time_window
    first_day, end_day = window.start.date(), window.end.date()
    with claimed(context, warehouse, [DAILY_AGGREGATES]) as claim:
        results = aggregate_days(warehouse, first_day, end_day, context.run_id)
        return TableOutput(
            df=results.daily, claim=claim, cached=[results.daily],
            before=[TableWrite(USERS_TO_REFRESH, results.users_to_refresh, "append")],
            markers=[TableWrite(DAILY_MANIFEST, results.ledger, "replace_range", range_column="event_date")],
            metadata={**run_state_metadata(context), **schema_metadata(results.daily)},
            payload={"days": f"{first_day}..{date.fromordinal(end_day.toordinal() - 1)}"})


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
    deps=[daily_aggregates],
    description="One row per user: lifetime and last-N-days metrics as of attributes_as_of, from "
                "daily_aggregates (only users whose daily rows changed are recomputed, unless the day moved).",
    metadata={"table": ATTRIBUTES, "write": "replace_keys", "key": "domain_userid"},
)
def attributes(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    with claimed(context, warehouse, [ATTRIBUTES]) as claim:
        as_of = attributes_as_of(context, warehouse)
        update = attributes_update(warehouse, as_of, warehouse.settings.run_type)
        after = [TableWrite(USERS_TO_REFRESH, None, "delete", key="append_id", keys=update.consumed)] \
            if update.consumed else []
        return TableOutput(df=update.rows, claim=claim, write="overwrite" if update.full else None,
                           keys=update.keys, after=after, metadata={
                               **run_state_metadata(context), **schema_metadata(update.rows),
                               "attributes_as_of": str(as_of), "run_type": warehouse.settings.run_type,
                               "how": update.how})
