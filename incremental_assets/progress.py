"""What the processing manifest says is done, and which load hours run next.

`next_load_hours` is the one rule for "which hours run next": the hourly sensor, `incremental-assets
run` and `incremental-assets limits` all call it. It reads the manifest (no Spark) and the
source's per-hour file fingerprints (`sources.load_hours`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Mapping, Sequence

from incremental_assets.names import HOURLY_ASSETS
from incremental_assets.partitions import (
    HOUR,
    floor_hour,
    hour_key,
    hour_keys,
    hourly_partitions,
    hours_between,
    parse_hour_key,
)
from incremental_assets.planning.processing_manifest import ItemStatus, Record, State
from incremental_assets.planning.run_limits import RunLimits, get_run_limits
from incremental_assets.planning.watermarks import effective_cutoff, windows_to_run
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import source_fingerprints
from resources.manifest import ManifestStore, abandoned_lock_check, split_item_id


@dataclass(frozen=True)
class ModelProgress:
    """One line of the incremental manifest, derived from the model's PROCESSED records."""

    model: str
    first_success: datetime  # start of the earliest load window processed
    last_success: datetime  # end of the latest load window processed: every load before it is done
    last_limits: str
    last_rows_written: int


def incremental_manifest(manifest: ManifestStore,
                         models: Sequence[str] = HOURLY_ASSETS) -> dict[str, ModelProgress]:
    progress: dict[str, ModelProgress] = {}
    for record in manifest.records():
        asset, _ = split_item_id(record.item_id)
        payload = record.payload or {}
        if asset not in models or record.state is not State.PROCESSED or "load_window_end" not in payload:
            continue
        start = datetime.fromisoformat(payload["load_window_start"])
        end = datetime.fromisoformat(payload["load_window_end"])
        known = progress.get(asset)
        if known is None or end >= known.last_success:
            progress[asset] = ModelProgress(asset, min(start, known.first_success) if known else start, end,
                                            payload.get("limits", ""), int(payload.get("rows_written", 0)))
        else:
            progress[asset] = ModelProgress(asset, min(start, known.first_success), known.last_success,
                                            known.last_limits, known.last_rows_written)
    return progress


def current_limits(settings: Settings, now: datetime, manifest: ManifestStore) -> RunLimits:
    """Seed 000's run limits from each hourly model's last success."""
    last_success = {model: p.last_success for model, p in incremental_manifest(manifest).items()}
    return get_run_limits(last_success, list(HOURLY_ASSETS),
                          start_date=settings.start_date, backfill_limit_days=settings.backfill_limit_days,
                          lookback_window_hours=settings.lookback_window_hours, now=now)


def hours_within(limits: RunLimits, *, partitions_start: datetime) -> tuple[datetime, datetime] | None:
    """The closed load hours a run with these limits processes, as [first hour, end)."""
    start = max(floor_hour(limits.lower_limit), floor_hour(partitions_start))
    end = floor_hour(limits.upper_limit)
    return (start, end) if start < end else None


@dataclass
class HourStates:
    """Each load hour's state across the hourly assets' manifest items."""

    processed: set[datetime] = field(default_factory=set)  # every hourly asset processed it last
    fail_locked: dict[datetime, str] = field(default_factory=dict)  # hour -> an item id
    locks: dict[datetime, Record] = field(default_factory=dict)  # hour -> an open PROCESSING record
    skipped: set[datetime] = field(default_factory=set)


def hour_states(manifest: ManifestStore) -> HourStates:
    states = HourStates()
    done: dict[datetime, int] = {}
    for item, state in manifest.states().items():
        asset, key = split_item_id(item)
        if asset not in HOURLY_ASSETS:
            continue
        hour = parse_hour_key(key)
        if state.status is ItemStatus.FAIL_LOCKED:
            states.fail_locked[hour] = item
        elif state.status is ItemStatus.LOCKED:
            states.locks[hour] = state.open_lock
        elif state.status is ItemStatus.SKIPPED:
            states.skipped.add(hour)
        elif state.last is not None and state.last.state is State.PROCESSED:
            done[hour] = done.get(hour, 0) + 1
    states.processed = {hour for hour, models in done.items() if models == len(HOURLY_ASSETS)}
    return states


@dataclass(frozen=True)
class LoadHoursPlan:
    """The load hours the next hourly run processes, or why none runs.

    `hours` is [start, end) or None. `blocked` says that hours would run but an item stops
    them (fail-locked, or locked by a run still working); otherwise None means nothing is due.
    `remembered` is what a caller that keeps state between plans (the sensor's cursor) keeps:
    the file fingerprint of every hour that may still be re-run within the grace period.
    """

    limits: RunLimits
    hours: tuple[datetime, datetime] | None
    reason: str
    span: tuple[datetime, datetime] | None = None  # the limits' closed hours
    new: tuple[datetime, ...] = ()
    changed: tuple[datetime, ...] = ()
    blocked: bool = False
    remembered: Mapping[str, str] = field(default_factory=dict)

    @property
    def keys(self) -> tuple[str, str]:
        return hour_keys(*self.hours)

    def describe(self) -> str:
        """The limits in words, and the hours when they differ from the limits' hours."""
        text = self.limits.describe()
        if self.hours and self.hours != self.span:
            first, last = self.keys
            text += f"; launched for load hours {first} .. {last}"
        return text


