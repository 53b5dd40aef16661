"""The asset jobs: one per partitions definition (Dagster infers it from the assets), so every
job takes a plain partition range. They select by key: the sensors that launch them import
no asset, so a sensor tick loads nothing of the steps."""

from dagster import AssetCheckKey, AssetKey, AssetSelection, define_asset_job

from incremental_assets.names import (
    ATTRIBUTES,
    ATTRIBUTES_JOB,
    DAILY_AGGREGATES,
    DAILY_JOB,
    HOURLY_ASSETS,
    HOURLY_JOB,
    SOURCE_EVENTS,
)

# The checks selected apart from their assets (their functions are in `checks`).
SOURCE_CHECK = AssetCheckKey(AssetKey(SOURCE_EVENTS), "columns_unchanged")
DAILY_INVARIANT = AssetCheckKey(AssetKey(DAILY_AGGREGATES), "rows_aggregated_plus_pending_equal_filtered")

hourly_job = define_asset_job(
    HOURLY_JOB, selection=AssetSelection.assets(*HOURLY_ASSETS) | AssetSelection.checks(SOURCE_CHECK),
    description="The load-hour assets for a range of closed load hours (one step); the source's column check.")
# The every-day invariant (aggregated + pending = filtered) holds once all days of a late-days
# plan are rebuilt, so it runs with attributes (after them), not after each daily range.
daily_job = define_asset_job(
    DAILY_JOB, selection=AssetSelection.assets(DAILY_AGGREGATES) - AssetSelection.checks(DAILY_INVARIANT),
    description="daily_aggregates for a range of event days, each rebuilt whole.")
attributes_job = define_asset_job(
    ATTRIBUTES_JOB, selection=AssetSelection.assets(ATTRIBUTES) | AssetSelection.checks(DAILY_INVARIANT),
    description="attributes of the users whose daily rows or states changed (every user when attributes_as_of "
                "moved, or with run_type full), from daily_aggregates; then the daily invariant check.")

ASSET_JOBS = [hourly_job, daily_job, attributes_job]
