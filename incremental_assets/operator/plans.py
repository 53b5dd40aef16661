"""`incremental-assets plan` and `apply`: the work a trigger will do, shown before it runs, and
run only as shown.

A plan is made from the source's Delta log, the ledgers and the manifest (no Spark; an erasure's
plan also reads the tables for the rows holding its ids): the load hours due now (or restated,
or holding erased ids), each with why and its rows, the event days rebuilt after them, each
with why, and an estimate of the seconds from the hourly step's recorded cost. It is recorded
under its id (`plans`, a small Delta table) so that `apply ID` can plan again, refuse when the
settings, the closure or a planned hour's source files moved, and otherwise run its hours alone
(`runner.apply_plan`). The hourly
sensor records the plan of the hours it finds due in the same way, and tags its run with its id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from dagster import AssetKey

from incremental_assets.names import DAILY_AGGREGATES, HOURLY_ASSETS, PLANS
from incremental_assets.partition_bounds import last_event_day
from incremental_assets.planning.estimates import (
    describe_duration,
    estimated_seconds,
    fit_step_cost,
    unknown_fixed_part,
)
from incremental_assets.planning.hours import HOUR, hour_key, hours_between
from incremental_assets.planning.plans import (
    DUE,
    RESTATE,
    SOURCE_ROWS,
    Plan,
    PlannedDay,
    PlannedErasure,
    PlannedHour,
    attribute_changes,
    hour_reasons,
    widened_days,
)
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import SourceSnapshot, rows_by_hour
from incremental_assets.state.day_ledger import DailyLedger, late_days, recorded_attribute_keys
from incremental_assets.state.progress import (
    LoadHoursPlan,
    backfill_hours,
    current_snapshot,
    plan_load_hours,
    recent_step_samples,
)
from resources.manifest import ManifestStore, abandoned_lock_check
from resources.tables import append_arrow, read_delta_arrow

# The assets a restatement can start from: a load-hour asset (the four are one step: the load
# hours, then the days and attributes after them) or daily_aggregates (event days, then attributes).
RESTATABLE = (*HOURLY_ASSETS, DAILY_AGGREGATES)

# Settings that change how runs are operated, not what they compute: a plan stays valid across them.
OPERATIONAL_SETTINGS = frozenset({
    "auto_resolve_failures", "automation_running", "asset_owners", "sensor_interval_seconds", "max_lock_age_hours",
    "checkpoint_values_max", "maintenance_recent_days", "vacuum_retention_hours", "vacuum_min_retention_hours"})

PLANS_SCHEMA = pa.schema([
    ("plan_id", pa.string()),
    ("plan", pa.string()),  # the plan as JSON (`as_json`)
    ("recorded_at", pa.timestamp("us", tz="UTC")),
])


class PlanRefused(RuntimeError):
    """`apply` of a plan that no longer describes what would run."""


def settings_digest(settings: Settings) -> str:
    """A digest of every setting that shapes the tables, and of the declared attributes' file."""
    values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)
              if f.name not in OPERATIONAL_SETTINGS}
    if settings.attributes_file and Path(settings.attributes_file).is_file():
        values["attributes_file_text"] = Path(settings.attributes_file).read_text()
    return hashlib.sha256(json.dumps(values, default=str, sort_keys=True).encode()).hexdigest()[:16]


