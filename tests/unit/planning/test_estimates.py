"""The cost model of the hourly step: a fixed part per run plus a part per load hour."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from incremental_assets.planning.estimates import describe_duration, estimated_seconds, fit_step_cost


def test_the_fit_finds_the_fixed_part_and_the_rate_of_steps_of_several_sizes():
    cost = fit_step_cost([(1, 12.0), (3, 16.0), (24, 58.0)])  # 10 s + 2 s an hour
    assert cost.fixed_seconds == pytest.approx(10.0) and cost.seconds_per_hour == pytest.approx(2.0)
    assert cost.steps == 3
    # 100 hours in runs of at most 24: 5 runs.
    assert estimated_seconds(cost, 100, 24) == pytest.approx(5 * 10 + 100 * 2)
    assert estimated_seconds(cost, 0, 24) == 0


def test_steps_of_one_size_put_every_second_on_the_hours():
    cost = fit_step_cost([(2, 10.0), (2, 14.0)])
    assert (cost.fixed_seconds, cost.seconds_per_hour) == (0.0, 6.0)


def test_no_usable_sample_gives_no_cost():
    assert fit_step_cost([]) is None
    assert fit_step_cost([(0, 5.0)]) is None


@given(st.lists(st.tuples(st.integers(1, 200), st.floats(0, 10_000)), min_size=1, max_size=30))
def test_the_cost_is_never_negative_and_grows_with_the_hours(samples):
    cost = fit_step_cost(samples)
    assert cost.fixed_seconds >= 0 and cost.seconds_per_hour >= 0
    assert estimated_seconds(cost, 10, 24) <= estimated_seconds(cost, 11, 24)


def test_durations_read_as_people_say_them():
    assert describe_duration(40) == "about 40 s"
    assert describe_duration(600) == "about 10 min"
    assert describe_duration(4 * 3600) == "about 4.0 h"
