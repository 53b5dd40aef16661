"""What has been processed, and which load hours run next: the one rule for the hourly sensor,
`incremental-assets run` and `incremental-assets limits` (`plan_load_hours`).

It reconciles the source's per-hour fingerprints (`sources.load_hours`, from its Delta log)
with the ledger of what each hour was processed from (`processed_load_hours`, with the digest
of the rules it was processed under), leaving out the hours an operator skipped, fail-locked
hours and hours a live run holds (`planning.reconcile`). Nothing here starts Spark.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from incremental_assets.names import (
    APP_IDS_TAG,
    BASE_EVENTS,
    CATCH_UP_PRIORITY,
    DAILY_AGGREGATES,
    DAY_LEDGER,
    HOUR_LEDGER,
    HOURLY_ASSETS,
    PRIORITY_TAG,
)
from incremental_assets.partition_bounds import PARTITIONS_START, end_load_hour
from incremental_assets.planning.app_units import CatchUp, catch_up_runs, joined, split
from incremental_assets.planning.estimates import StepSample
from incremental_assets.planning.hours import (
    HOUR,
    floor_hour,
    hour_key,
    hour_keys,
    parse_day_key,
    parse_hour_key,
)
from incremental_assets.planning.processing_manifest import ItemStatus, Record, State
from incremental_assets.planning.reconcile import (
    HoursPlan,
    failed_hours_run_again,
    hours_to_run,
    skipped_hours_run_again,
)
from incremental_assets.planning.run_limits import RunLimits, RunState
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import SourceSnapshot, source_snapshot
from incremental_assets.state.hour_ledger import (
    app_ids_processed,
    fingerprint_under_rules,
    hours_under_other_rules,
    processed_hours,
    read_ledger,
    unchanged_by_maintenance,
)
from incremental_assets.state.skipped_hours import skipped_hours
from resources.manifest import ManifestStore, abandoned_lock_check
from resources.manifest_items import split_item_id, unit_of
from resources.tables import read_delta_arrow


@dataclass
class HourStates:
    """Load hours whose hourly items are not free: an operator skipped them, a run failed on
    them (fail-locked), or a run holds them (locked)."""

    fail_locked: dict[datetime, str] = field(default_factory=dict)  # hour -> an item id
    locks: dict[datetime, Record] = field(default_factory=dict)  # hour -> an open PROCESSING record
    skipped: set[datetime] = field(default_factory=set)
    resolved: set[datetime] = field(default_factory=set)  # failed, then resolved: not run since


def hour_states(manifest: ManifestStore) -> HourStates:
    states = HourStates()
    hourly = [(split_item_id(item), state) for item, state in manifest.unsettled_states().items()]
    # In the assets' order, so that an hour's first item (base_events') names it.
    hourly = sorted(((asset, key), state) for (asset, key), state in hourly if asset in HOURLY_ASSETS)
    hourly.sort(key=lambda entry: HOURLY_ASSETS.index(entry[0][0]))
    for (asset, key), state in hourly:
        hour = parse_hour_key(key)
        if state.status is ItemStatus.FAIL_LOCKED:
            states.fail_locked.setdefault(hour, state.item_id)
        elif state.status is ItemStatus.LOCKED:
            states.locks.setdefault(hour, state.open_lock)
        elif state.status is ItemStatus.SKIPPED:
            states.skipped.add(hour)
        elif state.last is not None and state.last.state is State.RESOLVED:
            states.resolved.add(hour)
    return states


def unit_fail_locks(manifest: ManifestStore) -> dict[datetime, tuple[frozenset[str], str]]:
    """The load hours whose catch-up (a run scoped to some app ids) failed: hour -> those app
    ids and a fail-locked item of theirs. Only their catch-up waits: the hour's own items, and
    so its runs for every app, are free."""
    locks: dict[datetime, tuple[frozenset[str], str]] = {}
    for item, state in sorted(manifest.unsettled_states().items()):
        asset, key, unit = unit_of(item)
        if unit and asset in HOURLY_ASSETS and state.status is ItemStatus.FAIL_LOCKED:
            locks.setdefault(parse_hour_key(key), (split(unit), item))
    return locks


def unit_items_fail_locked(manifest: ManifestStore, hours: Iterable[datetime]) -> list[str]:
    """The fail-locked items of catch-up runs (any app ids) of `hours`: a run of those hours for
    every app does what they were to do, so it resolves them."""
    hours = set(hours)
    return sorted(item for item, state in manifest.unsettled_states().items()
                  for asset, key, unit in [unit_of(item)]
                  if unit and asset in HOURLY_ASSETS and state.status is ItemStatus.FAIL_LOCKED
                  and parse_hour_key(key) in hours)


def fail_locked_days(settings: Settings, days: Iterable[date]) -> dict[date, str]:
    """Those of `days` whose daily_aggregates item a failed run left fail-locked: day -> item id.
    None with auto_resolve_failures (the claim of the next run resolves them). A daily run over
    such a day would fail at its claim: the day waits for an operator, the others go on."""
    if settings.auto_resolve_failures:
        return {}
    days = set(days)
    states = ManifestStore.of(settings).unsettled_states()
    return {day: item for item, state in states.items()
            for asset, key in [split_item_id(item)]
            if asset == DAILY_AGGREGATES and key and state.status is ItemStatus.FAIL_LOCKED
            for day in [parse_day_key(key)] if day in days}


def catch_up_tags(app_ids: tuple[str, ...] | None) -> dict[str, str]:
    """The tags of a catch-up run for `app_ids` (none for a run of every app): the app ids, and
    a lower priority than the runs of every app, so that a queue starts those first."""
    return {} if app_ids is None else {APP_IDS_TAG: joined(app_ids), PRIORITY_TAG: CATCH_UP_PRIORITY}


@dataclass(frozen=True)
class LoadHoursPlan:
    """The next hourly runs (`hours.ranges`, oldest first), and what stops or delays the others."""

    hours: HoursPlan
    state: RunState
    source_version: int | None
    blocked: dict[datetime, str]  # hour -> why an item stops it (fail-locked, locked by a live run)
    skipped: int  # hours an operator skipped
    before_start: BeforeStart | None = None  # what a start_date moved later left, removed by the next run
    catch_up: CatchUp = CatchUp(runs=[])  # hours processed for other app ids than declared (planning.app_units)
    under_other_rules: frozenset[datetime] = frozenset()  # processed hours whose rules digest is not today's

    @property
    def ranges(self) -> list[tuple[datetime, datetime]]:
        """The ranges of hours due for every app id (catch-up runs come after: `next_run`)."""
        return self.hours.ranges

    def next_run(self) -> tuple[datetime, datetime, tuple[str, ...] | None] | None:
        """The run to launch first: (start, end, app ids; None: every app). Hours due for
        every app first, the present's range before the others; then the catch-up runs."""
        if self.ranges:
            return (*self.hours.next_range(), None)
        if self.catch_up.runs:
            run = self.catch_up.runs[0]
            return run.start, run.end, run.app_ids
        return None

    def limits(self, start: datetime, end: datetime) -> RunLimits:
        return RunLimits(self.state, start, end)

    def reason(self) -> str:
        """Why these hours run, in words."""
        parts = []
        for name, hours in (("new data", self.hours.new), ("changed", self.hours.changed),
                            ("data gone", self.hours.removed), ("lookback", self.hours.lookback)):
            if hours:
                parts.append(f"{name} in {len(hours)} hour(s) from {hour_key(hours[0])}")
        if self.before_start is not None:
            parts.append(f"start_date moved later: {self.before_start.hours} load hour(s) before "
                         f"{hour_key(self.before_start.first_hour)} to remove")
        return "; ".join(parts)

    def describe(self) -> str:
        """What the plan does and leaves, in words (the CLI, `limits`, run tags)."""
        lines = []
        for start, end in self.ranges:
            first, last = hour_keys(start, end)
            lines.append(f"load hours {first} .. {last}")
        summary = "; ".join(lines) if lines else "no load hour to run"
        notes = []
        if self.hours.deferred:
            notes.append(f"{len(self.hours.deferred)} more hour(s) next (backfill_limit_days)")
        if self.hours.waiting:
            notes.append(f"{len(self.hours.waiting)} hour(s) wait for the grace or abstinent period")
        if self.blocked:
            notes.append(f"{len(self.blocked)} hour(s) blocked: {self.blocked[min(self.blocked)]}")
        if self.skipped:
            notes.append(f"{self.skipped} hour(s) skipped by an operator")
        if self.catch_up.runs:
            run = self.catch_up.runs[0]
            notes.append(f"catching up {run.describe()} from {hour_key(run.start)}: {self.catch_up.progress()}"
                         + (f", {self.catch_up.deferred} of them in later plans (backfill_limit_days)"
                            if self.catch_up.deferred else ""))
        if self.catch_up.blocked:
            first = min(self.catch_up.blocked)
            notes.append(f"{len(self.catch_up.blocked)} catch-up hour(s) blocked, for their app ids alone: "
                         f"{self.catch_up.blocked[first]} is fail-locked: fix the cause, then `incremental-assets "
                         f"manifest resolve {self.catch_up.blocked[first]}`")
        return summary + (f" ({'; '.join(notes)})" if notes else "")


