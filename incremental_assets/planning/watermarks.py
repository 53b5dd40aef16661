"""Time and unit watermarks with grace and abstinent periods (LinkedIn DIL, as its docs describe).

A window's high watermark is the window's end after a successful run and its start after a
failed one, so a high watermark at (or before) the window's start means "no usable history".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from incremental_assets.planning._time import non_negative_timedelta, utc

Window = tuple[datetime, datetime]


def effective_cutoff(last_high_watermark: datetime | None, *, start: datetime,
                     grace_period: timedelta, abstinent_period: timedelta) -> datetime:
    """The effective cut-off is last high watermark + abstinent period - grace period, or `start`
    when there is no high watermark yet."""
    start = utc("start", start)
    grace = non_negative_timedelta("grace_period", grace_period)
    abstinent = non_negative_timedelta("abstinent_period", abstinent_period)
    if last_high_watermark is None:
        return start
    return utc("last_high_watermark", last_high_watermark) + abstinent - grace


def windows_to_run(windows: Sequence[Window], high_watermarks: Mapping[datetime, datetime], *,
                   grace_period: timedelta, abstinent_period: timedelta) -> list[Window]:
    """Run a window whole when it has no successful history, otherwise run
    [max(start, its own cut-off), end) only if its end is after the cut-off of the highest
    watermark of all windows; drop empty ranges."""
    non_negative_timedelta("grace_period", grace_period)
    non_negative_timedelta("abstinent_period", abstinent_period)
    checked = []
    for index, window in enumerate(windows):
        start = utc(f"windows[{index}] start", window[0])
        end = utc(f"windows[{index}] end", window[1])
        if start > end:
            raise ValueError(
                f"windows[{index}]=({start.isoformat()}, {end.isoformat()}) is not accepted; "
                "a window's start must not be after its end")
        hwm = high_watermarks.get(start)
        hwm = None if hwm is None else utc(f"high_watermarks[{start.isoformat()}]", hwm)
        # A watermark at the start (a failed run) is no progress: the window counts as new.
        checked.append((start, end, hwm if hwm is not None and hwm > start else None))
    if not checked:
        return []

    successful = [hwm for _, _, hwm in checked if hwm is not None]
    overall_cutoff = effective_cutoff(
        max(successful, default=None), start=min(start for start, _, _ in checked),
        grace_period=grace_period, abstinent_period=abstinent_period)

    to_run = []
    for start, end, hwm in checked:
        if hwm is None:
            lower = start
        elif end > overall_cutoff:
            own_cutoff = effective_cutoff(hwm, start=start, grace_period=grace_period,
                                          abstinent_period=abstinent_period)
            lower = max(start, own_cutoff)
        else:
            continue
        if lower < end:
            to_run.append((lower, end))
    return to_run


def units_to_run(units: Mapping[str, Sequence[Window]],
                 high_watermarks: Mapping[str, Mapping[datetime, datetime]], *,
                 grace_period: timedelta, abstinent_period: timedelta) -> dict[str, list[Window]]:
    """Apply the time-watermark rule to each unit (an app id, a source) on its own history; units
    with nothing to run are left out."""
    plan = {}
    for unit, unit_windows in units.items():
        ranges = windows_to_run(unit_windows, high_watermarks.get(unit, {}),
                                grace_period=grace_period, abstinent_period=abstinent_period)
        if ranges:
            plan[unit] = ranges
    return plan
