"""The asset jobs: one per partitions definition (Dagster infers it from the assets), so every
job takes a plain partition range."""

from dagster import AssetSelection, define_asset_job

from incremental_assets.assets.daily import attributes, daily_aggregates
from incremental_assets.assets.hourly import HOURLY_ASSET_DEFS
from incremental_assets.checks import DAILY_INVARIANT, SOURCE_CHECK
from incremental_assets.names import ATTRIBUTES_JOB, DAILY_JOB, HOURLY_JOB

hourly_job = define_asset_job(
    HOURLY_JOB, selection=AssetSelection.assets(*HOURLY_ASSET_DEFS) | AssetSelection.checks(SOURCE_CHECK),
    description="The load-hour assets for a range of closed load hours (one step); the source's column check.")
# The every-day invariant (aggregated + pending = filtered) holds once all days of a late-days
# plan are rebuilt, so it runs with attributes (after them), not after each daily range.
daily_job = define_asset_job(
    DAILY_JOB, selection=AssetSelection.assets(daily_aggregates) - AssetSelection.checks(DAILY_INVARIANT),
    description="daily_aggregates for a range of event days, each rebuilt whole.")
attributes_job = define_asset_job(
    ATTRIBUTES_JOB, selection=AssetSelection.assets(attributes) | AssetSelection.checks(DAILY_INVARIANT),
    description="attributes of the users whose daily rows or states changed (every user when attributes_as_of "
                "moved, or with run_type full), from daily_aggregates; then the daily invariant check.")

ASSET_JOBS = [hourly_job, daily_job, attributes_job]
