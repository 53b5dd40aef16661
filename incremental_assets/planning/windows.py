"""Durations, time bounds and partition windows.

Times are timezone-aware UTC datetimes and every window is half-open: `[start, end)`.
"""

from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass, fields
from datetime import datetime, time, timedelta, timezone

from incremental_assets.planning._time import utc

Window = tuple[datetime, datetime]


@dataclass(frozen=True)
class Duration:
    """An ISO 8601 duration; years and months are calendar units, the rest have fixed lengths."""

    years: float = 0
    months: float = 0
    weeks: float = 0
    days: float = 0
    hours: float = 0
    minutes: float = 0
    seconds: float = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"Duration {f.name}={value!r} is not accepted; it must be a finite number >= 0")
        for name in ("years", "months"):
            if getattr(self, name) != int(getattr(self, name)):
                raise ValueError(
                    f"Duration {name}={getattr(self, name)!r} is not accepted; calendar units "
                    "must be whole numbers")

    @property
    def is_zero(self) -> bool:
        """True when every component is zero."""
        return all(getattr(self, f.name) == 0 for f in fields(self))

    def _fixed_part(self) -> timedelta:
        try:
            return timedelta(weeks=self.weeks, days=self.days, hours=self.hours,
                             minutes=self.minutes, seconds=self.seconds)
        except OverflowError:
            raise ValueError(f"{self} is too long to be used as a time span") from None

    def to_timedelta(self) -> timedelta:
        """The fixed length of this duration; one with years or months has none and raises."""
        if self.years or self.months:
            raise ValueError(
                f"a duration with years or months ({self.years:g}Y{self.months:g}M) has no fixed "
                "length; use weeks, days, hours, minutes or seconds")
        return self._fixed_part()

    def add_to(self, dt: datetime, times: int = 1) -> datetime:
        """`dt` plus `times` of this duration: calendar months first (day clamped to the month's
        end), then the fixed part."""
        if isinstance(times, bool) or not isinstance(times, int):
            raise ValueError(f"times={times!r} is not accepted; it must be a whole number")
        total_months = int(self.years * 12 + self.months) * times
        shifted = dt
        if total_months:  # (skipped for fixed lengths: the hourly cursor steps through every hour)
            years_on, month_index = divmod(dt.month - 1 + total_months, 12)
            year, month = dt.year + years_on, month_index + 1
            if not 1 <= year <= 9999:
                raise ValueError(f"{dt.isoformat()} plus {times} x {self} is out of the datetime range")
            shifted = dt.replace(year=year, month=month, day=min(dt.day, calendar.monthrange(year, month)[1]))
        try:
            return shifted + self._fixed_part() * times
        except OverflowError:
            raise ValueError(
                f"{dt.isoformat()} plus {times} x {self} is out of the datetime range") from None


_NUMBER = r"(\d+(?:[.,]\d+)?)"
_DURATION_RE = re.compile(
    rf"P(?:{_NUMBER}Y)?(?:{_NUMBER}M)?(?:{_NUMBER}W)?(?:{_NUMBER}D)?"
    rf"(?:(T)(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?")
_DURATION_FIELDS = ("years", "months", "weeks", "days", None, "hours", "minutes", "seconds")
_DURATION_HELP = "use an ISO 8601 duration such as P1D, PT1H, P1M, P1W, P0DT7H or PT0.5S"


