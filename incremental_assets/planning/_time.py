"""Small shared checks for the planning modules (private)."""

from __future__ import annotations

import math
import numbers
from datetime import datetime, timedelta, timezone


def utc(name: str, value: object) -> datetime:
    """Return `value` in UTC, refusing anything that is not a timezone-aware datetime."""
    if not isinstance(value, datetime):
        raise ValueError(f"{name}={value!r} is not accepted; it must be a timezone-aware datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{name}={value.isoformat()} is not accepted; it must be timezone-aware (UTC)")
    return value.astimezone(timezone.utc)


def non_negative_timedelta(name: str, value: object) -> timedelta:
    """Return `value` if it is a timedelta >= 0, else raise a ValueError naming it."""
    if not isinstance(value, timedelta):
        raise ValueError(f"{name}={value!r} is not accepted; it must be a timedelta")
    if value < timedelta(0):
        raise ValueError(f"{name}={value} is not accepted; it must be >= 0")
    return value


def whole_number(name: str, value: object, minimum: int) -> int:
    """Return `value` as an int if it is a whole number (no bool) >= `minimum`, else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"{name}={value!r} is not accepted; it must be a whole number >= {minimum}")
    if value < minimum:
        raise ValueError(f"{name}={value!r} is not accepted; it must be >= {minimum}")
    return int(value)


def finite_number(name: str, value: object, minimum: float) -> float:
    """Return `value` as a float if it is a finite number >= `minimum`, else raise a ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(
            f"{name}={value!r} is not accepted; it must be a finite number >= {minimum}")
    if value < minimum:
        raise ValueError(f"{name}={value!r} is not accepted; it must be >= {minimum}")
    return float(value)
