"""Watermarks per app (units, as in LinkedIn's watermarks): which app ids a load hour still needs, once its data
is processed for the others.

With `app_ids` set, the hour ledger records, beside what each hour was processed from, the app
ids its rows were processed for. An hour whose data did not change but whose app ids differ
from the declared ones *catches up*: a run scoped to the app ids it lacks (added to `app_ids`)
or holds and should not (removed) replaces those apps' rows of the hour alone; the other apps'
rows stay as they are. Catch-up runs come after the hours due for every app (the present
keeps its cadence) and, like a backfill, take at most `backfill_limit_days` a plan. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from incremental_assets.planning.hours import HOUR, hours_between
from incremental_assets.planning.reconcile import BRIDGED_GAP


def joined(app_ids: Collection[str]) -> str:
    """App ids as the ledger and run tags keep them: sorted, comma-joined."""
    return ",".join(sorted(app_ids))


def split(text: str | None) -> frozenset[str] | None:
    """`joined`'s inverse; None (a ledger row written without app ids: every app) stays None."""
    return None if text is None else frozenset(a for a in text.split(",") if a)


@dataclass(frozen=True)
class CatchUpRun:
    """One scoped run: load hours [start, end) for `app_ids` alone."""

    start: datetime
    end: datetime
    app_ids: tuple[str, ...]  # sorted
    added: tuple[str, ...]  # of app_ids, those declared (their rows are computed)
    removed: tuple[str, ...]  # of app_ids, those no longer declared (their rows are removed)

    def describe(self) -> str:
        parts = ([f"app(s) {', '.join(self.added)} added"] if self.added else []) + \
                ([f"app(s) {', '.join(self.removed)} removed"] if self.removed else [])
        return " and ".join(parts)


@dataclass(frozen=True)
class CatchUp:
    """The catch-up runs to do now, oldest first, and every hour that catches up (these runs'
    and those left for later plans, past backfill_limit_days)."""

    runs: list[CatchUpRun]
    apps_by_hour: Mapping[datetime, frozenset[str]] = field(default_factory=dict)
    declared: frozenset[str] = frozenset()
    processed: int = 0  # hours processed with data: those processed for the declared app ids are done
    deferred: int = 0  # of apps_by_hour, those past backfill_limit_days: in later plans
    blocked: Mapping[datetime, str] = field(default_factory=dict)  # of apps_by_hour: hour -> a fail-locked item

    @property
    def hours(self) -> int:
        return len(self.apps_by_hour)

    def progress(self) -> str:
        """How far the catch-up is ("41% done, 120 of 204 hours left")."""
        done = 1 - self.hours / self.processed if self.processed else 1.0
        return f"{done:.0%} done, {self.hours} of {self.processed} processed hour(s) left"

    def reason(self, hour: datetime) -> str:
        """Why `hour` catches up, in words ("app(s) mobile added")."""
        apps = sorted(self.apps_by_hour[hour])
        return CatchUpRun(hour, hour + HOUR, tuple(apps), tuple(a for a in apps if a in self.declared),
                          tuple(a for a in apps if a not in self.declared)).describe()


def apps_to_catch_up(processed_for: Mapping[datetime, frozenset[str]],
                     declared: frozenset[str]) -> dict[datetime, frozenset[str]]:
    """Per hour processed (with data, from its current files and rules) for the app ids
    `processed_for`: the app ids a scoped run must process, the declared ones it lacks and the
    ones it holds that are no longer declared. Hours processed for exactly `declared` are
    left out."""
    return {hour: (declared - apps) | (apps - declared) for hour, apps in processed_for.items() if apps != declared}


@dataclass(frozen=True)
class RecordedHour:
    """What the hour ledger recorded for a load hour when a run began."""

    fingerprint: str  # the source's fingerprint of the hour ("" processed empty)
    rules_digest: str | None
    version: int | None  # the source version it was read at
    app_ids: frozenset[str] | None  # the app ids its rows were processed for (None: every app)
    table_id: str | None = None  # the source's Delta table id it was read from (None: not recorded)


def catch_up_record(recorded: RecordedHour | None, fingerprint: str, version: int | None,
                    digest: str) -> tuple[str, int | None, str | None]:
    """(fingerprint, source version, rules digest) a catch-up run records for an hour it read
    with `fingerprint` at `version`. A catch-up replaces its own apps' rows alone: the other
    apps' rows are still those the ledger recorded, so it records what it read only when that is
    the same data under the same rules. Otherwise (rows landed, deleted or corrected since) it
    keeps the recorded values, and the hour stays due for every app; an hour never recorded is
    recorded as processed empty, due as well when it holds data."""
    if recorded is None:
        return ("", None, digest) if fingerprint else (fingerprint, version, digest)
    if recorded.fingerprint == fingerprint and recorded.rules_digest == digest:
        return fingerprint, version, digest
    return recorded.fingerprint, recorded.version, recorded.rules_digest


def catch_up_runs(processed_for: Mapping[datetime, frozenset[str]], declared: frozenset[str], *,
                  max_hours_per_run: int, backfill_limit_days: int,
                  not_bridged: Collection[datetime] = (),
                  fail_locked: Mapping[datetime, tuple[frozenset[str], str]] = {}) -> CatchUp:
    """The catch-up of the hours processed with data for the app ids `processed_for`: hours
    needing the same app ids (`apps_to_catch_up`) run together, over gaps shorter than
    BRIDGED_GAP of hours with nothing to do (none of `not_bridged`: hours holding data or due
    for every app), at most `max_hours_per_run` a run, and at most `backfill_limit_days` of
    hours from the oldest one now (the rest in later plans). An hour whose catch-up failed for
    some of its app ids (`fail_locked`: hour -> those app ids and a fail-locked item of theirs)
    waits, blocked, until the item is resolved; the other hours and apps go on."""
    apps_by_hour = apps_to_catch_up(processed_for, declared)
    blocked = {hour: item for hour, (apps, item) in fail_locked.items()
               if hour in apps_by_hour and apps & apps_by_hour[hour]}
    hours = sorted(h for h in apps_by_hour if h not in blocked)
    if not hours:
        return CatchUp(runs=[], apps_by_hour=apps_by_hour, declared=declared, processed=len(processed_for),
                       blocked=blocked)
    limit = hours[0] + timedelta(days=backfill_limit_days)
    now = [h for h in hours if h < limit]
    runs: list[CatchUpRun] = []
    not_bridged = set(not_bridged) | set(processed_for) | set(blocked)
    for hour in now:
        apps = tuple(sorted(apps_by_hour[hour]))
        last = runs[-1] if runs else None
        joins = last is not None and last.app_ids == apps and hour - last.start < max_hours_per_run * HOUR and (
            last.end == hour or (hour - last.end < BRIDGED_GAP
                                 and not not_bridged.intersection(hours_between(last.end, hour))))
        if joins:
            runs[-1] = CatchUpRun(last.start, hour + HOUR, apps, last.added, last.removed)
        else:
            runs.append(CatchUpRun(hour, hour + HOUR, apps, tuple(a for a in apps if a in declared),
                                   tuple(a for a in apps if a not in declared)))
    return CatchUp(runs=runs, apps_by_hour=apps_by_hour, declared=declared, processed=len(processed_for),
                   deferred=len(hours) - len(now), blocked=blocked)
