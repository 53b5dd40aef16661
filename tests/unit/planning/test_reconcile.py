"""planning.reconcile: which load hours run, from the source's hours and what they were processed from."""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.planning.reconcile import (
    RUN_AGAIN,
    HoursPlan,
    ProcessedAtVersion,
    ProcessedHour,
    closed_hours,
    failed_hours_run_again,
    hours_only_rearranged,
    hours_to_run,
    skipped_hours_run_again,
    split_ranges,
    versions_on_this_log,
)

T = datetime(2026, 1, 5, tzinfo=timezone.utc)
H = timedelta(hours=1)
ZERO = timedelta(0)


def at(hour: float) -> datetime:
    return T + timedelta(hours=hour)


def done(fingerprint: str, hour_processed: float = -1) -> ProcessedHour:
    return ProcessedHour(fingerprint, at(hour_processed))


def plan(source, processed=None, *, now=10, excluded=(), grace=ZERO, abstinent=ZERO, limit=30,
         lookback=0, max_hours=None) -> HoursPlan:
    return hours_to_run({at(h): f for h, f in source.items()},
                        {at(h): p for h, p in (processed or {}).items()},
                        excluded={at(h) for h in excluded}, start=T, now=at(now),
                        grace=grace, abstinent=abstinent, backfill_limit_days=limit, lookback_window_hours=lookback,
                        max_hours_per_run=max_hours)


def test_a_range_longer_than_max_hours_per_run_runs_as_several_oldest_first():
    source = {h: f"f{h}" for h in (0, 1, 2, 3, 4, 6, 7)}  # 05:00 has no data: bridged
    assert plan(source, now=9).ranges == [(at(0), at(8))]
    assert plan(source, now=9, max_hours=3).ranges == [(at(0), at(3)), (at(3), at(6)), (at(6), at(8))]
    assert plan(source, now=9, max_hours=3).hours == plan(source, now=9).hours  # the same hours, cut
    assert plan(source, now=9, max_hours=8).ranges == [(at(0), at(8))]


def test_split_ranges_cuts_each_range_and_refuses_a_limit_below_one_hour():
    assert split_ranges([(at(0), at(5)), (at(7), at(8))], 2) == [
        (at(0), at(2)), (at(2), at(4)), (at(4), at(5)), (at(7), at(8))]
    assert split_ranges([], 2) == []
    with pytest.raises(ValueError, match="max_hours_per_run"):
        split_ranges([(at(0), at(5))], 0)


def test_every_closed_hour_with_data_runs_once_then_never_again():
    first = plan({0: "a", 1: "b", 3: "c", 9: "d"}, now=9.5)
    assert first.ranges == [(at(0), at(4))]  # 02:00 has no data: one run; 09:00 is still open
    assert first.new == [at(0), at(1), at(3)] and not first.changed and first.last_success is None
    again = plan({0: "a", 1: "b", 3: "c", 9: "d"}, {0: done("a"), 1: done("b"), 3: done("c")}, now=9.5)
    assert again.ranges == [] and again.last_success == at(9)


def test_a_gap_left_by_a_later_hour_processed_by_hand_is_run_and_stops_last_success():
    result = plan({0: "a", 1: "b", 2: "c", 3: "d"}, {0: done("a"), 2: done("c"), 3: done("d")}, now=5)
    assert result.ranges == [(at(1), at(2))] and result.new == [at(1)]
    assert result.last_success == at(1)  # the cursor stops at the first gap


def test_a_file_landing_in_an_hour_processed_long_ago_runs_that_hour_again():
    source = {h: f"f{h}" for h in range(48)}
    processed = {h: done(f"f{h}") for h in range(48)}
    source[3] = "f3+late-file"
    result = plan(source, processed, now=60)
    assert result.ranges == [(at(3), at(4))] and result.changed == [at(3)]


def test_an_hour_whose_data_is_gone_runs_again_to_remove_its_rows():
    result = plan({0: "a"}, {0: done("a"), 1: done("b")}, now=5)
    assert result.removed == [at(1)] and result.ranges == [(at(1), at(2))]
    # An hour processed when it held nothing and still holding nothing is done.
    assert plan({}, {1: done("")}, now=5).ranges == []


def test_excluded_hours_are_left_out_but_the_hours_around_them_run():
    result = plan({0: "a", 1: "b", 2: "c"}, excluded=[1], now=5)
    assert result.ranges == [(at(0), at(1)), (at(2), at(3))]


def test_due_hours_apart_by_less_than_a_day_of_hours_without_data_run_as_one_range():
    assert plan({0: "a", 24: "b"}, now=30).ranges == [(at(0), at(25))]
    assert plan({0: "a", 25: "b"}, now=30).ranges == [(at(0), at(1)), (at(25), at(26))]
    # Never over an hour with data that is done, nor over an excluded one.
    processed = {1: done("x")}
    assert plan({0: "a", 1: "x", 2: "b"}, processed, now=5).ranges == [(at(0), at(1)), (at(2), at(3))]
    assert plan({0: "a", 2: "b"}, excluded=[1], now=5).ranges == [(at(0), at(1)), (at(2), at(3))]