def make_plan(settings: Settings, now: datetime, *, restate: tuple[date, date] | None = None,
              asset: str | None = None, instance=None) -> Plan:
    """The plan of what reconciliation finds due at `now`, or of a restatement `restate`
    (first, last): of load days (the hours, their rows, the days after them, the cost), or, with
    `asset` daily_aggregates, of those event days alone (then attributes for their users)."""
    if asset is not None and asset not in RESTATABLE:
        raise ValueError(f"--asset {asset!r}: a restatement starts from one of {', '.join(RESTATABLE)} (a load-hour "
                         f"asset restates the load hours and everything after them; {DAILY_AGGREGATES}, the event "
                         "days alone)")
    if asset is not None and restate is None:
        raise ValueError("--asset restates an asset: give the days with --restate FIRST LAST")
    now = now.astimezone(timezone.utc)
    manifest = ManifestStore.of(settings).snapshot()
    snapshot = current_snapshot(settings, now)
    if restate is None:
        due = plan_load_hours(settings, now=now, manifest=manifest, snapshot=snapshot,
                              lock_released=abandoned_lock_check(instance, settings.max_lock_age_hours))
        return due_plan(settings, now, manifest=manifest, snapshot=snapshot, due=due)
    first, last = restate
    if last < first:
        raise ValueError(f"restate: the last day {last} is before the first {first}")
    last_day = last_event_day(settings, now)
    requested = {first + timedelta(days=i) for i in range((last - first).days + 1)
                 if settings.start_date.date() <= first + timedelta(days=i) <= last_day}
    if asset == DAILY_AGGREGATES:
        return plan_of(settings, now, f"{RESTATE} {first}..{last} {asset}", {}, requested, manifest=manifest,
                     snapshot=snapshot)
    reasons = hour_reasons(new=(), changed=(), removed=(), lookback=(), other_rules=(),
                           restated=hours_between(*backfill_hours(settings, first, last, now)))
    return plan_of(settings, now, f"{RESTATE} {first}..{last}", reasons, requested, manifest=manifest,
                   snapshot=snapshot)


def due_plan(settings: Settings, now: datetime, *, manifest: ManifestStore, snapshot: SourceSnapshot | None,
             due: LoadHoursPlan) -> Plan:
    """The plan of the hours reconciliation found due (`due`, from this manifest and snapshot):
    `incremental-assets plan`'s, and the hourly sensor's for the runs it launches. Hours that
    catch up for some app ids say which ("app(s) mobile added")."""
    return plan_of(settings, now, DUE, _due_reasons(due), set(), manifest=manifest, snapshot=snapshot)


def _due_reasons(due: LoadHoursPlan) -> dict[datetime, str]:
    hours = due.hours
    reasons = hour_reasons(new=hours.new, changed=hours.changed, removed=hours.removed, lookback=hours.lookback,
                           other_rules=set(hours.due) & due.under_other_rules)
    for hour in due.catch_up.apps_by_hour:
        if hour not in due.catch_up.blocked:
            reasons.setdefault(hour, due.catch_up.reason(hour))
    return reasons


def plan_of(settings: Settings, now: datetime, trigger: str, reasons: dict[datetime, str], requested: set[date], *,
          manifest: ManifestStore, snapshot: SourceSnapshot | None, erasure: PlannedErasure | None = None,
          erased_days: set[date] = frozenset()) -> Plan:
    rows = None if snapshot is None else rows_by_hour(snapshot.path, snapshot.version, reasons)
    hours = tuple(PlannedHour(hour, reasons[hour], None if rows is None else rows[hour],
                              None if snapshot is None else snapshot.fingerprints.get(hour, ""))
                  for hour in sorted(reasons))
    daily = DailyLedger(settings)
    late = late_days(settings, now, daily)[0]
    widened = widened_days(reasons, daily.days_loaded_by_hour(reasons), set(late.days), requested, erased_days)
    # A day with no daily partition yet cannot be rebuilt: it waits (rebuilt by a later run).
    last_day = last_event_day(settings, now)
    days = tuple(d for d in widened if d.day <= last_day)
    waiting = tuple(sorted(set(late.waiting) | {d.day for d in widened if d.day > last_day}))
    cost = fit_step_cost(recent_step_samples(manifest))
    runs = _runs(sorted(reasons), settings.max_hours_per_run)
    planned_rows = None if rows is None else sum(rows.values())
    estimate = None if cost is None else estimated_seconds(cost, hours=len(hours), rows=planned_rows, runs=runs)
    note = None if cost is None else unknown_fixed_part(cost, hours=len(hours), runs=runs)
    attributes = attribute_changes(recorded_attribute_keys(settings), {d.key for d in settings.declared_attributes()})
    return Plan(trigger=trigger, until=now, source_version=None if snapshot is None else snapshot.version,
                settings_digest=settings_digest(settings), hours=hours, days=days, runs=runs,
                estimate_seconds=estimate, attributes=attributes, estimate_note=note, erasure=erasure,
                waiting=waiting)


