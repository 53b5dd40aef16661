"""Operator actions shared by the CLI and the Dagster manifest job: read-only views and
resolve/skip. Nothing here starts Spark."""

from __future__ import annotations

from datetime import datetime

from incremental_assets.planning.processing_manifest import ItemStatus
from incremental_assets.runs import HOURLY_MODELS, current_limits, incremental_manifest, manifest_for
from incremental_assets.settings import Settings

PROBLEM_STATUSES = (ItemStatus.LOCKED, ItemStatus.FAIL_LOCKED, ItemStatus.INVALID)


def describe_limits(settings: Settings, now: datetime) -> str:
    """The state and limits the next run would use, and every item that would stop it."""
    manifest = manifest_for(settings)
    limits = current_limits(settings, now, manifest)
    lines = [limits.describe()]
    progress = incremental_manifest(manifest)
    for model in HOURLY_MODELS:
        p = progress.get(model)
        lines.append(f"  {model}: loads {p.first_success:%Y-%m-%d %H:%M} .. {p.last_success:%Y-%m-%d %H:%M} "
                     f"processed; last run wrote {p.last_rows_written:,} rows ({p.last_limits})"
                     if p else f"  {model}: never run")
    problems = [s for s in manifest.states().values() if s.status in PROBLEM_STATUSES]
    if problems:
        lines.append(f"  {len(problems)} item(s) need attention:")
        lines += [f"    {_item_line(s)}" for s in sorted(problems, key=lambda s: s.item_id)]
    return "\n".join(lines)


def _item_line(state) -> str:
    last = state.last
    detail = ""
    if last is not None:
        reason = (last.payload or {}).get("reason")
        detail = f" by run {last.run_id} at {last.recorded_at:%Y-%m-%d %H:%M:%S}" if last.recorded_at else ""
        if reason:
            detail += f": {reason}"
    return f"{state.item_id}  {state.status.name}{detail}"


def list_items(settings: Settings, *, only_problems: bool = True, asset: str | None = None) -> str:
    states = manifest_for(settings).states()
    rows = [s for s in states.values()
            if (not only_problems or s.status in PROBLEM_STATUSES)
            and (asset is None or s.item_id.startswith(asset + "/"))]
    if not rows:
        return "no items need attention" if only_problems else "the manifest has no items"
    return "\n".join(_item_line(s) for s in sorted(rows, key=lambda s: s.item_id))


def show_item(settings: Settings, item: str) -> str:
    state = manifest_for(settings).states([item]).get(item)
    if state is None:
        raise ValueError(f"item {item!r} has no records in the manifest")
    lines = [f"{item}: {state.status.name}"]
    for r in state.records:
        when = f"{r.recorded_at:%Y-%m-%d %H:%M:%S}" if r.recorded_at else "?"
        lines.append(f"  {when}  {r.state.name:<10} {r.application:<28} run {r.run_id}"
                     + (f"  {r.payload}" if r.payload else ""))
    return "\n".join(lines)


def resolve_item(settings: Settings, item: str, *, note: str = "") -> str:
    record = manifest_for(settings).resolve(item, note=note)
    return f"{item}: resolved (record {record.record_id}); the next run processes it again"


def skip_item(settings: Settings, item: str, *, note: str = "") -> str:
    record = manifest_for(settings).skip(item, note=note)
    return f"{item}: skipped (record {record.record_id}); it will not be processed again"
