"""Which load hours to run: the source's hours reconciled with what each hour was processed from.

An hour is *due* when its source data differs from what it was last processed from: it has
data and was never processed, its fingerprint changed since (a file landed in it, or the rules
that shape its rows changed), or it was processed from data the source no longer holds. So a
gap left by a run that processed a later hour, a file that lands in an hour processed days ago
and a failed hour that an operator resolved all run again; an hour whose data did not change
never does. Due hours separated by a short gap of hours without data run as one range.
Hours an operator skipped, fail-locked hours and hours a live run holds are left
out by the caller (`excluded`).

`last_success` is the end of the contiguous processed prefix since `start`: a cursor-based sync's
cursor stops at the first gap. `lookback_window_hours` (as in Snowplow's incremental logic) re-runs
that many hours before the end of the prefix's last hour with data every time (default 0: reconciliation re-runs
exactly the hours that changed).
`grace` delays an hour's first processing until it has been closed that long (late files may
still land in it); `abstinent` delays re-running a changed hour until its last processing is
that old (files trickling into an hour run it once, not once per file).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from incremental_assets.planning._time import finite_number, non_negative_timedelta, utc, whole_number
from incremental_assets.planning.cursors import DatetimeCursor
from incremental_assets.planning.hours import HOUR, hours_between

# Due hours separated only by hours without data run as one range when the gap is shorter than
# this: a run costs far more than an empty hour in it, and a longer gap would only add claims.
BRIDGED_GAP = timedelta(hours=24)


@dataclass(frozen=True)
class ProcessedHour:
    """What a load hour was last processed from, and when."""

    fingerprint: str  # "" when the hour held no data then
    processed_at: datetime


@dataclass(frozen=True)
class ProcessedAtVersion:
    """The source's Delta log an hour was processed from: its table id and version."""

    table_id: str | None  # None: not recorded (a ledger row written before table ids were kept)
    version: int


def versions_on_this_log(processed_at: Mapping[datetime, ProcessedAtVersion], table_id: str | None,
                         version: int) -> dict[datetime, int]:
    """The version each hour was processed at, for the hours processed from the log the source
    has now (`table_id` at `version`): the same table id, at a version not after `version`. Its
    commits since can tell what changed; another table's (a source deleted and written again at
    its path, or pointed at another table) or a log that went back cannot. An hour whose table
    id was not recorded counts as processed from this log when its version is not after it."""
    return {hour: at.version for hour, at in processed_at.items()
            if at.version <= version and (at.table_id is None or at.table_id == table_id)}


def hours_only_rearranged(processed_at_version: Mapping[datetime, int],
                          commits: Sequence[tuple[int, frozenset[datetime] | None]]) -> set[datetime]:
    """The hours, of those processed at a source version (`processed_at_version`), that no later
    data-changing commit touched: each of `commits` is (version, the hours its data-changing
    actions may touch; None: any hour). Their files changed only by commits that rearrange rows
    (compaction), so they hold the rows they were processed from."""
    return {hour for hour, version in processed_at_version.items()
            if all(hours is not None and hour not in hours for v, hours in commits if v > version)}


# The fingerprint of a load hour that must run again, whatever its source holds: it matches none.
RUN_AGAIN = "run-again"


def failed_hours_run_again(processed: Mapping[datetime, ProcessedHour],
                           failed: Collection[datetime]) -> dict[datetime, ProcessedHour]:
    """`processed`, with the hours whose last run failed (fail-locked, or resolved since) due
    again: the failed run may have written part of its output, and the ledger still describes
    the run before it, which may match the source."""
    return {hour: ProcessedHour(RUN_AGAIN, done.processed_at) if hour in failed else done
            for hour, done in processed.items()}


def skipped_hours_run_again(processed: Mapping[datetime, ProcessedHour],
                            skipped_at: Mapping[datetime, datetime]) -> dict[datetime, ProcessedHour]:
    """`processed`, with every hour an operator skipped due once more unless a run processed it
    after the skip: that run reads the hour as empty, which undoes what a failed run wrote of it."""
    out = dict(processed)
    for hour, at in skipped_at.items():
        done = out.get(hour)
        if done is None or done.processed_at < at:
            out[hour] = ProcessedHour(RUN_AGAIN, at)
    return out


@dataclass(frozen=True)
class HoursPlan:
    """The due hours to run now, grouped in contiguous ranges, oldest first; and the rest, by reason."""

    ranges: list[tuple[datetime, datetime]]  # [start, end) of each run, oldest first
    new: list[datetime] = field(default_factory=list)  # never processed
    changed: list[datetime] = field(default_factory=list)  # fingerprint differs from the processed one
    removed: list[datetime] = field(default_factory=list)  # processed from data that is gone
    lookback: list[datetime] = field(default_factory=list)  # re-run by lookback_window_hours
    waiting: list[datetime] = field(default_factory=list)  # due later (grace or abstinent period)
    deferred: list[datetime] = field(default_factory=list)  # due, past backfill_limit_days: next run
    last_success: datetime | None = None  # end of the contiguous processed prefix
    present: list[datetime] = field(default_factory=list)  # new hours after every processed one

    def next_range(self) -> tuple[datetime, datetime] | None:
        """The range one run should take first: the present's, so that new hours keep their
        cadence while history is re-run (a rules change, a backfill); else the oldest."""
        present = set(self.present)
        for start, end in self.ranges:
            if present.intersection(hours_between(start, end)):
                return start, end
        return self.ranges[0] if self.ranges else None

    @property
    def hours(self) -> list[datetime]:
        return [h for start, end in self.ranges for h in hours_between(start, end)]

    @property
    def due(self) -> list[datetime]:
        """The hours whose data or rules changed (look-back hours are not due, only re-run)."""
        return sorted(self.new + self.changed + self.removed)


