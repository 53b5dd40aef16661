"""Durations, bounds and partition windows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.planning.windows import (
    PARTITION_UNITS,
    Duration,
    parse_duration,
    partition_windows,
    resolve_bound,
    split_range,
)
from tests.helpers import utc

# -- parse_duration ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("P1D", Duration(days=1)),
    ("PT1H", Duration(hours=1)),
    ("P1M", Duration(months=1)),
    ("PT1M", Duration(minutes=1)),
    ("P1W", Duration(weeks=1)),
    ("P0DT7H", Duration(hours=7)),
    ("PT0.5S", Duration(seconds=0.5)),
    ("PT0,5S", Duration(seconds=0.5)),
    ("PT0S", Duration()),
    ("P31D", Duration(days=31)),
    ("P1Y2M3DT4H5M6S", Duration(years=1, months=2, days=3, hours=4, minutes=5, seconds=6)),
    ("P1DT12H", Duration(days=1, hours=12)),
    ("PT1.5H", Duration(hours=1.5)),
    ("  PT1H ", Duration(hours=1)),
])
def test_parse_duration_accepts_iso_8601(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", [
    "", " ", "P", "PT", "P1DT", "-P1D", "P-1D", "1D", "P1", "PT1D", "P1H", "p1d", "P1D2M",
    "P1.5DT2H", "P0.5M", "P0.5Y", "garbage", "P1D P1D", "PT1HT1M", None, 5,
])
def test_parse_duration_refuses_anything_else(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text, expected", [
    ("PT1H", timedelta(hours=1)),
    ("P0DT7H", timedelta(hours=7)),
    ("PT0.5S", timedelta(seconds=0.5)),
    ("P1W", timedelta(days=7)),
    ("P1DT1M", timedelta(days=1, minutes=1)),
])
def test_to_timedelta_of_fixed_durations(text, expected):
    assert parse_duration(text).to_timedelta() == expected


@pytest.mark.parametrize("text", ["P1M", "P1Y", "P1MT1H"])
def test_calendar_durations_have_no_timedelta(text):
    with pytest.raises(ValueError, match="no fixed length"):
        parse_duration(text).to_timedelta()


def test_huge_durations_fail_with_a_value_error():
    with pytest.raises(ValueError):
        parse_duration("P99999999999D").to_timedelta()


@pytest.mark.parametrize("fields", [{"days": -1}, {"months": 0.5}, {"hours": float("nan")},
                                    {"seconds": "1"}])
def test_duration_refuses_bad_components(fields):
    with pytest.raises(ValueError):
        Duration(**fields)


@pytest.mark.parametrize("start, duration, times, expected", [
    (utc(2024, 1, 31), "P1M", 1, utc(2024, 2, 29)),
    (utc(2023, 1, 31), "P1M", 1, utc(2023, 2, 28)),
    (utc(2024, 1, 31), "P1M", 2, utc(2024, 3, 31)),
    (utc(2024, 3, 31), "P1M", -1, utc(2024, 2, 29)),
    (utc(2024, 2, 29), "P1Y", 1, utc(2025, 2, 28)),
    (utc(2024, 1, 31), "P1M1D", 1, utc(2024, 3, 1)),
    (utc(2024, 11, 15, 6), "P2M", 1, utc(2025, 1, 15, 6)),
    (utc(2024, 1, 1), "PT1H", 30, utc(2024, 1, 2, 6)),
    (utc(2024, 1, 1), "P1W", 0, utc(2024, 1, 1)),
])
def test_add_to_is_calendar_aware(start, duration, times, expected):
    assert parse_duration(duration).add_to(start, times=times) == expected


def test_add_to_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="out of the datetime range"):
        Duration(years=1).add_to(utc(9999, 6, 1))


# -- resolve_bound --------------------------------------------------------------------------

NOW = utc(2020, 1, 15, 10, 30, 45)


@pytest.mark.parametrize("value, expected", [
    ("2020-01-01", utc(2020, 1, 1)),
    ("2020-01-01T10:00:00", utc(2020, 1, 1, 10)),
    ("2020-01-01 10:00:00", utc(2020, 1, 1, 10)),
    ("2020-01-01T10:00:00Z", utc(2020, 1, 1, 10)),
    ("2020-01-01 10:00:00.250000+0000", datetime(2020, 1, 1, 10, 0, 0, 250000, timezone.utc)),
    ("2020-01-01T10:00:00+02:00", utc(2020, 1, 1, 8)),
    ("-", NOW),
    ("P0D", utc(2020, 1, 15)),
    ("P1D", utc(2020, 1, 14)),
    ("P14D", utc(2020, 1, 1)),
    ("P0DT0H", utc(2020, 1, 15, 10)),
    ("P0DT7H", utc(2020, 1, 15, 3)),
    ("P1DT23H", utc(2020, 1, 13, 11)),
    (datetime(2020, 1, 1, 5), utc(2020, 1, 1, 5)),
    (datetime(2020, 1, 1, 5, tzinfo=timezone(timedelta(hours=-1))), utc(2020, 1, 1, 6)),
])
def test_resolve_bound(value, expected):
    result = resolve_bound(value, NOW)
    assert result == expected
    assert result.tzinfo == timezone.utc


@pytest.mark.parametrize("value", ["P0DT24H", "PT1H", "P1M", "yesterday", "", "2020-13-01", 7])
def test_resolve_bound_refuses_other_values(value):
    with pytest.raises(ValueError, match="bound"):
        resolve_bound(value, NOW)


def test_resolve_bound_needs_an_aware_now():
    with pytest.raises(ValueError, match="now"):
        resolve_bound("-", datetime(2020, 1, 15))


# -- partition_windows ------------------------------------------------------------------------

def test_daily_windows_are_half_open_and_consecutive():
    assert partition_windows(utc(2020, 1, 1), utc(2020, 1, 3, 12), "daily") == [
        (utc(2020, 1, 1), utc(2020, 1, 2)),
        (utc(2020, 1, 2), utc(2020, 1, 3)),
        (utc(2020, 1, 3), utc(2020, 1, 3, 12)),
    ]


def test_partial_window_is_dropped_when_not_allowed():
    assert partition_windows(utc(2020, 1, 1), utc(2020, 1, 3, 12), "daily",
                             allow_partial=False) == [
        (utc(2020, 1, 1), utc(2020, 1, 2)),
        (utc(2020, 1, 2), utc(2020, 1, 3)),
    ]


def test_monthly_windows_from_month_end_do_not_drift():
    windows = partition_windows(utc(2024, 1, 31), utc(2024, 6, 1), "monthly")
    assert [start for start, _ in windows] == [
        utc(2024, 1, 31), utc(2024, 2, 29), utc(2024, 3, 31), utc(2024, 4, 30), utc(2024, 5, 31)]
    assert windows[-1] == (utc(2024, 5, 31), utc(2024, 6, 1))


def test_seed_004_monthly_example_has_13_full_months_and_one_partial():
    windows = partition_windows(utc(2019, 1, 1), utc(2020, 2, 21), "monthly")
    assert len(windows) == 14
    assert windows[0] == (utc(2019, 1, 1), utc(2019, 2, 1))
    assert windows[-1] == (utc(2020, 2, 1), utc(2020, 2, 21))
    # The next day only the partial window grows; the full ones stay the same.
    next_day = partition_windows(utc(2019, 1, 1), utc(2020, 2, 22), "monthly")
    assert next_day[:13] == windows[:13]
    assert next_day[-1] == (utc(2020, 2, 1), utc(2020, 2, 22))


def test_seed_004_weekly_example_ends_with_a_partial_week():
    windows = partition_windows(utc(2020, 1, 6), utc(2020, 2, 21), "weekly")
    assert windows[-1] == (utc(2020, 2, 17), utc(2020, 2, 21))
    assert all(end - start == timedelta(weeks=1) for start, end in windows[:-1])


def test_windows_keep_the_hour_of_the_start():
    windows = partition_windows(utc(2020, 2, 21, 10), utc(2020, 2, 23, 12), "daily")
    assert [end for _, end in windows] == [utc(2020, 2, 22, 10), utc(2020, 2, 23, 10),
                                           utc(2020, 2, 23, 12)]


def test_hourly_windows():
    windows = partition_windows(utc(2020, 1, 1), utc(2020, 1, 1, 3), "hourly")
    assert windows == [(utc(2020, 1, 1, h), utc(2020, 1, 1, h + 1)) for h in range(3)]


@pytest.mark.parametrize("start, end", [(utc(2020, 1, 2), utc(2020, 1, 1)),
                                         (utc(2020, 1, 1), utc(2020, 1, 1))])
def test_no_windows_when_start_is_not_before_end(start, end):
    assert partition_windows(start, end, "daily") == []


def test_unknown_unit_is_named_in_the_error():
    with pytest.raises(ValueError, match="unit='fortnightly'.*hourly, daily, weekly, monthly"):
        partition_windows(utc(2020, 1, 1), utc(2020, 2, 1), "fortnightly")


def test_naive_bounds_are_refused():
    with pytest.raises(ValueError, match="start"):
        partition_windows(datetime(2020, 1, 1), utc(2020, 2, 1), "daily")


def test_split_range_refuses_a_zero_step():
    with pytest.raises(ValueError, match="step"):
        split_range(utc(2020, 1, 1), utc(2020, 2, 1), Duration())


def test_split_range_refuses_a_step_too_small_to_move():
    with pytest.raises(ValueError, match="too small"):
        split_range(utc(2020, 1, 1), utc(2020, 2, 1), Duration(seconds=1e-9))


# -- property: windows cover [start, end) exactly -----------------------------------------------

MAX_SPAN = {"hourly": timedelta(days=10), "daily": timedelta(days=400),
            "weekly": timedelta(days=1500), "monthly": timedelta(days=3000)}


@st.composite
def ranges(draw):
    unit = draw(st.sampled_from(sorted(PARTITION_UNITS)))
    start = draw(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2030, 12, 31),
                              timezones=st.just(timezone.utc)))
    span = draw(st.timedeltas(min_value=timedelta(0), max_value=MAX_SPAN[unit]))
    return unit, start, start + span


@settings(max_examples=150, deadline=None)
@given(ranges())
def test_windows_cover_the_range_without_gap_or_overlap(case):
    unit, start, end = case
    windows = partition_windows(start, end, unit)
    if start >= end:
        assert windows == []
        return
    assert windows[0][0] == start
    assert windows[-1][1] == end
    assert all(lower < upper for lower, upper in windows)
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:]))
    # Every boundary is start + k * unit, computed from start.
    for k, (lower, _) in enumerate(windows):
        assert lower == PARTITION_UNITS[unit].add_to(start, times=k)
    full = partition_windows(start, end, unit, allow_partial=False)
    assert full == windows[:len(full)]
    assert len(windows) - len(full) in (0, 1)
    if full:
        assert full[-1][1] == PARTITION_UNITS[unit].add_to(start, times=len(full))
