"""The operator's views and actions, shared by the CLI and the Dagster admin job
(automation/manifest_admin.py): the next run's state and limits, manifest items, resolve and
skip. Nothing here starts Spark."""

from datetime import datetime, time, timezone

from incremental_assets.names import ATTRIBUTES, DAILY_AGGREGATES, HOURLY_ASSETS
from incremental_assets.planning.estimates import describe_duration, estimated_seconds, fit_step_cost, runs_for
from incremental_assets.planning.hours import parse_hour_key
from incremental_assets.planning.late_days import describe_waiting
from incremental_assets.planning.processing_manifest import PROBLEM_STATUSES, ItemStatus, ManifestError, State
from incremental_assets.settings import Settings
from incremental_assets.state.day_ledger import (
    DailyLedger,
    declared_attributes_changed,
    late_days,
    recorded_attribute_keys,
    users_queued,
)
from incremental_assets.state.erasure_requests import open_requests, request_records
from incremental_assets.state.hour_ledger import processed_hours
from incremental_assets.state.progress import fail_locked_days, plan_next_run, recent_step_samples
from incremental_assets.state.skipped_hours import record_skips
from resources.manifest import ItemState, ManifestStore
from resources.manifest_items import item_id, split_item_id, unit_of

# -- views ----------------------------------------------------------------------------------

def describe_limits(settings: Settings, now: datetime) -> str:
    """What the next run would do and leave (gaps, changed hours, blocked hours), what has been
    processed, and every item that needs an operator."""
    manifest = ManifestStore.of(settings).snapshot()
    plan = plan_next_run(settings, now, manifest)
    if plan.ranges:
        start, end = plan.ranges[0][0], plan.ranges[-1][1]
        lines = [plan.limits(start, end).describe(), f"  next run: {plan.describe()}; {plan.reason()}"]
    else:
        lines = [f"{plan.state.name.replace('_', ' ').capitalize()}: nothing to process now",
                 f"  next run: {plan.describe()}"]
    lines.append(f"  {_due_work(settings, plan, manifest)}")
    if plan.before_start is not None:
        lines.append(f"  {plan.before_start.describe()}")
    processed = processed_hours(settings)
    if processed:
        with_data = sorted(h for h, p in processed.items() if p.fingerprint)
        last = plan.hours.last_success
        lines.append(f"  processed: {len(with_data)} load hour(s) with data"
                     + (f", {with_data[0]:%Y-%m-%d %H:%M} .. {with_data[-1]:%Y-%m-%d %H:%M}" if with_data else "")
                     + (f"; every load hour before {last:%Y-%m-%d %H:%M} is done" if last else ""))
    else:
        lines.append("  processed: nothing yet")
    lines += _each_asset(settings, plan, manifest, now)
    erasures = request_records(settings)
    if erasures:
        requests, still_open = {r.request_id for r in erasures}, {r.request_id for r in open_requests(erasures)}
        lines.append(f"  erasures: {len(requests)} request(s), {len(requests) - len(still_open)} completed"
                     + (f"; open: {', '.join(sorted(still_open))} (the next runs remove their rows; `forget` the "
                        "same ids again to record completion)" if still_open else ""))
    problems = [s for s in manifest.unsettled_states().values() if s.status in PROBLEM_STATUSES]
    if problems:
        lines.append(f"  {len(problems)} item(s) need attention:")
        lines += [f"    {_item_line(s)}" for s in sorted(problems, key=lambda s: s.item_id)]
    return "\n".join(lines)


def _due_work(settings: Settings, plan, manifest: ManifestStore) -> str:
    """The load hours due, why, and how long they should take at the hourly step's recorded cost."""
    due = set(plan.hours.due) | set(plan.hours.deferred)
    if not due:
        return "due: nothing"
    other_rules = due & plan.under_other_rules
    reasons = [(other_rules, "processed under other rules (a settings change)"), (plan.hours.new, "new"),
               (set(plan.hours.changed) - other_rules, "whose data changed"),
               (plan.hours.removed, "whose data is gone")]
    why = ", ".join(f"{len(hours)} {reason}" for hours, reason in reasons if hours) or "look-back"
    cost = fit_step_cost(recent_step_samples(manifest))
    seconds = None if cost is None else estimated_seconds(
        cost, hours=len(due), rows=None, runs=runs_for(len(due), settings.max_hours_per_run))
    estimate = (f"{describe_duration(seconds)} at the hourly "
                f"step's recorded cost ({cost.describe()})" if cost else "no hourly step recorded yet to estimate from")
    return f"due: {len(due)} load hour(s) ({why}); {estimate}" + _catching_up(settings, plan, cost)