def _ranges(hours: list[datetime], bridgeable: Collection[datetime] = ()) -> list[tuple[datetime, datetime]]:
    """Contiguous ranges of `hours`; a gap shorter than BRIDGED_GAP made only of `bridgeable`
    hours joins the ranges on both sides."""
    ranges: list[tuple[datetime, datetime]] = []
    for hour in sorted(hours):
        if ranges and (ranges[-1][1] == hour or (
                hour - ranges[-1][1] < BRIDGED_GAP
                and all(h in bridgeable for h in hours_between(ranges[-1][1], hour)))):
            ranges[-1] = (ranges[-1][0], hour + HOUR)
        else:
            ranges.append((hour, hour + HOUR))
    return ranges


def split_ranges(ranges: list[tuple[datetime, datetime]], max_hours: int) -> list[tuple[datetime, datetime]]:
    """`ranges` cut into consecutive ranges of at most `max_hours` hours each, in order."""
    step = HOUR * whole_number("max_hours_per_run", max_hours, 1)
    cut = []
    for start, end in ranges:
        while start < end:
            cut.append((start, min(start + step, end)))
            start += step
    return cut


def closed_hours(start: datetime, now: datetime) -> list[datetime]:
    """Every closed load hour from `start`'s hour to `now` (a cursor-based sync's cursor, one hour a window)."""
    first = utc("start", start).replace(minute=0, second=0, microsecond=0)
    closed_end = utc("now", now).replace(minute=0, second=0, microsecond=0)
    return [window[0] for window in DatetimeCursor(start=first, step="PT1H").windows(None, closed_end)]


def hours_to_run(source: Mapping[datetime, str], processed: Mapping[datetime, ProcessedHour], *,
                 excluded: Collection[datetime], start: datetime, now: datetime, grace: timedelta,
                 abstinent: timedelta, backfill_limit_days: int,
                 lookback_window_hours: float = 0, max_hours_per_run: int | None = None) -> HoursPlan:
    """The load hours to run now.

    `source` maps each closed load hour with source data to its fingerprint; `processed`
    maps each hour processed so far to what it was processed from. At most
    `backfill_limit_days` of hours run (from the oldest due one); the rest is `deferred`.
    A range longer than `max_hours_per_run` hours is cut into several (None: no limit).
    """
    non_negative_timedelta("grace", grace)
    non_negative_timedelta("abstinent", abstinent)
    limit = timedelta(days=whole_number("backfill_limit_days", backfill_limit_days, 1))
    lookback = timedelta(hours=finite_number("lookback_window_hours", lookback_window_hours, 0))
    now = utc("now", now)
    excluded = set(excluded)
    new, changed, removed, waiting, empty = [], [], [], [], set()
    last_success = last_data_end = None
    in_prefix = True
    for hour in closed_hours(start, now):
        data, done = source.get(hour), processed.get(hour)
        if data is None and hour not in excluded and (done is None or not done.fingerprint):
            empty.add(hour)  # nothing to process: a range may run over it
        if done is not None and done.fingerprint == (data or ""):
            if in_prefix:
                last_success = hour + HOUR
                last_data_end = hour + HOUR if data is not None else last_data_end
            continue
        if data is None and done is None:  # no data, never processed: nothing to do
            if in_prefix and last_success is not None:
                last_success = hour + HOUR
            continue
        in_prefix = False
        if hour in excluded:
            continue
        if done is None:
            (new if now - (hour + HOUR) >= grace else waiting).append(hour)
        elif abstinent and done.processed_at <= now < done.processed_at + abstinent:
            waiting.append(hour)  # (processed "after" now: replaying the past, nothing trickles)
        else:
            (changed if data is not None else removed).append(hour)
    due = sorted(new + changed + removed)
    relook = []
    if lookback and last_data_end is not None:
        relook = [h for h in hours_between(last_data_end - HOUR * int(lookback / HOUR), last_data_end)
                  if h in source and h not in excluded and h not in due]
    # The backfill window counts from the oldest hour that is really due: look-back hours
    # (always "due", always before it) must never hold the due hours back, or every run would
    # re-run the look-back alone and defer the rest forever.
    # New hours after every processed one (the present) are never deferred: a re-run of history
    # runs backfill_limit_days at a time beside them, not in front of them.
    last_processed = max(processed, default=None)
    present = [h for h in new if last_processed is not None and h > last_processed]
    in_present = set(present)
    deferred = [h for h in due if h >= due[0] + limit and h not in in_present] if due else []
    left = set(deferred)  # sets: a first run of 300 days has 7,200 hours due, 6,480 deferred
    run = sorted(relook + [h for h in due if h not in left])
    ranges = _ranges(run, empty)
    if max_hours_per_run is not None:
        ranges = split_ranges(ranges, max_hours_per_run)
    return HoursPlan(ranges=ranges, new=new, changed=changed, removed=removed, lookback=relook,
                     waiting=waiting, deferred=deferred, last_success=last_success, present=present)