def _runs(hours: list[datetime], max_hours_per_run: int) -> int:
    """Hourly runs for `hours`: one per contiguous stretch, cut at max_hours_per_run."""
    runs, start, previous = 0, None, None
    for hour in hours:
        if previous is None or hour != previous + HOUR or hour - start >= max_hours_per_run * HOUR:
            runs, start = runs + 1, hour
        previous = hour
    return runs


# Days listed by `describe` before the rest are summed up (`full` lists them all).
DAYS_SHOWN = 12


def describe(plan: Plan, *, full: bool = False, apply_hint: bool = True) -> str:
    """The plan in words: its id, what it depends on, every hour and day with why, the cost,
    the declared attributes recomputed."""
    lines = [f"plan {plan.plan_id}: {plan.trigger} at {plan.until:%Y-%m-%d %H:%M} UTC; source version "
             f"{plan.source_version}, settings {plan.settings_digest}"]
    if plan.erasure:
        lines += _erasure(plan.erasure)
    elif not plan.hours and not plan.days and not plan.attributes:
        lines += ["  nothing to run", *_waiting(plan)]
        return "\n".join(lines)
    if plan.hours or plan.days:
        lines += _hours_and_days(plan, full)
    lines += _waiting(plan)
    if plan.attributes:
        lines.append("  attributes: the declared attributes changed")
        lines += [f"    {change}" for change in plan.attributes]
    if apply_hint:
        lines.append(f"  apply it: incremental-assets apply {plan.plan_id}")
    return "\n".join(lines)


def _waiting(plan: Plan) -> list[str]:
    if not plan.waiting:
        return []
    return [f"  daily_aggregates waits for event day(s) {', '.join(map(str, plan.waiting))}: no daily partition "
            "exists for them yet (rebuilt by a run once it does)"]


def _erasure(erasure: PlannedErasure) -> list[str]:
    rows = dict(erasure.rows)
    in_tables = {name: n for name, n in rows.items() if name != SOURCE_ROWS and n}
    return [f"  erasure of {len(erasure.ids)} id(s), kept as SHA-256 digests only: "
            f"{sum(in_tables.values())} row(s) in the warehouse's tables to remove"
            + (f" ({', '.join(f'{name}: {n}' for name, n in sorted(in_tables.items()))})" if in_tables else ""),
            f"    {rows.get(SOURCE_ROWS, 0)} row(s) in the source, left there (its loader's to erase); every run "
            "reads it without them",
            f"    {erasure.sessions} session(s) derived again without their rows; attributes recomputed for "
            "the users whose rows of the days rebuilt changed, the erased users' rows removed"]


