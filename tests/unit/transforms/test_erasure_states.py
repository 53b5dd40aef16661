"""Attribute states without erased ids (docs/rules.md 1, "Erased users"): an erased user's
states go, and so do the values that are an erased id in any other user's state."""

from __future__ import annotations

import datetime as dt

import pytest

from incremental_assets.transforms.erasure import ErasedIds, id_digest, states_holding_erased, states_without_erased

pytestmark = pytest.mark.spark

DAY = dt.date(2026, 1, 5)
T = dt.datetime(2026, 1, 5, 10, tzinfo=dt.UTC)
SCHEMA = ("event_date date, domain_userid string, attribute string, "
          "value_counts array<struct<value: string, events: bigint, first_tstamp: timestamp, last_tstamp: timestamp>>")


def test_states_lose_the_erased_user_and_every_value_that_is_an_erased_id(spark):
    states = spark.createDataFrame([
        (DAY, "gone", "k1", [("web", 2, T, T)]),
        (DAY, "stays", "ids", [("alice", 1, T, T), ("bob", 3, T, T)]),
        (DAY, "stays", "only", [("bob", 1, T, T)]),
        (DAY, "stays", "k1", [(None, 4, T, T)]),
    ], SCHEMA)
    erased = ErasedIds.of([("domain_userid", id_digest("gone")), ("user_id", id_digest("bob"))])

    held = {(r.domain_userid, r.attribute) for r in states_holding_erased(states, erased).collect()}
    assert held == {("gone", "k1"), ("stays", "ids"), ("stays", "only")}
    kept = states_without_erased(states, erased)
    assert {(r.domain_userid, r.attribute): [(v.value, v.events) for v in r.value_counts] for r in kept.collect()} == {
        ("stays", "ids"): [("alice", 1)], ("stays", "k1"): [(None, 4)]}
    # The lists are built as the daily step builds them: entries never null, as the table holds them.
    assert kept.schema["value_counts"].dataType.containsNull is False
