"""Time and unit watermarks, with the worked examples of LinkedIn-style watermarks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from incremental_assets.planning.watermarks import effective_cutoff, units_to_run, windows_to_run
from incremental_assets.planning.windows import partition_windows, resolve_bound
from tests.helpers import utc

DAY = timedelta(days=1)
NONE = timedelta(0)


def succeeded(windows):
    """High watermarks after every window ran successfully: each window's end."""
    return {start: end for start, end in windows}


# -- effective_cutoff ---------------------------------------------------------------------

def test_cutoff_is_start_without_a_high_watermark():
    assert effective_cutoff(None, start=utc(2020, 1, 1), grace_period=3 * DAY,
                            abstinent_period=DAY) == utc(2020, 1, 1)


def test_cutoff_is_hwm_plus_abstinent_minus_grace():
    assert effective_cutoff(utc(2020, 1, 15), start=utc(2020, 1, 1), grace_period=3 * DAY,
                            abstinent_period=DAY) == utc(2020, 1, 13)


@pytest.mark.parametrize("name", ["grace_period", "abstinent_period"])
def test_negative_periods_are_refused(name):
    periods = {"grace_period": NONE, "abstinent_period": NONE, name: -DAY}
    with pytest.raises(ValueError, match=name):
        effective_cutoff(None, start=utc(2020, 1, 1), **periods)
    with pytest.raises(ValueError, match=name):
        windows_to_run([], {}, **periods)


# -- one unpartitioned watermark from 2020-01-01 to P0D -----------------------------

def watermark_window(run_day: datetime):
    return [(resolve_bound("2020-01-01", run_day), resolve_bound("P0D", run_day))]


def test_seed_grace_example_first_run_then_three_grace_days():
    first = watermark_window(utc(2020, 1, 15, 8))
    assert windows_to_run(first, {}, grace_period=3 * DAY, abstinent_period=NONE) == [
        (utc(2020, 1, 1), utc(2020, 1, 15))]
    hwm = succeeded(first)
    second = watermark_window(utc(2020, 1, 16, 8))
    assert windows_to_run(second, hwm, grace_period=3 * DAY, abstinent_period=NONE) == [
        (utc(2020, 1, 12), utc(2020, 1, 16))]


def test_seed_abstinent_example_skips_a_day_then_runs_again():
    hwm = succeeded(watermark_window(utc(2020, 1, 15)))
    on_16th = watermark_window(utc(2020, 1, 16))
    assert windows_to_run(on_16th, hwm, grace_period=NONE, abstinent_period=DAY) == []
    on_17th = watermark_window(utc(2020, 1, 17))
    assert windows_to_run(on_17th, hwm, grace_period=NONE, abstinent_period=DAY) == [
        (utc(2020, 1, 16), utc(2020, 1, 17))]


# -- partitioned watermarks -------------------------------------------------------

def test_seed_daily_example_grace_three_days():
    first = partition_windows(utc(2020, 1, 1), utc(2020, 2, 21), "daily")
    assert windows_to_run(first, {}, grace_period=3 * DAY, abstinent_period=NONE) == first
    hwm = succeeded(first)
    assert hwm[utc(2020, 2, 20)] == utc(2020, 2, 21)

    second = partition_windows(utc(2020, 1, 1), utc(2020, 2, 22), "daily")
    to_run = windows_to_run(second, hwm, grace_period=3 * DAY, abstinent_period=NONE)
    # Cut-off = 2020-02-21 - 3 days = 2020-02-18: the partitions whose high watermarks are
    # 02-19, 02-20 and 02-21 run again (they start 02-18, 02-19, 02-20), and 02-21 is new.
    assert to_run == [(utc(2020, 2, d), utc(2020, 2, d + 1)) for d in (18, 19, 20, 21)]
    assert [hwm.get(start) for start, _ in to_run] == [
        utc(2020, 2, 19), utc(2020, 2, 20), utc(2020, 2, 21), None]


def test_daily_partitions_starting_02_19_rerun_with_two_grace_days():
    hwm = succeeded(partition_windows(utc(2020, 1, 1), utc(2020, 2, 21), "daily"))
    second = partition_windows(utc(2020, 1, 1), utc(2020, 2, 22), "daily")
    to_run = windows_to_run(second, hwm, grace_period=2 * DAY, abstinent_period=NONE)
    assert [start for start, _ in to_run] == [utc(2020, 2, 19), utc(2020, 2, 20), utc(2020, 2, 21)]


def test_seed_monthly_example_reruns_only_the_partial_month_after_the_cutoff():
    first = partition_windows(utc(2019, 1, 1), utc(2020, 2, 21), "monthly")
    hwm = succeeded(first)
    second = partition_windows(utc(2019, 1, 1), utc(2020, 2, 22), "monthly")
    # Highest watermark 2020-02-21, 3 grace days: cut-off 2020-02-18. Full months end before it.
    assert windows_to_run(second, hwm, grace_period=3 * DAY, abstinent_period=NONE) == [
        (utc(2020, 2, 18), utc(2020, 2, 22))]


