"""A plan: what one trigger will recompute, with its cost, under an id that `apply` checks.

A trigger is what reconciliation finds due at a time, a restatement of a range of load days, or
an erasure of users (what is due, and the processed hours holding their ids run again). Its
closure is the load hours the hourly runs will take, each with why, the source rows they hold,
and the event days the daily runs will rebuild after them, each with why. The id is a
digest of the source version, the settings and the closure. `apply` plans again and runs only
while the closure is the same and none of its hours changed in the source (a loader's commit
elsewhere leaves a plan valid), and then runs the planned hours alone, so what runs is what was
shown. Pure: the callers read the source's
log, the ledgers and the manifest (`incremental_assets.operator.plans`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime

from incremental_assets.names import ATTRIBUTES_JOB, DAILY_JOB, HOURLY_JOB
from incremental_assets.planning.hours import HOUR, contiguous_ranges, day_key, hour_key

DUE = "due"  # the trigger of what reconciliation finds due
RESTATE = "restate"  # the trigger of a restatement: "restate FIRST..LAST"
FORGET = "forget"  # the trigger of an erasure: "forget N id(s)"
ERASED_HOUR = "holds erased ids"  # the reason of a processed hour run again only for an erasure
SOURCE_ROWS = "source"  # an erasure's count of rows in the source, beside the tables' (the loader's to erase)


@dataclass(frozen=True)
class PlannedHour:
    hour: datetime
    reason: str  # new, changed, data gone, look-back, rules changed, restated
    rows: int | None  # source rows in the hour, from the Delta log's statistics (None: unknown)
    # The hour's source files as the plan saw them ("" without files; None: a plan recorded
    # before plans kept them, compared by the source's version instead).
    fingerprint: str | None = None


@dataclass(frozen=True)
class PlannedDay:
    day: date
    reason: str


@dataclass(frozen=True)
class PlannedErasure:
    """What an erasure removes: its ids (as SHA-256 digests, never the ids), the rows holding
    them per table and in the source ("source", left to its loader), the sessions derived again."""

    ids: tuple[tuple[str, str], ...]  # (id column, digest), sorted
    rows: tuple[tuple[str, int], ...]  # (table, rows), sorted
    sessions: int


@dataclass(frozen=True)
class Plan:
    trigger: str  # "due", "restate FIRST..LAST [ASSET]" or "forget N id(s)"
    until: datetime  # the time the plan is made for (runs never take a load hour past it)
    source_version: int | None  # None: a Parquet source (no log, no version)
    settings_digest: str
    hours: tuple[PlannedHour, ...]  # oldest first
    days: tuple[PlannedDay, ...]  # oldest first
    runs: int  # about: one per contiguous stretch of hours, cut at max_hours_per_run
    estimate_seconds: float | None  # None: no recorded step to estimate from
    attributes: tuple[str, ...] = ()  # declared attributes recomputed for every user, each with why
    estimate_note: str | None = None  # why the estimate may be off (`estimates.unknown_fixed_part`)
    erasure: PlannedErasure | None = None  # an erasure's ids and the rows holding them
    waiting: tuple[date, ...] = ()  # event days with rows and no daily partition yet: not rebuilt

    @property
    def plan_id(self) -> str:
        """A digest of what the plan depends on and does; the same inputs give the same id."""
        content = {
            "trigger": self.trigger,
            "until": self.until.isoformat(),
            "source_version": self.source_version,
            "settings": self.settings_digest,
            "hours": [[h.hour.isoformat(), h.reason] for h in self.hours],
            "days": [[d.day.isoformat(), d.reason] for d in self.days],
            **({"attributes": list(self.attributes)} if self.attributes else {}),
            **({"waiting": [d.isoformat() for d in self.waiting]} if self.waiting else {}),
            **({"erasure": [self.erasure.ids, self.erasure.rows, self.erasure.sessions]} if self.erasure else {}),
        }
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def restated_days(self) -> tuple[date, date] | None:
        """The days (first, last) a restatement restates (load days; event days when only
        daily_aggregates is restated); None for other work."""
        if not self.trigger.startswith(f"{RESTATE} "):
            return None
        first, last = self.trigger.removeprefix(f"{RESTATE} ").split(" ")[0].split("..")
        return date.fromisoformat(first), date.fromisoformat(last)

    @property
    def restated_asset(self) -> str | None:
        """The asset a restatement starts from ("restate FIRST..LAST ASSET"; None: the load
        hours, and everything after them)."""
        parts = self.trigger.split(" ")
        return parts[2] if self.trigger.startswith(f"{RESTATE} ") and len(parts) > 2 else None

    @property
    def rows(self) -> int | None:
        counts = [h.rows for h in self.hours]
        return None if any(n is None for n in counts) else sum(counts)


def why_plan_moved(planned: Plan, current: Plan) -> str | None:
    """Why `planned` can no longer be applied as shown (None: it can): the first of a settings
    change, a closure that changed (a run in between, a grace period over, rows landed in an hour
    not planned), a planned hour whose source files changed, or other days, attributes or rows
    of an erasure. A source commit that changes none of these leaves the plan valid."""
    if planned.settings_digest != current.settings_digest:
        return "the settings changed since the plan was made: plan again"
    then, now = {h.hour: h.reason for h in planned.hours}, {h.hour: h.reason for h in current.hours}
    if then != now:
        gone, added = sorted(set(then) - set(now)), sorted(set(now) - set(then))
        changed = sorted(h for h in set(then) & set(now) if then[h] != now[h])
        parts = [f"{len(hours)} load hour(s) {what}, first {hour_key(hours[0])}"
                 for hours, what in ((gone, "planned and no longer due"), (added, "due and not planned"),
                                     (changed, "due for another reason")) if hours]
        return f"the closure changed since the plan ({'; '.join(parts)}): plan again"
    moved_source = _source_moved(planned, current)
    if moved_source:
        return moved_source
    if planned.days != current.days:
        return "the event days to rebuild changed since the plan: plan again"
    if planned.attributes != current.attributes:
        return "the declared attributes to recompute changed since the plan: plan again"
    if planned.erasure != current.erasure:
        return "the rows holding the erased ids changed since the plan: plan again"
    return None


def _source_moved(planned: Plan, current: Plan) -> str | None:
    """Planned hours whose source files changed since the plan (same hours, same reasons); a
    plan without fingerprints refuses any source commit."""
    if any(h.fingerprint is None for h in planned.hours):
        if planned.source_version != current.source_version:
            return (f"source at version {current.source_version}, planned at {planned.source_version}: "
                    "plan again")
        return None
    now = {h.hour: h.fingerprint for h in current.hours}
    touched = [h.hour for h in planned.hours if now.get(h.hour) != h.fingerprint]
    if touched:
        return (f"{len(touched)} planned load hour(s) changed in the source since the plan (source at version "
                f"{current.source_version}, planned at {planned.source_version}), first {hour_key(touched[0])}: "
                "plan again")
    return None


def hour_reasons(*, new, changed, removed, lookback, other_rules, restated=(), erased=()) -> dict[datetime, str]:
    """Each hour's reason, the first that applies: restated, rules changed, data gone, new,
    changed, look-back, holds erased ids."""
    reasons: dict[datetime, str] = {}
    for hours, reason in ((restated, "restated"), (other_rules, "rules changed"), (removed, "data gone"),
                          (new, "new"), (changed, "changed"), (lookback, "look-back"), (erased, ERASED_HOUR)):
        for hour in hours:
            reasons.setdefault(hour, reason)
    return reasons


def widened_days(hours: dict[datetime, str], days_loaded: dict[datetime, set[date]], due_days: set[date],
                 requested: set[date] = frozenset(), erased_days: set[date] = frozenset()) -> tuple[PlannedDay, ...]:
    """The event days the daily runs rebuild after `hours`, each with why: days asked for, days
    already due (late rows waiting), the days an erasure takes rows from, the day of each load
    hour, and the days an hour's rows landed on when it last ran (late rows and sessions that
    cross midnight widen a day to those). An hour run again only for an erasure reads its other
    rows unchanged: it widens to no day of its own."""
    reasons: dict[date, str] = {}
    for day in sorted(requested):
        reasons[day] = "restated"
    for day in sorted(due_days):
        reasons.setdefault(day, "due now (late rows waiting or a day not yet rebuilt)")
    for day in sorted(erased_days):
        reasons.setdefault(day, "erasure: a session holding the erased ids has filtered rows on it")
    for hour in sorted(h for h, reason in hours.items() if reason != ERASED_HOUR):
        reasons.setdefault(hour.date(), f"load hour {hour_key(hour)} ({hours[hour]})")
        for day in sorted(days_loaded.get(hour, ())):
            reasons.setdefault(day, f"widened from load day {hour.date()}: rows of load hour {hour_key(hour)} "
                                    "landed on it when it last ran (late rows, sessions crossing midnight)")
    return tuple(PlannedDay(day, reasons[day]) for day in sorted(reasons))


def attribute_changes(recorded: set[str] | None, declared: set[str]) -> tuple[str, ...]:
    """The declared attributes (keys `name@version`) an attributes run recomputes for every
    user, and those it drops, each with why: added, changed (a new version), removed. None
    recorded (no attributes table yet): the first run computes them all, nothing to say."""
    if recorded is None:
        return ()
    old = {_attribute_name(k): k for k in recorded - declared}
    new = {_attribute_name(k): k for k in declared - recorded}
    lines = [f"{new[n]} changed from {old[n]}: recomputed for every user" for n in sorted(old.keys() & new.keys())]
    lines += [f"{new[n]} added: computed for every user" for n in sorted(new.keys() - old.keys())]
    lines += [f"{old[n]} removed: its column dropped" for n in sorted(old.keys() - new.keys())]
    return tuple(lines)


def _attribute_name(key: str) -> str:
    return key.rpartition("@")[0]


@dataclass(frozen=True)
class RunToLaunch:
    """One run of a plan launched from a job: an hourly range of load hours (hour keys) or a
    daily range of event days (day keys); first and last None for a run without partitions."""

    job: str
    first: str | None = None
    last: str | None = None


def runs_to_launch(plan: Plan, max_hours_per_run: int) -> list[RunToLaunch]:
    """The runs that start `plan` when a job applies it (they are launched for it, not run in
    its process): its load hours, a run per contiguous stretch cut at max_hours_per_run, oldest
    first; without load hours, its event days, a daily run per contiguous range; with neither,
    one attributes run when the declared attributes changed. The event days after load hours,
    and attributes after days, follow from the sensors that watch the ledgers and the runs."""
    if plan.hours:
        stretches: list[list[datetime]] = []
        for hour in (h.hour for h in plan.hours):
            stretch = stretches[-1] if stretches else None
            if stretch and hour == stretch[-1] + HOUR and len(stretch) < max_hours_per_run:
                stretch.append(hour)
            else:
                stretches.append([hour])
        return [RunToLaunch(HOURLY_JOB, hour_key(s[0]), hour_key(s[-1])) for s in stretches]
    if plan.days:
        return [RunToLaunch(DAILY_JOB, day_key(first), day_key(last))
                for first, last in contiguous_ranges(d.day for d in plan.days)]
    return [RunToLaunch(ATTRIBUTES_JOB)] if plan.attributes else []
