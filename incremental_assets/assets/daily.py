"""The event-day layer: daily_aggregates (rebuilt whole per day) and attributes (recomputed)."""


from datetime import datetime, timedelta, timezone

from dagster import AssetDep, AssetExecutionContext, asset
from pyspark.sql import functions as F

from incremental_assets.assets.common import run_state_metadata, schema_metadata
from incremental_assets.assets.hourly import filtered_events, sessions_lifecycle_manifest
from incremental_assets.names import DAILY_MANIFEST
from incremental_assets.partitions import LOAD_SETTINGS, daily_partitions, filtered_hours_of_day, single_run
from incremental_assets.transforms.attributes import (
    WINDOW_METRICS,
    lifetime_sessions,
    refresh_window_metrics,
    user_attributes,
)
from incremental_assets.transforms.daily_aggregates import daily_aggregates as daily_transform
from incremental_assets.transforms.daily_aggregates import rows_by_day
from resources.manifest_io_manager import TableOutput, TableWrite, claimed
from resources.warehouse import WarehouseResource


@asset(
    partitions_def=daily_partitions,
    backfill_policy=single_run,
    io_manager_key="manifest_io",
    group_name="event_days",
    kinds={"spark", "delta"},
    deps=[AssetDep(filtered_events, partition_mapping=filtered_hours_of_day(LOAD_SETTINGS.reprocess_days))],
    description="One row per (event_date, domain_userid), rebuilt from every filtered event of "
                "the day; daily_aggregation_manifest records rows aggregated and rows pending.",
    metadata={"table": "daily_aggregates", "write": "replace_range", "range_column": "event_date",
              "partition_by": ["event_date"]},
)
def daily_aggregates(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    with claimed(context, warehouse):
        tables = warehouse.tables
        window = context.partition_time_window
        first_day, end_day = window.start.date(), window.end.date()
        filtered = tables.read_range("filtered_events", "event_date", first_day, end_day)
        daily = daily_transform(filtered).cache()
        rebuilt_at = datetime.now(timezone.utc)
        # Days of the range without any filtered row get a manifest row too: 0 aggregated.
        days = daily.sparkSession.createDataFrame(
            [(first_day + timedelta(days=i),) for i in range((end_day - first_day).days)], "event_date date")
        manifest_rows = days.join(rows_by_day(daily), "event_date", "left").select(
            "event_date",
            F.coalesce("rows_aggregated", F.lit(0).cast("long")).alias("rows_aggregated"),
            F.lit(0).cast("long").alias("rows_pending"),
            F.lit(rebuilt_at).alias("last_rebuilt_at"),
            F.lit(context.run_id).alias("last_rebuilt_run_id"),
        )
        manifest = TableWrite(DAILY_MANIFEST, manifest_rows, "merge", keys=("event_date",))
        return TableOutput(df=daily, side_tables=[manifest], cached=[daily],
                           metadata={**run_state_metadata(context), **schema_metadata(daily)},
                           payload={"days": f"{first_day}..{end_day - timedelta(days=1)}"})


@asset(
    io_manager_key="manifest_io",
    group_name="event_days",
    kinds={"spark", "delta"},
    deps=[daily_aggregates, sessions_lifecycle_manifest],
    description="One row per user: lifetime and last-N-days metrics, dropped and recomputed "
                "from daily_aggregates (run_type=last_n_days recomputes only the window metrics).",
    metadata={"table": "attributes", "write": "overwrite"},
)
def attributes(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    with claimed(context, warehouse):
        settings, tables = warehouse.settings, warehouse.tables
        as_of = settings.as_of_date(datetime.now(timezone.utc))
        if settings.run_type == "last_n_days" and tables.exists("attributes"):
            longest = max(days for _, _, days in WINDOW_METRICS)
            window = tables.read_range("daily_aggregates", "event_date", as_of - timedelta(days=longest), as_of)
            result = refresh_window_metrics(tables.read("attributes"), window, as_of=as_of)
        else:
            sessions = lifetime_sessions(tables.read("sessions_lifecycle_manifest"),
                                         start_date=settings.start_date)
            result = user_attributes(tables.read("daily_aggregates"), sessions, as_of=as_of)
        return TableOutput(df=result, metadata={
            **run_state_metadata(context), **schema_metadata(result),
            "attributes_as_of": str(as_of), "run_type": settings.run_type})