def first_load_hour(settings: Settings) -> datetime:
    """The first load hour processed: start_date's hour, but never before the hourly partitions
    start (they are fixed when the code location loads)."""
    return max(floor_hour(settings.start_date), PARTITIONS_START)


@dataclass(frozen=True)
class BeforeStart:
    """What the ledgers record before the start after `start_date` moved later: load hours, and
    event days aggregated (the next hourly run removes it all: `start_moved`)."""

    first_hour: datetime  # the first load hour that exists now
    first_day: date  # the first event day that exists now
    hours: int  # hour-ledger rows before first_hour
    days: int  # day-ledger event days before first_day

    def describe(self) -> str:
        return (f"start_date moved later: the next hourly run removes what {self.hours} processed load hour(s) "
                f"and {self.days} event day(s) before {self.first_hour:%Y-%m-%d %H:%M} left in the tables")


def before_start(settings: Settings) -> BeforeStart | None:
    """What the ledgers hold before the start (None: nothing, the usual case). Two small delta-rs
    reads, no Spark."""
    return _before_start(settings, read_delta_arrow(settings.table_path(HOUR_LEDGER), ["load_hour_tstamp"]))


def _before_start(settings: Settings, hours: pa.Table | None) -> BeforeStart | None:
    """`before_start`, with the hour ledger (its `load_hour_tstamp`) already read."""
    first_hour, first_day = first_load_hour(settings), settings.start_date.date()
    days = read_delta_arrow(settings.table_path(DAY_LEDGER), ["event_date"])
    early_hours = 0 if hours is None else pc.sum(pc.less(hours["load_hour_tstamp"], first_hour)).as_py() or 0
    early_days = 0 if days is None else len(pc.unique(pc.filter(days["event_date"],
                                                                pc.less(days["event_date"], first_day))))
    if not early_hours and not early_days:
        return None
    return BeforeStart(first_hour, first_day, early_hours, early_days)