def test_grace_delays_an_hours_first_run_and_abstinent_its_rerun():
    new_hour = plan({4: "a"}, now=5.5, grace=timedelta(minutes=45))
    assert new_hour.ranges == [] and new_hour.waiting == [at(4)]
    assert plan({4: "a"}, now=5.8, grace=timedelta(minutes=45)).new == [at(4)]
    changed = {4: "a2"}, {4: done("a", hour_processed=5.2)}
    assert plan(*changed, now=5.5, abstinent=timedelta(hours=1)).waiting == [at(4)]
    assert plan(*changed, now=6.3, abstinent=timedelta(hours=1)).changed == [at(4)]
    # Processed at a wall-clock time after `now` (a run replaying the past, `run --until T`):
    # a changed hour is due at once.
    replayed = {4: "a2"}, {4: done("a", hour_processed=500)}
    assert plan(*replayed, now=6).changed == [at(4)]
    assert plan(*replayed, now=6, abstinent=timedelta(hours=1)).changed == [at(4)]


def test_backfill_limit_days_caps_a_run_and_the_rest_is_deferred():
    source = {h: "x" for h in range(0, 24 * 5, 6)}
    result = plan(source, now=24 * 5, limit=2)
    assert result.ranges == [(at(0), at(43))]  # the hours between, without data, run along
    assert result.deferred == [at(h) for h in range(48, 24 * 5, 6)]


def test_lookback_window_hours_reruns_hours_before_last_success():
    source = {h: "x" for h in range(6)}
    processed = {h: done("x") for h in range(6)}
    assert plan(source, processed, now=8).ranges == []
    result = plan(source, processed, now=8, lookback=2)
    assert result.lookback == [at(4), at(5)] and result.ranges == [(at(4), at(6))]


def test_lookback_hours_never_hold_due_hours_back():
    # Processed up to 05:00, then data again 30 h later, a 1-day backfill
    # window. The look-back hours anchored the window: the due hours stayed deferred forever.
    source = {h: "x" for h in [*range(6), 36, 37]}
    processed = {h: done("x") for h in range(6)}
    result = plan(source, processed, now=40, limit=1, lookback=6)
    assert result.new == [at(36), at(37)] and result.deferred == []
    assert result.hours == [at(h) for h in (0, 1, 2, 3, 4, 5, 36, 37)]


@settings(max_examples=200, deadline=None)
@given(source=st.dictionaries(st.integers(0, 24 * 6), st.sampled_from(["a", "b"]), max_size=40),
       processed=st.dictionaries(st.integers(0, 24 * 6), st.sampled_from(["", "a", "b"]), max_size=20),
       lookback=st.sampled_from([0, 1, 6, 30]), max_hours=st.sampled_from([None, 5]))
def test_any_sequence_of_plans_reaches_the_end_of_the_source(source, processed, lookback, max_hours):
    """Running each plan as the runner does (plan again while hours are deferred) ends, in at
    most as many plans as there are due hours, with nothing due and nothing deferred."""
    now = 24 * 6 + 2
    state = {h: done(f) for h, f in processed.items()}
    due_at_first = len(plan(source, state, now=now, limit=1, lookback=lookback).deferred) + 1
    for _ in range(due_at_first + 1):
        result = plan(source, state, now=now, limit=1, lookback=lookback, max_hours=max_hours)
        for hour in result.hours:
            state[int((hour - T) / H)] = done(source.get(int((hour - T) / H), ""))
        if not result.deferred:
            break
    else:
        raise AssertionError(f"still deferring after {due_at_first + 1} plans: {result.deferred[:3]}")
    final = plan(source, state, now=now, limit=1, lookback=lookback)
    assert not (final.new or final.changed or final.removed or final.deferred)


def test_closed_hours_start_at_starts_hour_and_end_before_the_open_hour():
    assert closed_hours(T + timedelta(minutes=30), at(3.2)) == [at(0), at(1), at(2)]
    assert closed_hours(T, at(0.5)) == []


@pytest.mark.parametrize("bad", [{"backfill_limit_days": 0}, {"grace": timedelta(-1)},
                                 {"lookback_window_hours": -1}])
def test_bad_arguments_name_themselves(bad):
    arguments = dict(excluded=(), start=T, now=at(5), grace=ZERO, abstinent=ZERO, backfill_limit_days=1)
    arguments.update(bad)
    with pytest.raises(ValueError, match=next(iter(bad))):
        hours_to_run({}, {}, **arguments)


hours = st.integers(min_value=0, max_value=30)


