"""Run limits: Snowplow's four run-limit states, in order, and the per-model variant."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from incremental_assets.planning.run_limits import (
    RunLimits,
    RunState,
    get_model_run_limits,
    get_run_limits,
    validate_backfill_limit_days,
)
from tests.helpers import utc

START = utc(2021, 1, 1)
MODELS = ["page_views", "sessions", "users"]
SETTINGS = dict(start_date=START, backfill_limit_days=30, lookback_window_hours=6)


def limits(last_success, models=MODELS, **overrides):
    values = {**SETTINGS, "now": utc(2021, 6, 1), **overrides}
    return get_run_limits(last_success, models, **values)


# -- the four states ------------------------------------------------------------------

def test_first_run_starts_at_start_date_and_backfills_at_most_the_limit():
    result = limits({})
    assert result == RunLimits(RunState.FIRST_RUN, START, START + timedelta(days=30))


def test_first_run_upper_limit_is_capped_at_now():
    result = limits({}, now=utc(2021, 1, 3, 12))
    assert result == RunLimits(RunState.FIRST_RUN, START, utc(2021, 1, 3, 12))


def test_first_run_seed_001_example_one_backfill_day():
    # The seed's "2025-01-01 00:00:00 and 2025-01-01 23:59:59 (non-inclusive)" in half-open form.
    result = get_run_limits({}, ["filtered_events"], start_date=utc(2025, 1, 1),
                            backfill_limit_days=1, lookback_window_hours=0, now=utc(2025, 6, 1))
    assert (result.lower_limit, result.upper_limit) == (utc(2025, 1, 1), utc(2025, 1, 2))


def test_models_outside_the_list_are_not_counted():
    result = limits({"old_model": utc(2021, 3, 1)})
    assert result.state is RunState.FIRST_RUN


def test_new_model_replays_from_start_date_up_to_the_latest_success():
    last = {"page_views": utc(2021, 1, 10), "sessions": utc(2021, 1, 10)}
    result = limits(last)
    assert result == RunLimits(RunState.NEW_MODEL, START, utc(2021, 1, 10))


def test_new_model_upper_limit_is_capped_by_the_backfill_limit():
    last = {"page_views": utc(2021, 5, 1), "sessions": utc(2021, 5, 1)}
    result = limits(last)
    assert result == RunLimits(RunState.NEW_MODEL, START, START + timedelta(days=30))


def test_new_model_wins_over_out_of_sync():
    last = {"page_views": utc(2021, 1, 10), "sessions": utc(2021, 1, 8)}
    assert limits(last).state is RunState.NEW_MODEL


def test_out_of_sync_resumes_from_the_laggard_minus_lookback():
    last = {"page_views": utc(2021, 1, 10), "sessions": utc(2021, 1, 8), "users": utc(2021, 1, 10)}
    result = limits(last)
    assert result == RunLimits(RunState.OUT_OF_SYNC, utc(2021, 1, 7, 18), utc(2021, 1, 10))


def test_out_of_sync_upper_limit_is_capped_by_the_backfill_limit():
    last = {"page_views": utc(2021, 5, 1), "sessions": utc(2021, 1, 8), "users": utc(2021, 5, 1)}
    result = limits(last)
    assert result.state is RunState.OUT_OF_SYNC
    assert result.upper_limit == utc(2021, 1, 8) + timedelta(days=30)


def test_standard_run_matches_the_seed_log_line():
    last = {model: utc(2021, 1, 5, 23, 59, 32) for model in MODELS}
    result = limits(last, now=utc(2021, 1, 7, 23, 59, 32))
    assert result == RunLimits(RunState.STANDARD, utc(2021, 1, 5, 17, 59, 32),
                               utc(2021, 1, 7, 23, 59, 32))
    assert result.describe() == (
        "Standard run: processing loads between 2021-01-05 17:59:32 and 2021-01-07 23:59:32")


def test_standard_run_upper_limit_is_capped_by_the_backfill_limit():
    last = {model: utc(2021, 1, 5) for model in MODELS}
    result = limits(last, backfill_limit_days=1)
    assert result.upper_limit == utc(2021, 1, 6)


def test_fractional_lookback_hours():
    last = {model: utc(2021, 1, 5) for model in MODELS}
    assert limits(last, lookback_window_hours=0.5).lower_limit == utc(2021, 1, 4, 23, 30)


@pytest.mark.parametrize("last, words", [
    ({}, "First run"),
    ({"page_views": utc(2021, 1, 10)}, "New model introduced"),
    ({"page_views": utc(2021, 1, 10), "sessions": utc(2021, 1, 9), "users": utc(2021, 1, 9)},
     "Models out of sync"),
    ({m: utc(2021, 1, 10) for m in MODELS}, "Standard run"),
])
def test_describe_names_every_state(last, words):
    text = limits(last).describe()
    assert text.startswith(f"{words}: processing loads between ")


# -- never past now, zero-width windows -------------------------------------------------

@pytest.mark.parametrize("last, state", [
    ({"page_views": utc(2021, 1, 20)}, RunState.NEW_MODEL),
    ({"page_views": utc(2021, 1, 20), "sessions": utc(2021, 1, 5), "users": utc(2021, 1, 20)},
     RunState.OUT_OF_SYNC),
    ({m: utc(2021, 1, 20) for m in MODELS}, RunState.STANDARD),
])
def test_upper_limit_never_passes_now_even_with_a_future_last_success(last, state):
    now = utc(2021, 1, 10)
    result = limits(last, now=now)
    assert result.state is state
    assert result.upper_limit == now


def test_zero_width_window_is_returned_and_described_as_empty():
    last = {m: utc(2021, 6, 1) for m in MODELS}
    result = limits(last, now=utc(2021, 6, 1), lookback_window_hours=0)
    assert result.lower_limit == result.upper_limit == utc(2021, 6, 1)
    assert result.is_empty
    assert "nothing to process" in result.describe()


def test_limits_are_returned_in_utc():
    plus_two = timezone(timedelta(hours=2))
    last = {m: datetime(2021, 1, 5, 2, tzinfo=plus_two) for m in MODELS}
    result = limits(last, lookback_window_hours=0)
    assert result.lower_limit == utc(2021, 1, 5)
    assert result.lower_limit.tzinfo == timezone.utc


# -- validation -------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
def test_backfill_limit_days_below_one_or_not_whole_is_refused(value):
    with pytest.raises(ValueError, match="backfill_limit_days"):
        limits({}, backfill_limit_days=value)
    with pytest.raises(ValueError, match="backfill_limit_days"):
        validate_backfill_limit_days(value)


def test_backfill_limit_days_message_names_value_and_range():
    with pytest.raises(ValueError, match=r"backfill_limit_days=0 is not accepted; it must be >= 1"):
        limits({}, backfill_limit_days=0)


@pytest.mark.parametrize("value", [-0.5, float("nan"), float("inf"), "6"])
def test_bad_lookback_window_hours_is_refused(value):
    with pytest.raises(ValueError, match="lookback_window_hours"):
        limits({}, lookback_window_hours=value)


def test_naive_datetimes_are_refused_with_their_name():
    with pytest.raises(ValueError, match="now"):
        limits({}, now=datetime(2021, 6, 1))
    with pytest.raises(ValueError, match="start_date"):
        limits({}, start_date=datetime(2021, 1, 1))
    with pytest.raises(ValueError, match="last_success"):
        limits({"page_views": datetime(2021, 1, 1)})


@pytest.mark.parametrize("models", [[], "page_views"])
def test_models_must_be_a_non_empty_sequence_of_names(models):
    with pytest.raises(ValueError, match="models"):
        limits({}, models=models)


# -- per model ---------------------------------------------------------------------------

def test_per_model_limits_let_a_new_model_backfill_on_its_own():
    last = {"page_views": utc(2021, 5, 1), "sessions": utc(2021, 5, 1)}
    result = get_model_run_limits(last, MODELS, now=utc(2021, 5, 2), **SETTINGS)
    assert result["page_views"] == RunLimits(RunState.STANDARD, utc(2021, 4, 30, 18),
                                             utc(2021, 5, 2))
    assert result["sessions"] == result["page_views"]
    assert result["users"] == RunLimits(RunState.FIRST_RUN, START, START + timedelta(days=30))


def test_per_model_limits_let_a_failing_model_catch_up_without_holding_others_back():
    last = {"page_views": utc(2021, 5, 1), "sessions": utc(2021, 2, 1), "users": utc(2021, 5, 1)}
    result = get_model_run_limits(last, MODELS, now=utc(2021, 5, 2), **SETTINGS)
    assert result["page_views"].upper_limit == utc(2021, 5, 2)
    assert result["sessions"] == RunLimits(RunState.STANDARD, utc(2021, 1, 31, 18), utc(2021, 3, 3))


def test_per_model_limits_validate_like_the_shared_ones():
    with pytest.raises(ValueError, match="backfill_limit_days=0"):
        get_model_run_limits({}, MODELS, start_date=START, backfill_limit_days=0,
                             lookback_window_hours=6, now=utc(2021, 5, 2))
