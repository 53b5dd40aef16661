"""Plans that read the tables: an erasure's (what erasing some ids would do, found by searching
the tables with Spark), and `apply`'s check that a recorded plan still describes what would run.
Kept apart from `plans` so that the sensors, which make due plans, import no table search."""

from __future__ import annotations

from datetime import datetime, timezone

from incremental_assets.operator.forget import Found, find
from incremental_assets.operator.plans import PlanRefused, _due_reasons, make_plan, plan_of, recorded_plan
from incremental_assets.planning.plans import ERASED_HOUR, FORGET, Plan, PlannedErasure, why_plan_moved
from incremental_assets.settings import Settings
from incremental_assets.state.progress import current_snapshot, plan_load_hours
from incremental_assets.transforms.erasure import ErasedIds
from resources.manifest import ManifestStore, abandoned_lock_check
from resources.tables import TableStore


def plan_erasure(settings: Settings, now: datetime, tables: TableStore, ids: ErasedIds, *, instance=None,
                 found: Found | None = None) -> Plan:
    """The plan of erasing `ids` (`forget`): what is due at `now`, and the processed load hours
    holding the ids run again (read without them), the event days of their sessions rebuilt, with
    the rows holding them per table (`found`, when the caller searched already). The ids are kept
    as their digests only."""
    now = now.astimezone(timezone.utc)
    found = found or find(settings, tables, ids)
    manifest = ManifestStore.of(settings).snapshot()
    snapshot = current_snapshot(settings, now)
    due = plan_load_hours(settings, now=now, manifest=manifest, snapshot=snapshot,
                          lock_released=abandoned_lock_check(instance, settings.max_lock_age_hours))
    reasons = _due_reasons(due)
    for hour in found.load_hours:
        reasons.setdefault(hour, ERASED_HOUR)
    digests = tuple(sorted((column, d) for column, values in ids.digests.items() for d in values))
    erasure = PlannedErasure(ids=digests, rows=tuple(sorted(found.rows.items())), sessions=found.sessions)
    return plan_of(settings, now, f"{FORGET} {len(digests)} id(s)", reasons, set(), manifest=manifest,
                 snapshot=snapshot, erasure=erasure, erased_days=set(found.event_days))


def erased_ids(plan: Plan) -> ErasedIds:
    """The ids an erasure's plan erases (as digests)."""
    if plan.erasure is None:
        raise ValueError(f"plan {plan.plan_id} is not an erasure's ({plan.trigger})")
    return ErasedIds.of(plan.erasure.ids)


def plan_to_apply(settings: Settings, plan_id: str, *, instance=None, tables: TableStore | None = None) -> Plan:
    """The recorded plan `plan_id`, planned again at its time: refused (PlanRefused, saying why)
    when the settings, the closure or a planned hour's source files moved since. An erasure's plan reads
    `tables`."""
    planned = recorded_plan(settings, plan_id)
    if planned.erasure is not None:
        if tables is None:
            raise ValueError(f"plan {plan_id} is an erasure's: planning it again reads the tables")
        current = plan_erasure(settings, planned.until, tables, erased_ids(planned), instance=instance)
    else:
        current = make_plan(settings, planned.until, restate=planned.restated_days, asset=planned.restated_asset,
                            instance=instance)
    moved = why_plan_moved(planned, current)
    if moved:
        raise PlanRefused(f"plan {plan_id} not applied: {moved}")
    return planned
