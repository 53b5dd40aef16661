"""A datetime cursor that reads new records in half-open windows (Airbyte's DatetimeBasedCursor).

The saved state is the greatest cursor value read so far. Windows are half-open, so no
cursor granularity is needed: consecutive windows share a boundary and nothing falls
between them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from incremental_assets.planning._time import utc
from incremental_assets.planning.windows import Window, parse_duration, split_range


@dataclass(frozen=True)
class DatetimeCursor:
    """Where to read from (start, or the saved state minus the lookback), up to min(end, now), in
    steps."""

    start: datetime
    end: datetime | None = None
    step: str | None = None  # ISO 8601 duration; None means one window
    lookback_window: str | None = None  # ISO 8601 duration, subtracted from the saved state only

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", utc("start", self.start))
        if self.end is not None:
            object.__setattr__(self, "end", utc("end", self.end))
            if self.end < self.start:
                raise ValueError(
                    f"end={self.end.isoformat()} is not accepted; it must not be before "
                    f"start={self.start.isoformat()}")
        if self.step is not None and parse_duration(self.step).is_zero:
            raise ValueError(f"step={self.step!r} is not accepted; it must be longer than zero")
        if self.lookback_window is not None:
            parse_duration(self.lookback_window)

    def windows(self, state: datetime | None, now: datetime) -> list[Window]:
        """Windows cover [begin, min(end, now)) where begin is start, or
        max(start, state - lookback) once there is a state; none when begin >= that end."""
        now = utc("now", now)
        upper = now if self.end is None else min(self.end, now)
        begin = self.start
        if state is not None:
            resume = utc("state", state)
            if self.lookback_window is not None:
                resume = parse_duration(self.lookback_window).add_to(resume, times=-1)
            begin = max(self.start, resume)
        if begin >= upper:
            return []
        if self.step is None:
            return [(begin, upper)]
        return split_range(begin, upper, parse_duration(self.step))

    def next_state(self, state: datetime | None, window: Window,
                   observed: Iterable[datetime]) -> datetime | None:
        """The state moves forward only, to the greatest observed value inside the window; values
        outside it are ignored."""
        lower, upper = utc("window start", window[0]), utc("window end", window[1])
        inside = [value for value in (utc("observed value", v) for v in observed)
                  if lower <= value < upper]
        if not inside:
            return state
        greatest = max(inside)
        if state is None:
            return greatest
        return max(utc("state", state), greatest)
