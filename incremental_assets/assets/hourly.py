"""The load-hour assets: base_events, sessions_lifecycle_manifest, quarantined_sessions and
filtered_events, materialized together by one step for a range of closed load hours.

One step: one manifest claim and one close for all four, one source read, shared cached
DataFrames. The computation is `hourly_step`; this module hands its results to the manifest
IO manager in the asset graph's order: base_events, the sessions, filtered_events (and their
counts); once the manifest records them PROCESSED, the hours' ledger rows, the completion marker. A crash anywhere leaves what the
next run needs to redo it (see `hourly_step`).
"""

from dagster import AssetExecutionContext, AssetKey, AssetOut, Output, multi_asset

from incremental_assets.assets.common import run_state_metadata, schema_metadata
from incremental_assets.hourly_step import compute, filtered_counts, processed_hours
from incremental_assets.names import (
    BASE_EVENTS,
    EVENT_COPIES,
    FILTERED_COUNTS,
    FILTERED_EVENTS,
    HOURLY_ASSETS,
    LIFECYCLE,
    PROCESSED_HOURS,
    QUARANTINED,
    REJECTED_EVENTS,
    RUN_LIMITS_TAG,
    SESSIONS_TO_REFILTER,
)
from incremental_assets.partitions import hourly_partitions, single_run
from resources.manifest_io_manager import TableOutput, TableWrite, claimed
from resources.warehouse import WarehouseResource

GROUP = "load_hours"


def _out(description: str, **metadata) -> AssetOut:
    return AssetOut(io_manager_key="manifest_io", group_name=GROUP, kinds={"spark", "delta"},
                    description=description, metadata=metadata)


@multi_asset(
    name="hourly_assets",
    outs={
        BASE_EVENTS: _out("Validated events, one copy of each (the first loaded within dedupe_lookback_days), "
                          "by load hour. Invalid and late-sent rows go to `rejected_events` with a reason.",
                          table=BASE_EVENTS, write="replace", range_column="load_tstamp",
                          partition_by=["load_date"]),
        LIFECYCLE: _out("One row per session (start/end in event time, event count, user, first and last load), "
                        "recomputed from all events of every session touched in the hour.",
                        table=LIFECYCLE, write="replace_keys", key="domain_sessionid"),
        QUARANTINED: _out("Sessions longer than max_session_days: their events past start + max_session_days "
                          "are left out of filtered_events.",
                          table=QUARANTINED, write="replace_keys", key="domain_sessionid"),
        FILTERED_EVENTS: _out("Relevant events with session fields and event_date: the input of the daily layer.",
                              table=FILTERED_EVENTS, write="replace", range_column="load_tstamp",
                              partition_by=["event_date"]),
    },
    internal_asset_deps={
        LIFECYCLE: {AssetKey(BASE_EVENTS)},
        QUARANTINED: {AssetKey(LIFECYCLE)},
        FILTERED_EVENTS: {AssetKey(BASE_EVENTS), AssetKey(LIFECYCLE), AssetKey(QUARANTINED)},
    },
    partitions_def=hourly_partitions,
    backfill_policy=single_run,
    can_subset=False,
)
def hourly_assets(context: AssetExecutionContext, warehouse: WarehouseResource):
    window = context.partition_time_window
    with claimed(context, warehouse, HOURLY_ASSETS) as claim:
        results = compute(warehouse, window.start, window.end)
        state = run_state_metadata(context)
        payload = {"load_window_start": window.start.isoformat(), "load_window_end": window.end.isoformat(),
                   "limits": context.run.tags.get(RUN_LIMITS_TAG, "manual run")}
        yield Output(TableOutput(results.kept, claim, completes=False, rows=[results.dominated], before=[
            TableWrite(EVENT_COPIES, results.copies, "replace_range", range_column="load_tstamp",
                       partition_by=["load_date"]),
            TableWrite(REJECTED_EVENTS, results.rejected, "replace_range", range_column="load_hour_tstamp"),
        ], metadata={**state, **schema_metadata(results.kept)}), output_name=BASE_EVENTS)
        queue = [TableWrite(SESSIONS_TO_REFILTER, results.to_refilter, "append")] if results.changed.values else []
        yield Output(TableOutput(results.lifecycle, claim, completes=False, keys=results.touched, before=queue,
                                 metadata={**state, **results.facts}), output_name=LIFECYCLE)
        yield Output(TableOutput(results.quarantined, claim, completes=False, keys=results.touched, metadata=state),
                     output_name=QUARANTINED)
        refiltered = [TableWrite(SESSIONS_TO_REFILTER, None, "delete", key="append_id", keys=results.refiltered)] \
            if results.refiltered else []
        yield Output(TableOutput(
            results.filtered, claim, rows=[results.dominated, results.changed], payload=payload,
            cached=results.cached, metadata={**state, **schema_metadata(results.filtered)},
            after=[TableWrite(FILTERED_COUNTS, lambda: filtered_counts(warehouse, results), "replace_range",
                              range_column="load_hour_tstamp", range=results.counts_range),
                   *refiltered],
            markers=[TableWrite(PROCESSED_HOURS, lambda: processed_hours(warehouse, results, context.run_id),
                                "replace_range", range_column="load_hour_tstamp")]),
            output_name=FILTERED_EVENTS)

HOURLY_ASSET_DEFS = [hourly_assets]
