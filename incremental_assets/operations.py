"""The operator's views and actions, shared by the CLI and the Dagster admin job: the next
run's state and limits, manifest items, resolve and skip. Nothing here starts Spark."""

from datetime import datetime
from enum import Enum

from dagster import Config, Failure, OpExecutionContext, job, op

from incremental_assets.names import HOURLY_ASSETS, MANIFEST_ADMIN_JOB
from incremental_assets.planning.processing_manifest import ItemStatus, ManifestError
from incremental_assets.progress import incremental_manifest, plan_next_run
from incremental_assets.settings import Settings
from resources.manifest import ItemState, ManifestStore
from resources.warehouse import WarehouseResource

PROBLEM_STATUSES = (ItemStatus.LOCKED, ItemStatus.FAIL_LOCKED, ItemStatus.INVALID)


# -- views ----------------------------------------------------------------------------------

def describe_limits(settings: Settings, now: datetime) -> str:
    """The state and limits the next run would use, its hours, and every item that would stop it."""
    manifest = ManifestStore.of(settings).snapshot()
    plan = plan_next_run(settings, now, manifest)
    lines = [plan.limits.describe()]
    if plan.hours:
        first, last = plan.keys
        lines.append(f"  next run: load hours {first} .. {last} ({plan.reason})")
    else:
        lines.append(f"  next run: {'blocked' if plan.blocked else 'nothing to do'}: {plan.reason}")
    progress = incremental_manifest(manifest)
    for model in HOURLY_ASSETS:
        p = progress.get(model)
        lines.append(f"  {model}: loads {p.first_success:%Y-%m-%d %H:%M} .. {p.last_success:%Y-%m-%d %H:%M} "
                     f"processed; last run wrote {p.last_rows_written:,} rows ({p.last_limits})"
                     if p else f"  {model}: never run")
    problems = [s for s in manifest.states().values() if s.status in PROBLEM_STATUSES]
    if problems:
        lines.append(f"  {len(problems)} item(s) need attention:")
        lines += [f"    {_item_line(s)}" for s in sorted(problems, key=lambda s: s.item_id)]
    return "\n".join(lines)


def _item_line(state: ItemState) -> str:
    last = state.last
    detail = ""
    if last is not None:
        reason = (last.payload or {}).get("reason")
        detail = f" by run {last.run_id} at {last.recorded_at:%Y-%m-%d %H:%M:%S}" if last.recorded_at else ""
        if reason:
            detail += f": {reason}"
    return f"{state.item_id}  {state.status.name}{detail}"


def list_items(settings: Settings, *, only_problems: bool = True, asset: str | None = None) -> str:
    states = ManifestStore.of(settings).states()
    rows = [s for s in states.values()
            if (not only_problems or s.status in PROBLEM_STATUSES)
            and (asset is None or s.item_id.startswith(asset + "/"))]
    if not rows:
        return "no items need attention" if only_problems else "the manifest has no items"
    return "\n".join(_item_line(s) for s in sorted(rows, key=lambda s: s.item_id))


def show_item(settings: Settings, item: str) -> str:
    state = ManifestStore.of(settings).states([item]).get(item)
    if state is None:
        raise ValueError(f"item {item!r} has no records in the manifest")
    lines = [f"{item}: {state.status.name}"]
    for r in state.records:
        when = f"{r.recorded_at:%Y-%m-%d %H:%M:%S}" if r.recorded_at else "?"
        lines.append(f"  {when}  {r.state.name:<10} {r.application:<28} run {r.run_id}"
                     + (f"  {r.payload}" if r.payload else ""))
    return "\n".join(lines)


# -- actions --------------------------------------------------------------------------------

def resolve_item(settings: Settings, item: str, *, note: str = "") -> str:
    record = ManifestStore.of(settings).resolve(item, note=note)
    return f"{item}: resolved (record {record.record_id}); the next run processes it again"


def skip_item(settings: Settings, item: str, *, note: str = "") -> str:
    record = ManifestStore.of(settings).skip(item, note=note)
    return f"{item}: skipped (record {record.record_id}); it will not be processed again"


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
    act = resolve_item if config.action is ManifestAction.resolve else skip_item
    try:
        message = act(warehouse.settings, config.item, note=config.note)
    except ManifestError as exc:
        raise Failure(description=str(exc)) from None
    context.log.info(message)


@job(name=MANIFEST_ADMIN_JOB,
     description="Operator action on one processing-manifest item: config {action: resolve|skip, "
                 "item: '<asset>/<partition key>', note: 'why'}.")
def manifest_admin_job():
    manifest_admin()