def next_load_hours(settings: Settings, *, now: datetime, manifest: ManifestStore,
                    source_fingerprints: Mapping[datetime, str] | None, partitions_start: datetime,
                    launched: Mapping[str, str], lock_released: Callable[[Record], str | None]) -> LoadHoursPlan:
    """The hours the next hourly run processes.

    An hour is due when the watermark rules (planning.watermarks) say so: it has data and no
    successful history, or it lies within the grace period of the latest processed hour. A
    due hour runs when it was never processed, or when its files changed since `launched`
    recorded them. The run covers the run limits' hours, widened to the due hours; hours past
    the limits' upper limit wait for a later run. Hours an operator skipped are walls: only
    hours after the last one are considered. `source_fingerprints` maps each closed load hour
    with source files to their fingerprint (None when the source has no Delta log: then every
    hour inside the limits counts as holding data).
    """
    limits = current_limits(settings, now, manifest)
    span = hours_within(limits, partitions_start=partitions_start)
    hours = hour_states(manifest)
    closed_end = floor_hour(now)
    last_processed_end = max(hours.processed) + HOUR if hours.processed else None
    cutoff = effective_cutoff(last_processed_end, start=limits.lower_limit, grace_period=settings.grace,
                              abstinent_period=settings.abstinent)
    # Only hours ending after the cut-off can be re-run; forget the files of older ones.
    remembered = {k: v for k, v in launched.items() if parse_hour_key(k) + HOUR > cutoff}
    earliest = max(floor_hour(min(limits.lower_limit, cutoff)), floor_hour(partitions_start))
    walls = [h for h in hours.skipped if earliest <= h < closed_end]
    if walls:
        earliest = max(walls) + HOUR
        span = (max(span[0], earliest), span[1]) if span and span[1] > earliest else None
    if source_fingerprints is None:  # no Delta log to read: the limits' hours may all hold data
        source_fingerprints = {h: "" for h in hours_between(*span)} if span else {}
    fingerprints = {h: f for h, f in source_fingerprints.items() if earliest <= h < closed_end}

    watermarks = {h: h + HOUR for h in hours.processed}
    due = sorted({floor_hour(start) for start, _ in windows_to_run(
        [(h, h + HOUR) for h in sorted(fingerprints)], watermarks,
        grace_period=settings.grace, abstinent_period=settings.abstinent)})
    new = [h for h in due if h not in hours.processed]
    changed = []
    for h in due:
        if h in hours.processed:
            # Processed outside this caller's memory (CLI, UI backfill): today's files are the baseline.
            seen = remembered.setdefault(hour_key(h), fingerprints[h])
            if seen != fingerprints[h]:
                changed.append(h)
    if not new and not changed:
        processed = (f"loads processed until {last_processed_end:%Y-%m-%d %H:%M}" if last_processed_end
                     else "nothing processed yet")
        return LoadHoursPlan(limits, None, f"no new data in a closed load hour ({processed})", span=span,
                             remembered=remembered)

    bounds = [span] if span else []
    bounds += [(h, h + HOUR) for h in changed]
    bounds += [(h, h + HOUR) for h in new if span is None or h < span[1]]
    start, end = min(b[0] for b in bounds), max(b[1] for b in bounds)
    first, last = hour_keys(start, end)
    plan = dict(limits=limits, span=span, new=tuple(new), changed=tuple(changed))

    if not settings.auto_resolve_failures:
        failed = sorted(item for h, item in hours.fail_locked.items() if start <= h < end)
        if failed:
            return LoadHoursPlan(**plan, hours=None, blocked=True, remembered=remembered, reason=(
                f"load hours {first} .. {last} have {len(failed)} fail-locked item(s), e.g. {failed[0]}: "
                "fix the cause, then `incremental-assets manifest resolve ITEM` (or run manifest_admin_job)"))
    for h, lock in sorted(hours.locks.items()):
        if start <= h < end and lock_released(lock) is None:
            return LoadHoursPlan(**plan, hours=None, blocked=True, remembered=remembered,
                                 reason=f"load hour {hour_key(h)} is locked by run {lock.run_id}; waiting for it")

    # After this run only hours ending after end + abstinent - grace can be re-run: remember
    # their files ("" = none yet), to see whether they change.
    for h in hours_between(start, end):
        if h + HOUR > end + settings.abstinent - settings.grace:
            remembered[hour_key(h)] = fingerprints.get(h, "")
    why = []
    if new:
        why.append(f"new data in {len(new)} hour(s) from {hour_key(new[0])}")
    if changed:
        why.append("changed within the grace period: " + ", ".join(hour_key(h) for h in changed))
    return LoadHoursPlan(**plan, hours=(start, end), reason="; ".join(why), remembered=remembered)



def plan_next_run(settings: Settings, now: datetime, manifest: ManifestStore, instance=None) -> LoadHoursPlan:
    """`next_load_hours` for a caller without a cursor (`incremental-assets run` and `limits`):
    the source read from its Delta log now, locks judged against `instance` (may be None)."""
    watched = source_fingerprints(settings.source, hourly_partitions.start, floor_hour(now))
    return next_load_hours(settings, now=now, manifest=manifest,
                           source_fingerprints=watched[1] if watched else None,
                           partitions_start=hourly_partitions.start, launched={},
                           lock_released=abandoned_lock_check(instance, settings.max_lock_age_hours))
