"""Jobs: one per partitions definition, so every job takes a plain partition range; and the
operator's manifest job."""


from enum import Enum

from dagster import AssetSelection, Config, Failure, OpExecutionContext, define_asset_job, job, op

from incremental_assets.assets.daily import attributes, daily_aggregates
from incremental_assets.assets.hourly import HOURLY_ASSETS
from incremental_assets.checks import DAILY_INVARIANT
from incremental_assets.partitions import daily_partitions, hourly_partitions
from resources.warehouse import WarehouseResource

hourly_job = define_asset_job(
    "hourly_job", selection=AssetSelection.assets(*HOURLY_ASSETS), partitions_def=hourly_partitions,
    description="The load-hour assets for a range of closed load hours (one Spark job).")
# The every-day invariant (aggregated + pending = filtered) holds once all days of a late-days
# plan are rebuilt, so it runs with attributes (after them), not after each daily range.
daily_job = define_asset_job(
    "daily_job", selection=AssetSelection.assets(daily_aggregates) - AssetSelection.checks(DAILY_INVARIANT),
    partitions_def=daily_partitions,
    description="daily_aggregates for a range of event days, each rebuilt whole.")
attributes_job = define_asset_job(
    "attributes_job", selection=AssetSelection.assets(attributes) | AssetSelection.checks(DAILY_INVARIANT),
    description="attributes, dropped and recomputed from daily_aggregates; then the daily invariant check.")


class ManifestAction(Enum):
    resolve = "resolve"
    skip = "skip"


class ManifestAdminConfig(Config):
    action: ManifestAction
    item: str  # e.g. base_events/2026-01-05-03:00
    note: str = ""


@op(description="Resolve (release a failed or abandoned item) or skip (never process again) one "
                "processing-manifest item, like `incremental-assets manifest resolve|skip`.")
def manifest_admin(context: OpExecutionContext, config: ManifestAdminConfig, warehouse: WarehouseResource) -> None:
    from incremental_assets import ops
    from incremental_assets.planning.processing_manifest import ManifestError

    act = ops.resolve_item if config.action is ManifestAction.resolve else ops.skip_item
    try:
        message = act(warehouse.settings, config.item, note=config.note)
    except ManifestError as exc:
        raise Failure(description=str(exc)) from None
    context.log.info(message)


@job(description="Operator action on one processing-manifest item: config {action: resolve|skip, "
                 "item: '<asset>/<partition key>', note: 'why'}.")
def manifest_admin_job():
    manifest_admin()


JOBS = [hourly_job, daily_job, attributes_job, manifest_admin_job]