def _each_asset(settings: Settings, plan, manifest: ManifestStore, now: datetime) -> list[str]:
    """Where each asset stands by its own record, so that none waits for another (Snowplow's
    per-model limits): the hourly step's processed prefix (its four assets are one step), the
    loads whose filtered rows daily_aggregates has aggregated (or holds pending) and the days it
    has to rebuild, and what attributes has left to take."""
    done = plan.hours.last_success
    due = len(set(plan.hours.due) | set(plan.hours.deferred))
    lines = ["  each asset's own progress (none waits for another):",
             f"    {', '.join(HOURLY_ASSETS)} (one step): "
             + (f"every load before {done:%Y-%m-%d %H:%M} processed" if done else "nothing processed yet")
             + (f"; {due} load hour(s) due" if due else "; nothing due")]
    ledger = DailyLedger(settings)
    late = late_days(settings, now, ledger)[0]
    days = late.days
    open_load_days = sorted({load_day for _, load_day in ledger.unaccounted})
    daily = "nothing to aggregate yet" if done is None else (
        "the filtered rows of every load before "
        f"{min([done, *(datetime.combine(d, time(), timezone.utc) for d in open_load_days[:1])]):%Y-%m-%d %H:%M} "
        "aggregated or pending")
    if days:
        blocked = fail_locked_days(settings, days)
        daily += f"; {len(days)} event day(s) to rebuild" + (
            f", {len(blocked)} of them fail-locked (first: {min(blocked.values())}), waiting alone" if blocked else "")
    if late.waiting:
        daily += f"; {describe_waiting(late.waiting)}"
    lines.append(f"    {DAILY_AGGREGATES}: {daily}")
    lines.append(f"    {ATTRIBUTES}: {_attributes_progress(settings, manifest)}")
    return lines


def _attributes_progress(settings: Settings, manifest: ManifestStore) -> str:
    states = [s for item, s in manifest.unsettled_states().items() if split_item_id(item)[0] == ATTRIBUTES]
    finished = [r.recorded_at for r in manifest.records() if split_item_id(r.item_id)[0] == ATTRIBUTES
                and r.state is State.PROCESSED and r.recorded_at]
    if recorded_attribute_keys(settings) is None:
        text = "never computed"
    else:
        text = f"last computed at {max(finished):%Y-%m-%d %H:%M}" if finished else "computed"
        waiting = [why for why, yes in (("users queued by rebuilt days", users_queued(settings)),
                                        ("the declared attributes changed", declared_attributes_changed(settings)))
                   if yes]
        text += f"; next run: {', '.join(waiting)}" if waiting else "; nothing queued"
    locked = [s.item_id for s in states if s.status is ItemStatus.FAIL_LOCKED]
    return text + (f"; fail-locked ({locked[0]}), waiting alone" if locked else "")


def _catching_up(settings: Settings, plan, cost) -> str:
    """The app ids catching up, how far, and how long the rest should take (at most the rate of
    runs of every app: a catch-up run reads its apps' rows alone)."""
    catch_up = plan.catch_up
    if not catch_up.hours:
        return ""
    run = catch_up.runs[0] if catch_up.runs else None
    what = run.describe() if run else "app ids"
    left = "" if cost is None else ", about " + describe_duration(estimated_seconds(
        cost, hours=catch_up.hours, rows=None, runs=runs_for(catch_up.hours, settings.max_hours_per_run))
    ).removeprefix("about ") + " at most at the recorded rates"
    return f"\n  catching up {what}: {catch_up.progress()}{left}"


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
    manifest = ManifestStore.of(settings)
    states = manifest.unsettled_states() if only_problems else manifest.states()
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

def _step_items(item: str) -> list[str]:
    """An item and the items materialized with it by the same step: one load hour's four hourly
    assets are claimed, failed, resolved and skipped together."""
    asset, key, unit = unit_of(item)
    if asset in HOURLY_ASSETS:
        return [item] + [item_id(other, key, unit) for other in HOURLY_ASSETS if other != asset]
    return [item]


def resolve_item(settings: Settings, item: str, *, note: str = "") -> str:
    records = ManifestStore.of(settings).resolve(_step_items(item), note=note)
    others = f" (and {len(records) - 1} item(s) of the same step)" if len(records) > 1 else ""
    return f"{item}: resolved{others}; the next run processes it again"


def skip_item(settings: Settings, item: str, *, note: str = "", now: datetime | None = None) -> str:
    """A daily or attributes item: SKIPPED, never processed again. A load hour: its rows are
    left out for good (`skipped_hours`), its failure is resolved, and the next run processes it
    as empty, undoing what a failed run wrote of it (the manifest records that run's PROCESSED)."""
    asset, key, unit = unit_of(item)
    if unit:
        raise ManifestError(f"{item} is the catch-up of app(s) {unit} for one load hour: resolve it (the catch-up "
                            f"runs again), or take the app ids out of app_ids; skipping applies to a load hour's "
                            f"data, `{asset}/{key}`")
    items = _step_items(item)
    others = f" (and {len(items) - 1} item(s) of the same step)" if len(items) > 1 else ""
    manifest = ManifestStore.of(settings)
    if asset not in HOURLY_ASSETS:
        manifest.skip(items, note=note)
        return f"{item}: skipped{others}; it will not be processed again"
    record_skips(settings, [parse_hour_key(key)], note=note, now=now or datetime.now(timezone.utc))
    if any(state.status in (ItemStatus.FAIL_LOCKED, ItemStatus.LOCKED) for state in manifest.states(items).values()):
        manifest.resolve(items, note=f"skipped: {note}" if note else "skipped")
    return (f"{item}: skipped{others}; its rows are left out from now on, and the next run processes the hour "
            "as empty, undoing whatever a failed run wrote of it")