# Recent hourly steps the cost model is fitted on (`planning.estimates`).
COST_SAMPLES = 20


def recent_step_samples(manifest: ManifestStore) -> list[StepSample]:
    """`hourly_step_samples` of the whole manifest, from the spans of the last runs that claimed
    base_events items (twice as many runs: some fail), summed by the store."""
    spans = manifest.spans_of_last_runs(BASE_EVENTS, 2 * COST_SAMPLES)
    steps = sorted((span.last_close, span.items_closed, (span.last_close_payload or {}).get("source_rows"),
                    (span.last_close - span.first_claim).total_seconds())
                   for span in spans if span.first_claim is not None)
    return [StepSample(hours, rows, seconds) for _, hours, rows, seconds in steps[-COST_SAMPLES:]]


def hourly_step_samples(records: Iterable[Record], limit: int = COST_SAMPLES) -> list[StepSample]:
    """The last `limit` hourly steps that succeeded, from the manifest: each step's load hours,
    the source rows it read (its PROCESSED records' `source_rows`) and its seconds, from the
    claim of its base_events items to their PROCESSED record."""
    claimed_at: dict[str, datetime] = {}
    done: dict[str, tuple[set[str], datetime, int | None]] = {}
    for record in records:
        if split_item_id(record.item_id)[0] != BASE_EVENTS or record.recorded_at is None:
            continue
        if record.state is State.PROCESSING:
            claimed_at[record.run_id] = min(record.recorded_at, claimed_at.get(record.run_id, record.recorded_at))
        elif record.state is State.PROCESSED:
            items, at, _ = done.get(record.run_id, (set(), record.recorded_at, None))
            rows = (record.payload or {}).get("source_rows")
            done[record.run_id] = ({*items, record.item_id}, max(at, record.recorded_at), rows)
    steps = sorted(((at, len(items), rows, (at - claimed_at[run]).total_seconds())
                    for run, (items, at, rows) in done.items() if run in claimed_at), key=lambda step: step[0])
    return [StepSample(hours, rows, seconds) for _, hours, rows, seconds in steps[-limit:]]


