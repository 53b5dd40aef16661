"""The Dagster admin job over one processing-manifest item: the UI's `incremental-assets
manifest resolve|skip`."""

from enum import Enum

from dagster import Config, Failure, OpExecutionContext, job, op

from incremental_assets.names import MANIFEST_ADMIN_JOB
from incremental_assets.operator.operations import resolve_item, skip_item
from incremental_assets.planning.processing_manifest import ManifestError
from resources.warehouse import WarehouseResource


class ManifestAction(Enum):
    resolve = "resolve"
    skip = "skip"


class ManifestAdminConfig(Config):
    action: ManifestAction
    item: str  # e.g. base_events/2026-01-05-03:00
    note: str = ""


@op(description="Resolve (release a failed or abandoned item) or skip (a load hour: read as empty from now "
                "on, the next run undoing what a failed run wrote of it; another item: never processed again) one "
                "processing-manifest item, like `incremental-assets manifest resolve|skip`.")
def manifest_admin(context: OpExecutionContext, config: ManifestAdminConfig, warehouse: WarehouseResource) -> None:
    act = resolve_item if config.action is ManifestAction.resolve else skip_item
    try:
        message = act(warehouse.settings, config.item, note=config.note)
    except ManifestError as exc:
        raise Failure(description=str(exc)) from None
    context.log.info(message)


@job(name=MANIFEST_ADMIN_JOB,
     description="Operator action on one processing-manifest item: config {action: resolve|skip, "
                 "item: 'ASSET/PARTITION_KEY' (e.g. 'base_events/2026-01-05-09:00'), note: 'why'}.")
def manifest_admin_job():
    manifest_admin()
