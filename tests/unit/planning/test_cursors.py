"""The datetime cursor: windows from the saved state, and a state that only moves forward."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.planning.cursors import DatetimeCursor
from tests.helpers import utc

LATER = utc(2030, 1, 1)


def test_seed_002_five_daily_windows_last_one_partial():
    cursor = DatetimeCursor(start=utc(2022, 1, 1), end=utc(2022, 1, 5, 12), step="P1D")
    assert cursor.windows(None, LATER) == [
        (utc(2022, 1, 1), utc(2022, 1, 2)),
        (utc(2022, 1, 2), utc(2022, 1, 3)),
        (utc(2022, 1, 3), utc(2022, 1, 4)),
        (utc(2022, 1, 4), utc(2022, 1, 5)),
        (utc(2022, 1, 5), utc(2022, 1, 5, 12)),
    ]


def test_lookback_applies_to_the_saved_state_only():
    cursor = DatetimeCursor(start=utc(2022, 2, 1), end=utc(2022, 3, 1), step="P1D",
                            lookback_window="P31D")
    # Without a state the cursor starts at start, not 31 days before it.
    assert cursor.windows(None, LATER)[0][0] == utc(2022, 2, 1)
    # A state is moved back by the lookback, but never before start.
    assert cursor.windows(utc(2022, 2, 20), LATER)[0][0] == utc(2022, 2, 1)
    assert len(cursor.windows(utc(2022, 2, 20), LATER)) == 28


def test_lookback_moves_the_state_back():
    cursor = DatetimeCursor(start=utc(2022, 2, 1), end=utc(2022, 3, 1), step="P1D",
                            lookback_window="P1D")
    windows = cursor.windows(utc(2022, 2, 25, 6), LATER)
    assert windows[0] == (utc(2022, 2, 24, 6), utc(2022, 2, 25, 6))
    assert windows[-1] == (utc(2022, 2, 28, 6), utc(2022, 3, 1))


def test_without_lookback_the_record_at_the_state_is_read_again():
    cursor = DatetimeCursor(start=utc(2022, 1, 1))
    state = utc(2022, 1, 3, 8)
    (window,) = cursor.windows(state, utc(2022, 1, 4))
    assert window == (state, utc(2022, 1, 4))


def test_end_is_capped_at_now_and_defaults_to_now():
    now = utc(2022, 1, 2, 12)
    assert DatetimeCursor(start=utc(2022, 1, 1), end=LATER).windows(None, now) == [
        (utc(2022, 1, 1), now)]
    assert DatetimeCursor(start=utc(2022, 1, 1)).windows(None, now) == [(utc(2022, 1, 1), now)]


@pytest.mark.parametrize("state, now", [
    (None, utc(2022, 1, 1)),  # now == start
    (None, utc(2021, 12, 31)),  # now before start
    (utc(2022, 1, 5), utc(2022, 1, 5)),  # state at now
    (utc(2022, 1, 6), utc(2022, 1, 5)),  # state after now
])
def test_no_windows_when_begin_is_not_before_end(state, now):
    assert DatetimeCursor(start=utc(2022, 1, 1), step="PT1H").windows(state, now) == []


def test_monthly_step_does_not_drift():
    cursor = DatetimeCursor(start=utc(2024, 1, 31), end=utc(2024, 5, 1), step="P1M")
    assert [start for start, _ in cursor.windows(None, LATER)] == [
        utc(2024, 1, 31), utc(2024, 2, 29), utc(2024, 3, 31), utc(2024, 4, 30)]


def test_next_state_takes_the_greatest_value_inside_the_window():
    cursor = DatetimeCursor(start=utc(2022, 1, 1))
    window = (utc(2022, 1, 1), utc(2022, 1, 2))
    observed = [utc(2022, 1, 1), utc(2022, 1, 1, 18), utc(2022, 1, 2), utc(2021, 12, 31)]
    assert cursor.next_state(None, window, observed) == utc(2022, 1, 1, 18)


def test_next_state_never_moves_backwards():
    cursor = DatetimeCursor(start=utc(2022, 1, 1))
    window = (utc(2022, 1, 1), utc(2022, 1, 2))
    assert cursor.next_state(utc(2022, 1, 1, 20), window, [utc(2022, 1, 1, 3)]) == \
        utc(2022, 1, 1, 20)


def test_next_state_without_values_keeps_the_state():
    cursor = DatetimeCursor(start=utc(2022, 1, 1))
    window = (utc(2022, 1, 1), utc(2022, 1, 2))
    assert cursor.next_state(None, window, []) is None
    assert cursor.next_state(utc(2021, 12, 1), window, [utc(2022, 1, 2)]) == utc(2021, 12, 1)


def test_window_start_is_inside_and_window_end_is_not():
    cursor = DatetimeCursor(start=utc(2022, 1, 1))
    window = (utc(2022, 1, 1), utc(2022, 1, 2))
    assert cursor.next_state(None, window, [utc(2022, 1, 1)]) == utc(2022, 1, 1)
    assert cursor.next_state(None, window, [utc(2022, 1, 2)]) is None


@pytest.mark.parametrize("kwargs, name", [
    ({"start": datetime(2022, 1, 1)}, "start"),
    ({"start": utc(2022, 1, 2), "end": utc(2022, 1, 1)}, "end"),
    ({"start": utc(2022, 1, 1), "step": "P0D"}, "step"),
    ({"start": utc(2022, 1, 1), "step": "daily"}, "duration"),
    ({"start": utc(2022, 1, 1), "lookback_window": "-P1D"}, "duration"),
])
def test_bad_settings_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DatetimeCursor(**kwargs)


def test_naive_now_and_observed_values_are_refused():
    cursor = DatetimeCursor(start=utc(2022, 1, 1))
    with pytest.raises(ValueError, match="now"):
        cursor.windows(None, datetime(2022, 1, 2))
    with pytest.raises(ValueError, match="observed"):
        cursor.next_state(None, (utc(2022, 1, 1), utc(2022, 1, 2)), [datetime(2022, 1, 1, 1)])


# -- property: the cursor never moves backwards and never skips a value -------------------

START = utc(2022, 1, 1)
minutes = st.integers(min_value=0, max_value=10 * 24 * 60)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(minutes, max_size=40),
    run_times=st.lists(minutes, min_size=1, max_size=8),
    stops=st.lists(st.integers(min_value=0, max_value=12), min_size=8, max_size=8),
    step=st.sampled_from([None, "PT6H", "P1D", "P2D"]),
    lookback=st.sampled_from([None, "PT0S", "PT1H", "P1D"]),
)
def test_cursor_never_moves_backwards_and_never_skips_a_value(values, run_times, stops, step,
                                                              lookback):
    """Values exist from the start; each run reads its windows in order and may stop early."""
    cursor = DatetimeCursor(start=START, step=step, lookback_window=lookback)
    values = [START + timedelta(minutes=m) for m in values]
    read: set[datetime] = set()
    state = None
    for run, now in enumerate(sorted(START + timedelta(minutes=m) for m in run_times)):
        windows = cursor.windows(state, now)
        assert all(a[1] == b[0] for a, b in zip(windows, windows[1:]))
        # A run that stops early (a crash) has read only its first windows.
        last_run = run == len(run_times) - 1
        for window in windows if last_run else windows[:stops[run]]:
            observed = [v for v in values if window[0] <= v < window[1]]
            read.update(observed)
            new_state = cursor.next_state(state, window, observed)
            assert state is None or new_state >= state
            state = new_state
    final_now = START + timedelta(minutes=max(run_times))
    assert {v for v in values if v < final_now} <= read
