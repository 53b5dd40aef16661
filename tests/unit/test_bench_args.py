"""The benchmark's options: what a run measures by default, and values refused by name."""

import pytest

from bench.__main__ import CONNECT_WARMUP_HOURS, parse_args


def test_the_connect_hour_is_timed_after_the_servers_own_first_hours_by_default():
    assert parse_args([]).connect_warmup_hours == CONNECT_WARMUP_HOURS > 0
    assert parse_args(["--connect-warmup-hours", "0"]).connect_warmup_hours == 0  # a new server's first hours


def test_a_negative_number_of_warm_up_hours_is_refused_by_value(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--connect-warmup-hours", "-2"])
    assert "--connect-warmup-hours must be 0 or more, not -2" in capsys.readouterr().err
