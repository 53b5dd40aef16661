"""The load-hour assets: read the window, call the transform, hand a TableOutput on.

Each asset is written for a *range* of hours (`context.partition_time_window`), so one
partition and a month-long backfill are the same code path.
"""


from dagster import AssetExecutionContext, AssetIn, asset
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from incremental_assets.assets.common import run_state_metadata, schema_metadata
from incremental_assets.names import FILTERED_COUNTS, REJECTED_EVENTS, RUN_LIMITS_TAG
from incremental_assets.partitions import hourly_partitions, single_run
from incremental_assets.sources.reader import read_source
from incremental_assets.transforms.base_events import base_events as base_events_transform
from incremental_assets.transforms.filtered_events import filtered_events as filtered_transform
from incremental_assets.transforms.filtered_events import rows_by_load_hour_and_day
from incremental_assets.transforms.sessions import (
    quarantined_sessions as quarantined_transform,
)
from incremental_assets.transforms.sessions import (
    session_lifecycle,
    sessions_needing_update,
)
from resources.manifest_io_manager import TableOutput, TableWrite, claimed
from resources.spark import as_utc
from resources.warehouse import WarehouseResource

GROUP = "load_hours"
HOURLY = dict(partitions_def=hourly_partitions, backfill_policy=single_run,
              io_manager_key="manifest_io", group_name=GROUP, kinds={"spark", "delta"})


def _window_payload(context) -> dict:
    """What the manifest keeps with each PROCESSED record: the load window and the run's limits."""
    window = context.partition_time_window
    return {"load_window_start": window.start.isoformat(), "load_window_end": window.end.isoformat(),
            "limits": context.run.tags.get(RUN_LIMITS_TAG, "manual run")}


@asset(
    **HOURLY,
    description="Validated, deduplicated events first loaded in each load hour. Invalid and "
                "late-sent rows go to `rejected_events` with a reason.",
    metadata={"table": "base_events", "write": "replace_range", "range_column": "load_tstamp",
              "partition_by": ["load_date"]},
)
def base_events(context: AssetExecutionContext, warehouse: WarehouseResource) -> TableOutput:
    with claimed(context, warehouse):
        settings = warehouse.settings
        window = context.partition_time_window
        lookback = settings.duplicate_lookback
        tables, source = warehouse.tables, settings.source
        result = base_events_transform(read_source(tables, source, window.start, window.end),
                                       read_source(tables, source, window.start - lookback, window.start),
                                       window_start=window.start, window_end=window.end,
                                       days_late_allowed=settings.days_late_allowed,
                                       app_ids=settings.app_ids)
        rejected = TableWrite(REJECTED_EVENTS, result.rejected, "replace_range",
                              range_column="load_hour_tstamp")
        return TableOutput(df=result.events, side_tables=[rejected],
                           metadata={**run_state_metadata(context), **schema_metadata(result.events)},
                           payload=_window_payload(context))


@asset(
    **HOURLY,
    ins={"base_events": AssetIn()},
    description="One row per session (start/end in event time, event count, user, first and "
                "last load), recomputed from all events of every session touched in the hour.",
    metadata={"table": "sessions_lifecycle_manifest", "write": "merge", "keys": ["domain_sessionid"]},
)
def sessions_lifecycle_manifest(context: AssetExecutionContext, warehouse: WarehouseResource,
                                base_events: DataFrame) -> TableOutput:
    with claimed(context, warehouse):
        settings, tables = warehouse.settings, warehouse.tables
        window = context.partition_time_window
        name = "sessions_lifecycle_manifest"
        stored = tables.read(name) if tables.exists(name) else base_events.sparkSession.createDataFrame(
            [], "domain_sessionid string, start_tstamp timestamp, is_quarantined boolean, "
                "first_load_tstamp timestamp")
        to_update = sessions_needing_update(base_events, stored,
                                            max_session_days=settings.max_session_days).cache()
        oldest = as_utc(to_update.agg(F.min("scan_from")).first()[0])
        floor = window.start - settings.session_lookback
        scan_from = max(oldest, floor) if oldest is not None else window.start
        events = tables.read_range("base_events", "load_tstamp", scan_from, None).join(
            to_update.select("domain_sessionid"), "domain_sessionid", "left_semi")
        lifecycle = session_lifecycle(events, max_session_days=settings.max_session_days)
        return TableOutput(df=lifecycle, cached=[to_update],
                           metadata={**run_state_metadata(context), "scan_from": scan_from.isoformat()},
                           payload=_window_payload(context))


@asset(
    **HOURLY,
    ins={"sessions_lifecycle_manifest": AssetIn()},
    description="Sessions longer than max_session_days: their events past start + "
                "max_session_days are left out of filtered_events.",
    metadata={"table": "quarantined_sessions", "write": "merge", "keys": ["domain_sessionid"]},
)
def quarantined_sessions(context: AssetExecutionContext, warehouse: WarehouseResource,
                         sessions_lifecycle_manifest: DataFrame) -> TableOutput:
    with claimed(context, warehouse):
        quarantined = quarantined_transform(sessions_lifecycle_manifest,
                                            before=context.partition_time_window.end)
        return TableOutput(df=quarantined, metadata=run_state_metadata(context),
                           payload=_window_payload(context))


@asset(
    **HOURLY,
    ins={"base_events": AssetIn(), "sessions_lifecycle_manifest": AssetIn(),
         "quarantined_sessions": AssetIn()},
    description="Relevant events with session fields and event_date: the input of the daily layer.",
    metadata={"table": "filtered_events", "write": "replace_range", "range_column": "load_tstamp",
              "partition_by": ["event_date"]},
)
def filtered_events(context: AssetExecutionContext, warehouse: WarehouseResource,
                    base_events: DataFrame, sessions_lifecycle_manifest: DataFrame,
                    quarantined_sessions: DataFrame) -> TableOutput:
    # The quarantine cut uses the lifecycle's start; quarantined_sessions is an input so
    # that this hour's quarantine is recorded before its events are filtered.
    with claimed(context, warehouse):
        settings = warehouse.settings
        filtered = filtered_transform(base_events, sessions_lifecycle_manifest,
                                      event_names=settings.event_names, start_date=settings.start_date,
                                      max_session_days=settings.max_session_days).cache()
        # Row counts per (load hour, event day): what the late-day planner reads, without Spark.
        counts = TableWrite(FILTERED_COUNTS, rows_by_load_hour_and_day(filtered), "replace_range",
                            range_column="load_hour_tstamp")
        return TableOutput(df=filtered, side_tables=[counts], cached=[filtered],
                           metadata={**run_state_metadata(context), **schema_metadata(filtered)},
                           payload=_window_payload(context))


HOURLY_ASSET_DEFS = [base_events, sessions_lifecycle_manifest, quarantined_sessions, filtered_events]
