"""The cost model of the hourly step: a fixed part per run, a part per load hour and a part per
source row, each non-negative."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from incremental_assets.planning.estimates import (
    StepSample,
    describe_duration,
    estimated_seconds,
    fit_step_cost,
    runs_for,
    unknown_fixed_part,
)


def samples(*steps) -> list[StepSample]:
    return [StepSample(*step) for step in steps]


def test_the_fit_finds_the_fixed_part_and_the_rates_per_hour_and_per_row():
    # 5 s a run + 0.1 s an hour + 2 ms a row, on steps whose hours and rows do not move together.
    truth = [(1, 800), (1, 4_000), (24, 1_000), (168, 20_000), (3, 15_000)]
    cost = fit_step_cost(samples(*((h, r, 5 + 0.1 * h + 0.002 * r) for h, r in truth)))
    assert cost.fixed_seconds == pytest.approx(5.0)
    assert cost.seconds_per_hour == pytest.approx(0.1)
    assert cost.seconds_per_row == pytest.approx(0.002)
    assert cost.steps == 5
    assert cost.rows_per_hour == pytest.approx(sum(r for _, r in truth) / sum(h for h, _ in truth))
    # 100 hours holding 50,000 rows in 5 runs.
    assert estimated_seconds(cost, hours=100, rows=50_000, runs=5) == pytest.approx(5 * 5 + 100 * 0.1 + 50_000 * 0.002)
    assert estimated_seconds(cost, hours=0, rows=0, runs=0) == 0


def test_rows_unknown_in_the_plan_count_at_the_recorded_rows_per_hour():
    cost = fit_step_cost(samples((1, 1_000, 3.0), (2, 2_000, 6.0)))
    assert estimated_seconds(cost, hours=4, rows=None, runs=1) == pytest.approx(
        estimated_seconds(cost, hours=4, rows=4_000, runs=1))


def test_steps_recorded_before_rows_were_kept_fit_on_hours_alone():
    cost = fit_step_cost(samples((1, None, 12.0), (3, None, 16.0), (24, None, 58.0)))  # 10 s + 2 s an hour
    assert (cost.fixed_seconds, cost.seconds_per_row) == (pytest.approx(10.0), 0.0)
    assert cost.seconds_per_hour == pytest.approx(2.0)
    assert estimated_seconds(cost, hours=100, rows=None, runs=5) == pytest.approx(5 * 10 + 100 * 2)


def test_steps_of_one_size_put_every_second_on_the_hours():
    cost = fit_step_cost(samples((2, None, 10.0), (2, None, 14.0)))
    assert (cost.fixed_seconds, cost.seconds_per_hour, cost.seconds_per_row) == (0.0, 6.0, 0.0)


def test_the_rows_explain_one_hour_steps_of_different_sizes():
    # Hourly steps alone (the sensor's): the fixed part and the rows tell them apart.
    cost = fit_step_cost(samples((1, 1_000, 6.0), (1, 5_000, 10.0), (1, 9_000, 14.0)))
    assert estimated_seconds(cost, hours=1, rows=3_000, runs=1) == pytest.approx(8.0)
    assert estimated_seconds(cost, hours=1, rows=20_000, runs=1) == pytest.approx(25.0)


def test_no_usable_sample_gives_no_cost():
    assert fit_step_cost([]) is None
    assert fit_step_cost(samples((0, 10, 5.0))) is None


@given(st.lists(st.tuples(st.integers(1, 200), st.one_of(st.none(), st.integers(0, 10**7)), st.floats(0, 10_000)),
                min_size=1, max_size=30))
def test_the_cost_is_never_negative_and_grows_with_hours_and_rows(steps):
    cost = fit_step_cost(samples(*steps))
    assert min(cost.fixed_seconds, cost.seconds_per_hour, cost.seconds_per_row, cost.rows_per_hour) >= 0
    assert estimated_seconds(cost, hours=10, rows=100, runs=1) <= estimated_seconds(cost, hours=11, rows=100, runs=1)
    assert estimated_seconds(cost, hours=10, rows=100, runs=1) <= estimated_seconds(cost, hours=10, rows=900, runs=1)


def test_runs_are_the_hours_cut_at_the_most_a_run_takes():
    assert [runs_for(h, 24) for h in (0, 1, 24, 25, 100)] == [0, 1, 1, 2, 5]


def test_durations_read_as_people_say_them():
    assert describe_duration(40) == "about 40 s"
    assert describe_duration(600) == "about 10 min"
    assert describe_duration(4 * 3600) == "about 4.0 h"


def test_an_estimate_for_runs_of_another_size_than_the_only_one_recorded_says_it_may_be_low():
    # One backfill of 72 hours recorded: a run of one hour may cost anything up to that run.
    cost = fit_step_cost(samples((72, 80_000, 20.0)))
    assert estimated_seconds(cost, hours=72, rows=80_000, runs=1) == pytest.approx(20.0)  # the same size: exact
    assert unknown_fixed_part(cost, hours=72, runs=1) is None
    assert unknown_fixed_part(cost, hours=1, runs=1) == (
        "only steps of 72 load hour(s) recorded, so the fixed part of a run is not known yet: up to 20 s")
    assert unknown_fixed_part(fit_step_cost(samples((72, 80_000, 20.0), (1, 900, 6.0))), hours=1, runs=1) is None