def backfill_hours(settings: Settings, first: date, last: date, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the load hours a backfill of load days [first, last] runs: never before
    the first load hour, past now or past the partitions' end (empty when start >= end)."""
    start = max(datetime.combine(first, datetime.min.time(), tzinfo=timezone.utc), first_load_hour(settings))
    end = min(datetime.combine(last + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc),
              floor_hour(now), end_load_hour(settings) or floor_hour(now))
    return start, end


def plan_load_hours(settings: Settings, *, now: datetime, manifest: ManifestStore,
                    snapshot: SourceSnapshot | None, lock_released: Callable[[Record], str | None]) -> LoadHoursPlan:
    """The load hours the next hourly runs process (`planning.reconcile.hours_to_run`)."""
    states = hour_states(manifest)
    blocked: dict[datetime, str] = {}
    if not settings.auto_resolve_failures:
        for hour, item in states.fail_locked.items():
            blocked[hour] = (f"{item} is fail-locked: fix the cause, then `incremental-assets manifest resolve "
                             f"{item}` (or run manifest_admin_job)")
    for hour, lock in states.locks.items():
        if lock_released(lock) is None:
            blocked[hour] = f"load hour {hour_key(hour)} is locked by run {lock.run_id}"
    digest = settings.rules_digest()
    source = {hour: fingerprint_under_rules(fingerprint, digest)
              for hour, fingerprint in (snapshot.fingerprints if snapshot else {}).items()}
    ledger = read_ledger(settings)
    processed = unchanged_by_maintenance(processed_hours(settings, ledger), ledger, source, snapshot, digest)
    if (end := end_load_hour(settings)) is not None:
        # Hours after the end are neither run nor reconciled: what was processed there stays.
        source = {hour: value for hour, value in source.items() if hour < end}
        processed = {hour: value for hour, value in processed.items() if hour < end}
        blocked = {hour: why for hour, why in blocked.items() if hour < end}
    # An hour whose last run failed is due (blocked while fail-locked, unless the claim of the
    # run that takes it resolves it: auto_resolve_failures).
    processed = failed_hours_run_again(processed, states.resolved | set(states.fail_locked))
    # A skipped hour runs once more, as empty: that undoes what a failed run wrote of it.
    skipped_at = skipped_hours(settings)
    processed = skipped_hours_run_again(processed, skipped_at)
    hours = hours_to_run(source, processed, excluded=set(blocked) | states.skipped,
                         start=first_load_hour(settings), now=now, grace=settings.grace,
                         abstinent=settings.abstinent, backfill_limit_days=settings.backfill_limit_days,
                         lookback_window_hours=settings.lookback_window_hours,
                         max_hours_per_run=settings.max_hours_per_run)
    due_blocked = {h: why for h, why in blocked.items() if _differs(h, source, processed)}
    moved = _before_start(settings, ledger)
    if moved is not None and not hours.ranges and moved.first_hour + HOUR <= now and moved.first_hour not in blocked:
        # Nothing else is due: the start's first hour runs (again) so that its run removes what
        # the hours before the start left; a run of a processed hour changes nothing else.
        hours = dataclasses.replace(hours, ranges=[(moved.first_hour, moved.first_hour + HOUR)])
    catch_up = CatchUp(runs=[])
    if settings.app_ids:
        declared = frozenset(settings.app_ids)
        apps = app_ids_processed(ledger)
        left_out = set(hours.hours) | set(blocked) | states.skipped | set(skipped_at)
        processed_for = {hour: apps.get(hour) or declared for hour, done in processed.items()
                         if done.fingerprint and done.fingerprint == source.get(hour) and hour not in left_out}
        # Runs over empty hours between, never over one that holds data or is due for every app.
        not_bridged = set(source) | left_out | set(hours.due) | set(hours.waiting)
        catch_up = catch_up_runs(processed_for, declared, max_hours_per_run=settings.max_hours_per_run,
                                 backfill_limit_days=settings.backfill_limit_days, not_bridged=not_bridged,
                                 fail_locked={} if settings.auto_resolve_failures else unit_fail_locks(manifest))
    return LoadHoursPlan(hours=hours, state=RunState.STANDARD if processed else RunState.FIRST_RUN,
                         source_version=snapshot.version if snapshot else None, blocked=due_blocked,
                         skipped=len(states.skipped | set(skipped_at)), before_start=moved, catch_up=catch_up,
                         under_other_rules=hours_under_other_rules(ledger, digest))


def _differs(hour: datetime, source: dict, processed: dict) -> bool:
    done = processed.get(hour)
    return done is None or done.fingerprint != source.get(hour, "")


def current_snapshot(settings: Settings, now: datetime) -> SourceSnapshot | None:
    """The source's load hours from the start to `now`, read from its log now."""
    return source_snapshot(settings.source, first_load_hour(settings), now.astimezone(timezone.utc))


def plan_next_run(settings: Settings, now: datetime, manifest: ManifestStore, instance=None) -> LoadHoursPlan:
    """`plan_load_hours` with the source read from its log now and locks judged against
    `instance` (None: by the claiming process and the lock's age only)."""
    return plan_load_hours(settings, now=now, manifest=manifest, snapshot=current_snapshot(settings, now),
                           lock_released=abandoned_lock_check(instance, settings.max_lock_age_hours))