def parse_duration(text: str) -> Duration:
    """Parse an ISO 8601 duration (PnYnMnWnDTnHnMnS, at least one component, none negative, a
    fraction only on the last one)."""
    if not isinstance(text, str):
        raise ValueError(f"duration {text!r} is not accepted; {_DURATION_HELP}")
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"duration {text!r} is not accepted; {_DURATION_HELP}")
    groups = match.groups()
    present = [(name, value) for name, value in zip(_DURATION_FIELDS, groups)
               if name is not None and value is not None]
    has_time_designator = groups[4] is not None
    time_parts = [value for value in groups[5:] if value is not None]
    if not present or (has_time_designator and not time_parts):
        raise ValueError(f"duration {text!r} has no value; {_DURATION_HELP}")
    values = {}
    for position, (name, raw) in enumerate(present):
        raw = raw.replace(",", ".")
        if "." in raw and position != len(present) - 1:
            raise ValueError(
                f"duration {text!r} is not accepted: only its last component may have a fraction")
        if "." in raw and name in ("years", "months"):
            raise ValueError(
                f"duration {text!r} is not accepted: years and months must be whole numbers")
        values[name] = float(raw) if "." in raw else int(raw)
    return Duration(**values)


_RELATIVE_BOUND_RE = re.compile(r"P(\d+)D(?:T(\d+)H)?")


def resolve_bound(value: str | datetime, now: datetime) -> datetime:
    """Turn a bound into a UTC datetime: an ISO datetime or date (naive = UTC), "-" = now,
    "PnD" = today's UTC midnight minus n days, "PnDTmH" = this hour's start minus n days m hours."""
    now = utc("now", now)
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else utc("value", value)
    if not isinstance(value, str):
        raise ValueError(f"bound {value!r} is not accepted; give a datetime or a string")
    text = value.strip()
    if text == "-":
        return now
    relative = _RELATIVE_BOUND_RE.fullmatch(text)
    if relative is not None:
        days = int(relative.group(1))
        if relative.group(2) is None:
            return datetime.combine(now.date(), time(), tzinfo=timezone.utc) - timedelta(days=days)
        hours = int(relative.group(2))
        if hours > 23:
            raise ValueError(f"bound {value!r} is not accepted: hours in PnDTmH must be 0..23")
        start_of_hour = now.replace(minute=0, second=0, microsecond=0)
        return start_of_hour - timedelta(days=days, hours=hours)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"bound {value!r} is not accepted; use an ISO datetime or date "
            "(e.g. 2020-01-01, 2020-01-01T10:00:00Z), '-' for now, PnD or PnDTmH") from None
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else utc("value", parsed)


def split_range(start: datetime, end: datetime, step: Duration,
                allow_partial: bool = True) -> list[Window]:
    """Cut [start, end) at start + k * step (each boundary computed from start), keeping a shorter
    last window only when allow_partial."""
    start, end = utc("start", start), utc("end", end)
    if step.is_zero:
        raise ValueError("step=P0D is not accepted; a step must be longer than zero")
    windows: list[Window] = []
    lower, k = start, 0
    # A fixed step's boundaries by arithmetic (the sensor cuts a year into 8,760 hours per tick);
    # one with months through add_to's calendar.
    fixed = None if step.years or step.months else step.to_timedelta()
    while lower < end:
        k += 1
        try:
            upper = step.add_to(start, times=k) if fixed is None else start + fixed * k
        except OverflowError:
            upper = step.add_to(start, times=k)  # raises add_to's error, which names the bound
        if upper <= lower:
            raise ValueError(f"step {step} is too small to move past {lower.isoformat()}")
        if upper > end:
            if allow_partial:
                windows.append((lower, end))
            break
        windows.append((lower, upper))
        lower = upper
    return windows


PARTITION_UNITS = {
    "hourly": Duration(hours=1),
    "daily": Duration(days=1),
    "weekly": Duration(weeks=1),
    "monthly": Duration(months=1),
}


def partition_windows(start: datetime, end: datetime, unit: str,
                      allow_partial: bool = True) -> list[Window]:
    """Partition [start, end) into hourly, daily, weekly or monthly windows with boundaries
    start + k * unit; the last, shorter window is kept only when allow_partial."""
    if unit not in PARTITION_UNITS:
        raise ValueError(
            f"unit={unit!r} is not accepted; use one of {', '.join(PARTITION_UNITS)}")
    return split_range(start, end, PARTITION_UNITS[unit], allow_partial)