@settings(max_examples=200, deadline=None)
@given(source=st.dictionaries(hours, st.sampled_from(["a", "b"])),
       processed=st.dictionaries(hours, st.sampled_from(["", "a", "b"])),
       excluded=st.sets(hours))
def test_running_the_plan_leaves_nothing_due_but_excluded_hours(source, processed, excluded):
    now = 31
    before = plan(source, {h: done(f) for h, f in processed.items()}, now=now, excluded=excluded)
    after_processed = {h: done(f) for h, f in processed.items()}
    for hour in before.hours:
        after_processed[int((hour - T) / H)] = done(source.get(int((hour - T) / H), ""))
    after = plan(source, after_processed, now=now, excluded=excluded)
    assert after.ranges == []
    differing = {h for h in set(source) | set(processed) if processed.get(h, None) != source.get(h)
                 and not (h not in source and processed.get(h) == "")}
    ran = {int((h - T) / H) for h in before.hours}
    assert differing - excluded <= ran
    assert all(h not in source and h not in excluded for h in ran - differing)  # empty hours run along


def test_only_rearranged_hours_are_those_no_later_data_commit_touched():
    h0, h1, h2 = (datetime(2026, 1, 5, h, tzinfo=timezone.utc) for h in (1, 2, 3))
    processed_at = {h0: 3, h1: 3, h2: 5}
    commits = [(4, frozenset()),  # a compaction: touches no hour
               (5, frozenset({h1})),  # new rows in h1
               (6, frozenset())]
    assert hours_only_rearranged(processed_at, commits) == {h0, h2}
    # A commit that could not be read may have touched any hour after the version it follows.
    assert hours_only_rearranged(processed_at, [*commits, (7, None)]) == set()
    assert hours_only_rearranged({h2: 7}, [*commits, (7, None)]) == {h2}


def test_only_hours_processed_from_the_log_the_source_has_now_follow_its_commits():
    h0, h1, h2, h3 = (datetime(2026, 1, 5, h, tzinfo=timezone.utc) for h in (1, 2, 3, 4))
    processed_at = {h0: ProcessedAtVersion("t1", 3), h1: ProcessedAtVersion("t0", 3),  # another table
                    h2: ProcessedAtVersion("t1", 9),  # a version the log has not reached: it restarted
                    h3: ProcessedAtVersion(None, 2)}  # recorded before table ids were kept
    assert versions_on_this_log(processed_at, "t1", 5) == {h0: 3, h3: 2}
    assert versions_on_this_log(processed_at, "t2", 5) == {h3: 2}
    assert versions_on_this_log(processed_at, None, 1) == {}


def test_failed_hours_run_again_whatever_the_ledger_says():
    t = datetime(2026, 1, 5, 1, tzinfo=timezone.utc)
    processed = {t: ProcessedHour("f@r", t), t + H: ProcessedHour("g@r", t)}
    again = failed_hours_run_again(processed, {t})
    assert again[t].fingerprint == RUN_AGAIN and again[t + H] == processed[t + H]
    assert failed_hours_run_again(processed, set()) == processed


def test_a_rerun_of_history_never_holds_the_present_back():
    # A rules change makes two processed days due again; three new hours land meanwhile. With a
    # one-day backfill window the history runs a day at a time, and the new hours run now
    # (the sensor takes their range first), not after the history.
    source = {h: "x" for h in range(51)}
    processed = {h: done("old-rules") for h in range(48)}
    result = plan(source, processed, now=52, limit=1)
    assert result.present == [at(48), at(49), at(50)]
    assert result.ranges == [(at(0), at(24)), (at(48), at(51))]
    assert result.deferred == [at(h) for h in range(24, 48)]
    assert result.next_range() == (at(48), at(51))


def test_without_a_present_the_oldest_range_runs_first():
    source = {h: "x" for h in range(30)}
    first_run = plan(source, now=31, limit=1)  # nothing processed yet: all of it is history
    assert first_run.present == [] and first_run.next_range() == (at(0), at(24))
    assert plan({}, now=5).next_range() is None


def test_a_skipped_hour_runs_once_more_unless_processed_after_the_skip():
    h1, h2, h3 = (datetime(2026, 1, 5, h, tzinfo=timezone.utc) for h in (1, 2, 3))
    skip_at = datetime(2026, 1, 6, tzinfo=timezone.utc)
    processed = {h1: ProcessedHour("f1", skip_at - timedelta(hours=1)),
                 h2: ProcessedHour("f2", skip_at + timedelta(hours=1))}
    out = skipped_hours_run_again(processed, {h1: skip_at, h2: skip_at, h3: skip_at})
    assert out[h1] == ProcessedHour(RUN_AGAIN, skip_at)  # processed before the skip: due, as empty
    assert out[h2] == processed[h2]  # the run after the skip already read it as empty
    assert out[h3] == ProcessedHour(RUN_AGAIN, skip_at)  # never processed (a failed first run): due too
    assert skipped_hours_run_again(processed, {}) == processed
