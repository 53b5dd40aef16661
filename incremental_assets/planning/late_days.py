"""Which event days to (re)build in the daily aggregates, and which late rows to skip for now.

Snowplow's time-based late-data logic: each event day keeps a count of late rows it skipped; a day is
rebuilt from every filtered row it has when new rows arrive on time, or when enough late rows
have piled up. So every filtered row is either aggregated or counted as skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime

from incremental_assets.planning._time import whole_number


@dataclass(frozen=True)
class LateDaysPlan:
    """Days to rebuild (sorted), every day's skipped-row count afterwards (no zero counts), and
    the unaccounted rows of the days after the last daily partition (`waiting_for_partition`)."""

    days: list[date]
    skipped: dict[date, int]
    waiting: dict[date, int] = field(default_factory=dict)


def _check_day(name: str, value: object) -> date:
    # datetime is a subclass of date, but mixing the two breaks day arithmetic and lookups.
    if not isinstance(value, date) or isinstance(value, datetime):
        raise ValueError(f"{name}={value!r} is not accepted; it must be a date")
    return value


def days_to_process(new_rows: Mapping[tuple[date, date], int], skipped: Mapping[date, int], *,
                    reprocess_days: int, min_rows_to_process: int,
                    start_date: date) -> LateDaysPlan:
    """Rebuild an event day with new rows when one of them is on time
    (load_day - event_day <= reprocess_days) or when its skipped plus new late rows reach
    min_rows_to_process; otherwise add its late rows to its skipped count."""
    whole_number("reprocess_days", reprocess_days, 0)
    whole_number("min_rows_to_process", min_rows_to_process, 1)
    _check_day("start_date", start_date)

    on_time: dict[date, int] = {}
    late: dict[date, int] = {}
    for key, rows in new_rows.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise ValueError(f"new_rows key {key!r} is not accepted; use (event_day, load_day)")
        event_day = _check_day("event_day", key[0])
        load_day = _check_day("load_day", key[1])
        rows = whole_number(f"new_rows[{event_day}, {load_day}]", rows, 0)
        if rows == 0 or event_day < start_date:
            continue
        counts = on_time if (load_day - event_day).days <= reprocess_days else late
        counts[event_day] = counts.get(event_day, 0) + rows

    result = {}
    for day, count in skipped.items():
        _check_day("skipped day", day)
        count = whole_number(f"skipped[{day}]", count, 0)
        if count:
            result[day] = count

    rebuild = []
    for day in sorted(on_time.keys() | late.keys()):
        piled_up = result.get(day, 0) + late.get(day, 0)
        if on_time.get(day, 0) > 0 or piled_up >= min_rows_to_process:
            rebuild.append(day)
            result.pop(day, None)  # rebuilding reads every row of the day, skipped ones too
        else:
            result[day] = piled_up
    return LateDaysPlan(days=rebuild, skipped=dict(sorted(result.items())))


def waiting_for_partition(rows: Mapping[tuple[date, date], int], last_day: date
                          ) -> tuple[dict[tuple[date, date], int], dict[date, int]]:
    """`rows` per (event day, load day) split in two: those of the days up to `last_day`, the
    last day a daily partition exists for, and, per day, those of the days after it. A run over
    such a day would fail (its partition does not exist): its rows wait, unaccounted, until it does."""
    _check_day("last_day", last_day)
    waiting: dict[date, int] = {}
    for (day, _), n in rows.items():
        if day > last_day:
            waiting[day] = waiting.get(day, 0) + n
    return {pair: n for pair, n in rows.items() if pair[0] <= last_day}, dict(sorted(waiting.items()))


def describe_waiting(waiting: Mapping[date, int]) -> str:
    """The rows `waiting_for_partition` holds back, in words."""
    return (f"{sum(waiting.values())} row(s) of event day(s) {', '.join(map(str, sorted(waiting)))} wait: "
            "no daily partition exists for them yet (rebuilt once it does)")


def conservation_check(total_rows_by_day: Mapping[date, int], aggregated_by_day: Mapping[date, int],
                       skipped_by_day: Mapping[date, int]) -> dict[date, int]:
    """Map every day whose total rows differ from aggregated + skipped rows to
    total - aggregated - skipped (positive: rows lost, negative: rows counted twice); empty when
    every row is accounted for."""
    broken = {}
    for day in sorted(total_rows_by_day.keys() | aggregated_by_day.keys() | skipped_by_day.keys()):
        difference = (total_rows_by_day.get(day, 0) - aggregated_by_day.get(day, 0)
                      - skipped_by_day.get(day, 0))
        if difference:
            broken[day] = difference
    return broken