def test_failed_partition_is_treated_as_new_and_runs_whole():
    windows = partition_windows(utc(2020, 1, 1), utc(2020, 2, 21), "daily")
    hwm = succeeded(windows)
    hwm[utc(2020, 1, 10)] = utc(2020, 1, 10)  # failed: the watermark stayed at the start
    to_run = windows_to_run(windows, hwm, grace_period=3 * DAY, abstinent_period=NONE)
    assert to_run[0] == (utc(2020, 1, 10), utc(2020, 1, 11))
    assert to_run[1:] == [(utc(2020, 2, d), utc(2020, 2, d + 1)) for d in (18, 19, 20)]


def test_failed_watermarks_do_not_raise_the_overall_cutoff():
    windows = [(utc(2020, 1, 1), utc(2020, 1, 2)), (utc(2020, 1, 2), utc(2020, 1, 3))]
    hwm = {utc(2020, 1, 1): utc(2020, 1, 2), utc(2020, 1, 2): utc(2020, 1, 2)}
    assert windows_to_run(windows, hwm, grace_period=NONE, abstinent_period=NONE) == [
        (utc(2020, 1, 2), utc(2020, 1, 3))]


def test_a_window_with_history_runs_only_after_its_own_cutoff():
    windows = [(utc(2020, 1, 1), utc(2020, 1, 11))]
    hwm = {utc(2020, 1, 1): utc(2020, 1, 8)}
    assert windows_to_run(windows, hwm, grace_period=DAY, abstinent_period=NONE) == [
        (utc(2020, 1, 7), utc(2020, 1, 11))]


def test_end_equal_to_cutoff_does_not_run():
    windows = [(utc(2020, 1, 1), utc(2020, 1, 2))]
    hwm = {utc(2020, 1, 1): utc(2020, 1, 2)}
    assert windows_to_run(windows, hwm, grace_period=NONE, abstinent_period=NONE) == []


def test_zero_width_windows_are_dropped():
    windows = [(utc(2020, 1, 1), utc(2020, 1, 1))]
    assert windows_to_run(windows, {}, grace_period=NONE, abstinent_period=NONE) == []


def test_watermark_keys_match_across_timezones():
    windows = [(utc(2020, 1, 1), utc(2020, 1, 2))]
    plus_one = timezone(timedelta(hours=1))
    hwm = {datetime(2020, 1, 1, 1, tzinfo=plus_one): datetime(2020, 1, 2, 1, tzinfo=plus_one)}
    assert windows_to_run(windows, hwm, grace_period=NONE, abstinent_period=NONE) == []


def test_inverted_windows_are_refused():
    with pytest.raises(ValueError, match=r"windows\[0\]"):
        windows_to_run([(utc(2020, 1, 2), utc(2020, 1, 1))], {}, grace_period=NONE,
                       abstinent_period=NONE)


def test_naive_windows_are_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        windows_to_run([(datetime(2020, 1, 1), utc(2020, 1, 2))], {}, grace_period=NONE,
                       abstinent_period=NONE)


# -- unit watermarks -----------------------------------------------------------------------

def test_seed_file_download_example_abstinent_seven_days():
    """A server keeps 7 daily files; each file is a unit; abstinence stops repeat downloads."""
    def units(run_day, days):
        window = [(utc(2020, 1, 1), run_day)]
        return {f"file202001{d}": window for d in days}

    hwm = {"file20200115": {utc(2020, 1, 1): utc(2020, 1, 15)}}  # downloaded on the 15th
    on_16th = units(utc(2020, 1, 16), (15, 16))
    seven = dict(grace_period=NONE, abstinent_period=7 * DAY)
    assert units_to_run(on_16th, hwm, **seven) == {
        "file20200116": [(utc(2020, 1, 1), utc(2020, 1, 16))]}
    # With no abstinence the 15th's file is downloaded again over [01-15, 01-16).
    assert units_to_run(on_16th, hwm, grace_period=NONE, abstinent_period=NONE) == {
        "file20200115": [(utc(2020, 1, 15), utc(2020, 1, 16))],
        "file20200116": [(utc(2020, 1, 1), utc(2020, 1, 16))]}

    hwm["file20200116"] = {utc(2020, 1, 1): utc(2020, 1, 16)}
    on_17th = units(utc(2020, 1, 17), (15, 16, 17))
    assert list(units_to_run(on_17th, hwm, **seven)) == ["file20200117"]


def test_units_use_their_own_history():
    windows = partition_windows(utc(2020, 1, 1), utc(2020, 1, 5), "daily")
    units = {"web": windows, "mobile": windows}
    hwm = {"web": succeeded(windows)}
    plan = units_to_run(units, hwm, grace_period=DAY, abstinent_period=NONE)
    assert plan["mobile"] == windows
    assert plan["web"] == [(utc(2020, 1, 4), utc(2020, 1, 5))]
