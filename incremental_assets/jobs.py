"""Jobs: one per partitions definition, so every job takes a plain partition range."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from incremental_assets.assets.daily import attributes, daily_aggregates
from incremental_assets.assets.hourly import HOURLY_ASSETS
from incremental_assets.partitions import daily_partitions, hourly_partitions

hourly_job = define_asset_job(
    "hourly_job", selection=AssetSelection.assets(*HOURLY_ASSETS), partitions_def=hourly_partitions,
    description="The load-hour assets for a range of closed load hours (one Spark job).")
daily_job = define_asset_job(
    "daily_job", selection=AssetSelection.assets(daily_aggregates), partitions_def=daily_partitions,
    description="daily_aggregates for a range of event days, each rebuilt whole.")
attributes_job = define_asset_job(
    "attributes_job", selection=AssetSelection.assets(attributes),
    description="attributes, dropped and recomputed from daily_aggregates.")

JOBS = [hourly_job, daily_job, attributes_job]
