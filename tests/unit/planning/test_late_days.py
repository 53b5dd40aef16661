"""Days to (re)build for late-arriving rows, and the conservation of every row."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.planning.late_days import LateDaysPlan, conservation_check, days_to_process

START = date(2025, 1, 1)


def d(day: int) -> date:
    return START + timedelta(days=day - 1)


def plan(new_rows, skipped=None, *, reprocess_days=1, min_rows_to_process=10, start_date=START):
    return days_to_process(new_rows, skipped or {}, reprocess_days=reprocess_days,
                           min_rows_to_process=min_rows_to_process, start_date=start_date)


def test_on_time_rows_rebuild_their_day():
    assert plan({(d(5), d(5)): 3}) == LateDaysPlan(days=[d(5)], skipped={})


def test_a_row_exactly_reprocess_days_late_is_on_time():
    assert plan({(d(5), d(6)): 1}).days == [d(5)]
    assert plan({(d(5), d(7)): 1}).days == []


def test_with_reprocess_days_zero_only_same_day_loads_are_on_time():
    assert plan({(d(5), d(5)): 1}, reprocess_days=0).days == [d(5)]
    assert plan({(d(5), d(6)): 1}, reprocess_days=0) == LateDaysPlan(days=[], skipped={d(5): 1})


def test_late_rows_below_the_threshold_are_counted_as_skipped():
    result = plan({(d(2), d(9)): 3}, {d(2): 4})
    assert result == LateDaysPlan(days=[], skipped={d(2): 7})


def test_late_rows_reaching_the_threshold_rebuild_the_day_and_reset_its_count():
    result = plan({(d(2), d(9)): 6}, {d(2): 4, d(3): 2})
    assert result == LateDaysPlan(days=[d(2)], skipped={d(3): 2})


def test_an_on_time_row_rebuilds_a_day_with_late_rows_and_skipped_ones():
    result = plan({(d(8), d(8)): 1, (d(8), d(1)): 0, (d(8), d(20)): 2}, {d(8): 5})
    assert result == LateDaysPlan(days=[d(8)], skipped={})


def test_a_mixed_run():
    new_rows = {(d(9), d(9)): 100, (d(9), d(10)): 20, (d(3), d(10)): 2, (d(1), d(10)): 9}
    result = plan(new_rows, {d(1): 1, d(4): 3})
    assert result == LateDaysPlan(days=[d(1), d(9)], skipped={d(3): 2, d(4): 3})


def test_min_rows_one_rebuilds_every_day_with_new_rows():
    result = plan({(d(1), d(30)): 1, (d(2), d(30)): 4}, min_rows_to_process=1)
    assert result.days == [d(1), d(2)]


def test_days_before_start_date_are_ignored_entirely():
    result = plan({(d(0), d(1)): 5, (d(-10), d(1)): 50}, {d(-10): 2})
    assert result == LateDaysPlan(days=[], skipped={d(-10): 2})


def test_no_new_rows_gives_an_empty_plan_and_keeps_counts():
    assert plan({}, {d(2): 4, d(3): 0}) == LateDaysPlan(days=[], skipped={d(2): 4})


def test_rows_loaded_before_their_event_day_are_on_time():
    assert plan({(d(5), d(4)): 1}, reprocess_days=0).days == [d(5)]


def test_plan_days_and_skipped_are_sorted():
    result = plan({(d(9), d(20)): 1, (d(2), d(20)): 1, (d(7), d(7)): 1, (d(3), d(3)): 1})
    assert result.days == [d(3), d(7)]
    assert list(result.skipped) == [d(2), d(9)]


@pytest.mark.parametrize("setting, value", [
    ("min_rows_to_process", 0), ("min_rows_to_process", -3), ("reprocess_days", -1),
    ("reprocess_days", 1.5),
])
def test_bad_settings_are_refused_with_their_name(setting, value):
    with pytest.raises(ValueError, match=f"{setting}={value!r} is not accepted"):
        plan({}, **{setting: value})


@pytest.mark.parametrize("new_rows, skipped, name", [
    ({(d(1), d(1)): -1}, {}, "new_rows"),
    ({(d(1), d(1)): 1.5}, {}, "new_rows"),
    ({d(1): 1}, {}, "new_rows"),
    ({(datetime(2025, 1, 1), d(1)): 1}, {}, "event_day"),
    ({}, {d(1): -1}, "skipped"),
])
def test_bad_counts_and_days_are_refused(new_rows, skipped, name):
    with pytest.raises(ValueError, match=name):
        plan(new_rows, skipped)


# -- conservation_check ---------------------------------------------------------------------

def test_conservation_check_is_empty_when_every_row_is_accounted_for():
    assert conservation_check({d(1): 10, d(2): 5}, {d(1): 7, d(2): 5}, {d(1): 3}) == {}


def test_conservation_check_reports_lost_and_double_counted_rows():
    assert conservation_check({d(1): 10, d(2): 5}, {d(1): 7, d(2): 5, d(3): 1}, {d(2): 2}) == {
        d(1): 3, d(2): -2, d(3): -1}


# -- properties: no row is ever lost --------------------------------------------------------

days = st.integers(min_value=-3, max_value=12).map(d)
new_rows_strategy = st.dictionaries(
    st.tuples(days, st.integers(min_value=-1, max_value=6)).map(
        lambda pair: (pair[0], pair[0] + timedelta(days=pair[1]))),
    st.integers(min_value=0, max_value=8), max_size=12)
skipped_strategy = st.dictionaries(days, st.integers(min_value=0, max_value=20), max_size=8)
knobs = dict(reprocess_days=st.integers(min_value=0, max_value=3),
             min_rows_to_process=st.integers(min_value=1, max_value=15))


@settings(max_examples=200, deadline=None)
@given(new_rows=new_rows_strategy, skipped=skipped_strategy, **knobs)
def test_every_new_row_is_rebuilt_or_counted_as_skipped(new_rows, skipped, reprocess_days,
                                                         min_rows_to_process):
    result = plan(new_rows, skipped, reprocess_days=reprocess_days,
                  min_rows_to_process=min_rows_to_process)
    rows_by_day: dict[date, int] = {}
    for (event_day, _), rows in new_rows.items():
        rows_by_day[event_day] = rows_by_day.get(event_day, 0) + rows
    for day in rows_by_day.keys() | skipped.keys():
        new = rows_by_day.get(day, 0)
        if day >= START and new > 0:
            assert (day in result.days) != (
                result.skipped.get(day) == skipped.get(day, 0) + new)
        else:
            assert day not in result.days
            assert result.skipped.get(day, 0) == skipped.get(day, 0)
    assert 0 not in result.skipped.values()
    assert result.days == sorted(result.days)


@settings(max_examples=100, deadline=None)
@given(runs=st.lists(new_rows_strategy, max_size=6), **knobs)
def test_over_many_runs_aggregated_plus_skipped_equals_total(runs, reprocess_days,
                                                             min_rows_to_process):
    """Simulate the filtered events table, the daily aggregates and the skipped counts."""
    total: dict[date, int] = {}
    aggregated: dict[date, int] = {}
    skipped: dict[date, int] = {}
    for new_rows in runs:
        for (event_day, _), rows in new_rows.items():
            if event_day >= START:  # the filtered events table keeps only days from start_date
                total[event_day] = total.get(event_day, 0) + rows
        result = plan(new_rows, skipped, reprocess_days=reprocess_days,
                      min_rows_to_process=min_rows_to_process)
        for day in result.days:
            aggregated[day] = total[day]  # a rebuild reads every filtered row of the day
        skipped = result.skipped
        assert conservation_check(total, aggregated, skipped) == {}
