"""Load-hour and event-day arithmetic: partition keys and back, floors, ranges. Pure: the
partitions (Dagster's) and every layer that names an hour or a day use these."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Collection, Iterable

HOUR = timedelta(hours=1)
HOUR_KEY_FORMAT = "%Y-%m-%d-%H:%M"
DAY_KEY_FORMAT = "%Y-%m-%d"


def floor_hour(ts: datetime) -> datetime:
    """The start of the UTC hour `ts` falls in. A naive `ts` (a TIMESTAMP_NTZ value from a Delta
    log) is a UTC wall time, as the runs read it (Spark's session time zone is UTC), never the
    host's local time."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def hour_key(hour: datetime) -> str:
    return hour.astimezone(timezone.utc).strftime(HOUR_KEY_FORMAT)


def parse_hour_key(key: str) -> datetime:
    return datetime.strptime(key, HOUR_KEY_FORMAT).replace(tzinfo=timezone.utc)


def day_key(day: date) -> str:
    return day.strftime(DAY_KEY_FORMAT)


def parse_day_key(key: str) -> date:
    return datetime.strptime(key, DAY_KEY_FORMAT).date()


def hour_keys(start: datetime, end: datetime) -> tuple[str, str]:
    """First and last hourly partition key of the hours [start, end)."""
    return hour_key(start), hour_key(end - HOUR)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The hour starts in [start, end), both hour-aligned."""
    return [start + i * HOUR for i in range(int((end - start) / HOUR))]


def ranges_within(start: datetime, end: datetime, allowed: Collection[datetime]) -> list[tuple[datetime, datetime]]:
    """The contiguous stretches [first, end) of the hours of [start, end) that are in `allowed`."""
    ranges: list[tuple[datetime, datetime]] = []
    for hour in hours_between(start, end):
        if hour not in allowed:
            continue
        if ranges and ranges[-1][1] == hour:
            ranges[-1] = (ranges[-1][0], hour + HOUR)
        else:
            ranges.append((hour, hour + HOUR))
    return ranges


def contiguous_ranges(days: Iterable[date]) -> list[tuple[date, date]]:
    """Sorted days grouped into inclusive (first, last) runs of consecutive days."""
    ranges: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if ranges and day == ranges[-1][1] + timedelta(days=1):
            ranges[-1] = (ranges[-1][0], day)
        else:
            ranges.append((day, day))
    return ranges