def _hours_and_days(plan: Plan, full: bool) -> list[str]:
    lines = _hours(plan, full) if plan.hours else ["  hourly assets: no load hour"]
    lines.append(f"  daily_aggregates: {len(plan.days)} event day(s), then attributes for their users")
    shown = (plan.days if full or len(plan.days) <= DAYS_SHOWN
             else plan.days[:DAYS_SHOWN // 2] + plan.days[-DAYS_SHOWN // 2:])
    lines += [f"    {d.day}  {d.reason}" for d in shown[:DAYS_SHOWN // 2]]
    if len(shown) < len(plan.days):
        lines.append(f"    ... {len(plan.days) - len(shown)} more (--full lists every day and hour)")
    lines += [f"    {d.day}  {d.reason}" for d in shown[DAYS_SHOWN // 2:]]
    return lines


def _hours(plan: Plan, full: bool) -> list[str]:
    rows = "rows unknown (a Parquet source has no statistics)" if plan.rows is None else f"{plan.rows} source row(s)"
    lines: list[str] = []
    cost = ("no hourly step recorded yet to estimate from" if plan.estimate_seconds is None
            else describe_duration(plan.estimate_seconds) + " at the hourly step's recorded cost"
            + (f" ({plan.estimate_note})" if plan.estimate_note else ""))
    lines.append(f"  hourly assets: {len(plan.hours)} load hour(s), {hour_key(plan.hours[0].hour)} .. "
                 f"{hour_key(plan.hours[-1].hour)}, {rows}, in {plan.runs} run(s); {cost}")
    by_reason: dict[str, list[PlannedHour]] = {}
    for hour in plan.hours:
        by_reason.setdefault(hour.reason, []).append(hour)
    for reason, hours in by_reason.items():
        counted = "" if any(h.rows is None for h in hours) else f", {sum(h.rows for h in hours)} row(s)"
        lines.append(f"    {reason}: {len(hours)} hour(s) from {hour_key(hours[0].hour)}{counted}")
    if full:
        lines += [f"      {hour_key(h.hour)}  {h.reason}" + ("" if h.rows is None else f"  {h.rows} row(s)")
                  for h in plan.hours]
    return lines


def as_json(plan: Plan) -> str:
    return json.dumps({
        "trigger": plan.trigger, "until": plan.until.isoformat(), "source_version": plan.source_version,
        "settings_digest": plan.settings_digest, "runs": plan.runs, "estimate_seconds": plan.estimate_seconds,
        "estimate_note": plan.estimate_note,
        "hours": [[h.hour.isoformat(), h.reason, h.rows, h.fingerprint] for h in plan.hours],
        "days": [[d.day.isoformat(), d.reason] for d in plan.days], "attributes": list(plan.attributes),
        "waiting": [d.isoformat() for d in plan.waiting],
        "erasure": None if plan.erasure is None else [plan.erasure.ids, plan.erasure.rows, plan.erasure.sessions]},
        sort_keys=True)


def from_json(text: str) -> Plan:
    data = json.loads(text)
    erasure = data.get("erasure")
    return Plan(trigger=data["trigger"], until=datetime.fromisoformat(data["until"]),
                source_version=data["source_version"], settings_digest=data["settings_digest"],
                hours=tuple(PlannedHour(datetime.fromisoformat(h[0]), *h[1:]) for h in data["hours"]),
                days=tuple(PlannedDay(date.fromisoformat(d), reason) for d, reason in data["days"]),
                runs=data["runs"], estimate_seconds=data["estimate_seconds"],
                attributes=tuple(data.get("attributes", ())), estimate_note=data.get("estimate_note"),
                waiting=tuple(date.fromisoformat(d) for d in data.get("waiting", ())),
                erasure=None if erasure is None else PlannedErasure(
                    tuple(map(tuple, erasure[0])), tuple(map(tuple, erasure[1])), erasure[2]))


def record_plan(settings: Settings, plan: Plan, now: datetime) -> None:
    row = {"plan_id": plan.plan_id, "plan": as_json(plan), "recorded_at": now}
    append_arrow(settings.table_path(PLANS), pa.Table.from_pylist([row], schema=PLANS_SCHEMA))


# The metadata key of the plan itself on an observation of the `plans` asset.
PLAN_JSON = "plan_json"
# Observations of `plans` searched for a run's plan, newest first: it was made just before the run.
OBSERVED_PLANS_SEARCHED = 200


def record_observed_plan(settings: Settings, instance, plan_id: str) -> Plan | None:
    """Record plan `plan_id` from its observation on the `plans` asset unless it is recorded
    already: the hourly sensor only shows the plan its run applies (a preview of its tick writes
    nothing), and the run records it when it starts. None: no observation holds it."""
    if plan_id in recorded_plan_ids(settings):
        return None
    for record in instance.fetch_observations(AssetKey(PLANS), limit=OBSERVED_PLANS_SEARCHED).records:
        metadata = record.asset_observation.metadata if record.asset_observation else {}
        if PLAN_JSON in metadata and metadata.get("plan_id") and metadata["plan_id"].value == plan_id:
            plan = from_json(json.dumps(metadata[PLAN_JSON].value))
            record_plan(settings, plan, datetime.fromtimestamp(record.timestamp, timezone.utc))
            return plan
    return None


def recorded_plan_ids(settings: Settings) -> set[str]:
    table = read_delta_arrow(settings.table_path(PLANS))
    return set() if table is None else set(table.column("plan_id").to_pylist())


def recorded_plan(settings: Settings, plan_id: str) -> Plan:
    table = read_delta_arrow(settings.table_path(PLANS))
    for row in [] if table is None else table.to_pylist():
        if row["plan_id"] == plan_id:
            return from_json(row["plan"])
    raise ValueError(f"no plan {plan_id!r} is recorded in {settings.table_path(PLANS)}: "
                     "make one with `incremental-assets plan`")
