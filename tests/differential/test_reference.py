"""Unit tests of the reference itself: hand-worked cases of docs/rules.md, expectations written out."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from tests.differential import hostile
from tests.differential.hostile import at, event
from tests.differential.reference import COLUMNS, Settings, expected_tables

S = Settings(start_date=at(0))
AS_OF = dt.date(2026, 3, 1)
D = dt.date


def tables(rows, settings=S, as_of=AS_OF):
    return expected_tables(rows, settings, as_of)


def ids(rows):
    return sorted(r["event_id"] for r in rows)


def by(rows, key):
    return sorted(rows, key=lambda r: r[key])


def plain(**kw):
    """A valid row with all device times equal to derived, loaded at `load`."""
    derived, load = kw.pop("derived"), kw.pop("load")
    return event(derived, load=load, collector_tstamp=derived, dvce_sent_tstamp=derived, **kw)


# 1. Load time and load hours

def test_no_load_tstamp_sits_in_its_collector_hour():
    row = event(at(0, 10, 0), event_id="e1") | {"load_tstamp": None, "collector_tstamp": at(0, 10, 20)}
    assert tables([row])["rejected_events"] == [
        {"event_id": "e1", "load_hour_tstamp": at(0, 10), "reject_reason": "null load_tstamp"}]


def test_rows_without_load_time_are_never_read():
    row = event(at(0, 10, 0), event_id="e1") | {"load_tstamp": None, "collector_tstamp": None}
    result = tables([row])
    assert result["rejected_events"] == [] and result["base_events"] == []


def test_hours_before_start_dates_hour_do_not_exist():
    settings = Settings(start_date=at(0, 10, 30))
    rows = [plain(event_id="early", derived=at(0, 9, 50), load=at(0, 9, 59)),
            plain(event_id="e1", derived=at(0, 9, 51), load=at(0, 10, 1))]
    result = tables(rows, settings)
    assert ids(result["base_events"]) == ["e1"]
    assert result["filtered_events"] == []  # derived before start_date


# 2. Rejected rows

def test_each_reject_reason():
    t, load = at(0, 10, 0), at(0, 11, 30)
    rows = [
        event(t, load=load) | {"event_id": None},
        event(t, event_id="no-user", load=load) | {"domain_userid": None},
        event(t, event_id="no-session", load=load) | {"domain_sessionid": None},
        event(t, event_id="no-derived", load=load) | {"derived_tstamp": None},
        event(t, event_id="no-load", load=load) | {"load_tstamp": None},
        event(at(1, 11, 30, 1), event_id="future", load=load),
        event(t, event_id="late", load=load) | {"dvce_created_tstamp": at(-3, 9, 59)},
        event(t, event_id="late-vs-collector", load=load) | {"dvce_created_tstamp": None,
                                                              "dvce_sent_tstamp": at(3, 10, 0, 3)},
    ]
    assert by(tables(rows)["rejected_events"], "reject_reason") == [
        {"event_id": "future", "load_hour_tstamp": at(0, 11), "reject_reason": "derived_tstamp after load_tstamp"},
        {"event_id": "no-derived", "load_hour_tstamp": at(0, 11), "reject_reason": "null derived_tstamp"},
        {"event_id": "no-session", "load_hour_tstamp": at(0, 11), "reject_reason": "null domain_sessionid"},
        {"event_id": "no-user", "load_hour_tstamp": at(0, 11), "reject_reason": "null domain_userid"},
        {"event_id": None, "load_hour_tstamp": at(0, 11), "reject_reason": "null event_id"},
        {"event_id": "no-load", "load_hour_tstamp": at(0, 10), "reject_reason": "null load_tstamp"},
        {"event_id": "late", "load_hour_tstamp": at(0, 11), "reject_reason": "sent_too_late"},
        {"event_id": "late-vs-collector", "load_hour_tstamp": at(0, 11), "reject_reason": "sent_too_late"},
    ]


def test_edges_of_each_check_are_valid():
    t, load = at(0, 10, 0), at(0, 11, 30)
    rows = [
        event(at(1, 11, 30), event_id="derived-24h", load=load),
        event(t, event_id="sent-3d", load=load) | {"dvce_created_tstamp": at(-3, 10, 0, 2)},
        event(t, event_id="all-null", load=load) | {"dvce_created_tstamp": None, "dvce_sent_tstamp": None,
                                                     "collector_tstamp": None},
    ]
    result = tables(rows)
    assert result["rejected_events"] == []
    assert ids(result["base_events"]) == ["all-null", "derived-24h", "sent-3d"]


def test_first_reason_wins():
    load = at(0, 11, 30)
    rows = [
        event(at(2), load=load) | {"event_id": None, "domain_userid": None},
        event(at(2), event_id="future-and-late", load=load) | {"dvce_created_tstamp": at(-5)},
        event(at(0, 10), event_id="null-dvce-and-late", load=load) | {"dvce_created_tstamp": at(-5),
                                                                        "dvce_sent_tstamp": None},
    ]
    strict = dataclasses.replace(S, allow_null_dvce_tstamps=False)
    assert {r["event_id"]: r["reject_reason"] for r in tables(rows, strict)["rejected_events"]} == {
        None: "null event_id",
        "future-and-late": "derived_tstamp after load_tstamp",
        "null-dvce-and-late": "null dvce_tstamp",
    }
    assert {r["event_id"]: r["reject_reason"] for r in tables(rows)["rejected_events"]} == {
        None: "null event_id",
        "future-and-late": "derived_tstamp after load_tstamp",
        "null-dvce-and-late": "sent_too_late",  # sent replaced by the collector time, 5 days late
    }


def test_null_device_times_follow_the_setting():
    rows = [event(at(0, 10), event_id="no-created") | {"dvce_created_tstamp": None},
            event(at(0, 10), event_id="no-sent") | {"dvce_sent_tstamp": None}]
    assert ids(tables(rows)["base_events"]) == ["no-created", "no-sent"]
    strict = tables(rows, dataclasses.replace(S, allow_null_dvce_tstamps=False))
    assert strict["base_events"] == []
    assert sorted((r["event_id"], r["reject_reason"]) for r in strict["rejected_events"]) == [
        ("no-created", "null dvce_tstamp"), ("no-sent", "null dvce_tstamp")]


def test_other_apps_are_neither_kept_nor_rejected():
    rows = [event(at(0, 10), event_id="other", app="other") | {"domain_userid": None},
            event(at(0, 10), event_id="web", app="web")]
    result = tables(rows, dataclasses.replace(S, app_ids=("web",)))
    assert result["rejected_events"] == [] and ids(result["base_events"]) == ["web"]


# 3. Dedupe

def test_dedupe_within_and_beyond_the_lookback():
    a = plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5))
    within, beyond = dict(a, load_tstamp=at(10, 9)), dict(a, load_tstamp=at(40, 9))
    assert tables([within, a])["base_events"] == [
        {"event_id": "e1", "load_tstamp": at(0, 10, 5), "collector_tstamp": at(0, 10), "derived_tstamp": at(0, 10),
         "domain_sessionid": "s1", "domain_userid": "u1", "user_id": None, "event_name": "page_view",
         "app_id": "web", "load_date": D(2026, 1, 5)}]
    assert [(r["load_tstamp"], r["load_date"]) for r in by(tables([a, beyond])["base_events"], "load_tstamp")] == [
        (at(0, 10, 5), D(2026, 1, 5)), (at(40, 9), D(2026, 2, 14))]


def test_chain_a_b_c_keeps_only_a():
    a = plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5))
    b, c = dict(a, load_tstamp=at(20, 10, 5)), dict(a, load_tstamp=at(40, 10, 5))
    assert [r["load_tstamp"] for r in tables([c, b, a])["base_events"]] == [at(0, 10, 5)]


def test_exactly_the_lookback_apart_is_kept():
    # Reading: dropped only when loaded *less than* dedupe_lookback_days after a better copy.
    a = plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5))
    b = dict(a, load_tstamp=at(30, 10, 5))
    assert sorted(r["load_tstamp"] for r in tables([a, b])["base_events"]) == [at(0, 10, 5), at(30, 10, 5)]


def test_identical_rows_keep_one_and_different_ties_are_refused():
    a = plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5))
    assert len(tables([a, dict(a), dict(a)])["base_events"]) == 1
    with pytest.raises(ValueError, match="ambiguous tie"):
        tables([a, dict(a, user_id="someone")])


def test_same_load_ranks_by_collector_time_null_last():
    a = plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5), user="first")
    later = dict(a, collector_tstamp=at(0, 10, 1), domain_userid="second")
    no_collector = dict(a, collector_tstamp=None, domain_userid="third")
    assert [r["domain_userid"] for r in tables([no_collector, later, a])["base_events"]] == ["first"]
    assert [r["domain_userid"] for r in tables([no_collector, later])["base_events"]] == ["second"]


def test_rejected_copies_do_not_take_part_in_dedupe():
    a = plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5))
    bad_earlier = dict(a, load_tstamp=at(0, 10, 1), domain_sessionid=None)
    assert [r["load_tstamp"] for r in tables([bad_earlier, a])["base_events"]] == [at(0, 10, 5)]


# 4. Sessions

def bot_like_session():
    return [
        plain(event_id="e1", derived=at(0, 10), load=at(0, 10, 5), sessionidx=2),
        plain(event_id="e2", derived=at(0, 11), load=at(0, 11, 5), user_id="alice", sessionidx=1),
        plain(event_id="e3", derived=at(3, 10), load=at(3, 10, 5)),  # exactly at the limit: kept
        plain(event_id="e4", derived=at(3, 10, 1), load=at(3, 10, 6), user_id="bob", sessionidx=0),  # past it
        plain(event_id="e5", derived=at(4, 0), load=at(3, 23, 0)),
    ]


def test_lifecycle_fields_and_quarantine():
    result = tables(bot_like_session())
    assert result["sessions_lifecycle_manifest"] == [{
        "domain_sessionid": "s1", "domain_userid": "u1", "user_id": "alice", "app_id": "web",
        "domain_sessionidx": 1, "start_tstamp": at(0, 10), "end_tstamp": at(3, 10), "event_count": 3,
        "first_load_tstamp": at(0, 10, 5), "last_load_tstamp": at(3, 10, 5), "is_quarantined": True,
        "quarantined_at": at(3, 10, 6)}]
    assert result["quarantined_sessions"] == [{
        "domain_sessionid": "s1", "domain_userid": "u1", "start_tstamp": at(0, 10), "end_tstamp": at(3, 10),
        "event_count": 3, "quarantined_at": at(3, 10, 6)}]


def test_earliest_event_by_derived_then_event_id_names_the_session():
    rows = [plain(event_id="b", derived=at(0, 10), load=at(0, 10, 5), app="mobile", user="ub"),
            plain(event_id="a", derived=at(0, 10), load=at(0, 11, 5), app="web", user="ua", user_id="x"),
            plain(event_id="c", derived=at(0, 12), load=at(0, 12, 5), user="uc")]
    [session] = tables(rows)["sessions_lifecycle_manifest"]
    assert (session["domain_userid"], session["app_id"], session["user_id"]) == ("ua", "web", "x")
    assert (session["is_quarantined"], session["quarantined_at"]) == (False, None)


# 5. Filtered events

def test_filtered_events_cut_at_the_limit_with_session_fields():
    result = tables(bot_like_session())
    assert by(result["filtered_events"], "event_id") == [
        {"event_id": eid, "load_tstamp": load, "derived_tstamp": derived, "event_date": date,
         "domain_sessionid": "s1", "domain_userid": "u1", "event_name": "page_view",
         "session_start_tstamp": at(0, 10), "session_domain_userid": "u1", "session_user_id": "alice"}
        for eid, load, derived, date in [("e1", at(0, 10, 5), at(0, 10), D(2026, 1, 5)),
                                         ("e2", at(0, 11, 5), at(0, 11), D(2026, 1, 5)),
                                         ("e3", at(3, 10, 5), at(3, 10), D(2026, 1, 8))]]
    assert by(result["filtered_events_counts"], "load_hour_tstamp") == [
        {"load_hour_tstamp": at(0, 10), "event_date": D(2026, 1, 5), "load_date": D(2026, 1, 5), "rows": 1},
        {"load_hour_tstamp": at(0, 11), "event_date": D(2026, 1, 5), "load_date": D(2026, 1, 5), "rows": 1},
        {"load_hour_tstamp": at(3, 10), "event_date": D(2026, 1, 8), "load_date": D(2026, 1, 8), "rows": 1}]


def test_event_names_and_start_date_narrow_filtered_events_only():
    rows = [plain(event_id="before", derived=at(-1, 23), load=at(0, 0, 5)),
            plain(event_id="view", derived=at(0, 1), load=at(0, 1, 5)),
            plain(event_id="click", derived=at(0, 2), load=at(0, 2, 5), name="link_click")]
    result = tables(rows, dataclasses.replace(S, event_names=("page_view",)))
    assert ids(result["base_events"]) == ["before", "click", "view"]
    assert ids(result["filtered_events"]) == ["view"]
    assert result["sessions_lifecycle_manifest"][0]["start_tstamp"] == at(-1, 23)


# 6. Daily aggregates

def midnight_and_money():
    return [
        plain(event_id="v1", derived=at(1, 23, 50), load=at(1, 23, 55)),
        plain(event_id="p1", derived=at(1, 23, 55), load=at(2, 0, 5), name="page_ping"),
        plain(event_id="t1", derived=at(2, 0, 10), load=at(2, 0, 15), name="transaction", tr_total=Decimal("19.99")),
        plain(event_id="t2", derived=at(2, 0, 11), load=at(2, 0, 15), name="transaction", tr_total=Decimal("0.01")),
        plain(event_id="t3", derived=at(2, 0, 12), load=at(2, 0, 15), name="transaction"),
        plain(event_id="w1", derived=at(2, 9), load=at(2, 9, 5), session="s2", tr_total=Decimal("5.00")),
    ]


def test_daily_aggregates_over_midnight_with_revenue():
    assert by(tables(midnight_and_money())["daily_aggregates"], "event_date") == [
        {"event_date": D(2026, 1, 6), "domain_userid": "u1", "events": 2, "page_views": 1, "page_pings": 1,
         "sessions": 1, "session_ids": ["s1"], "transactions": 0, "revenue": Decimal("0.00"),
         "first_event_tstamp": at(1, 23, 50), "last_event_tstamp": at(1, 23, 55)},
        {"event_date": D(2026, 1, 7), "domain_userid": "u1", "events": 4, "page_views": 1, "page_pings": 0,
         "sessions": 2, "session_ids": ["s1", "s2"], "transactions": 3, "revenue": Decimal("20.00"),
         "first_event_tstamp": at(2, 0, 10), "last_event_tstamp": at(2, 9)},
    ]


# 7. Attributes

def test_attributes_count_a_session_over_midnight_once():
    [user] = tables(midnight_and_money(), as_of=D(2026, 1, 8))["attributes"]
    assert user == {
        "domain_userid": "u1", "first_event_date": D(2026, 1, 6), "last_event_date": D(2026, 1, 7),
        "days_active": 2, "lifetime_events": 6, "lifetime_page_views": 2, "lifetime_transactions": 3,
        "lifetime_revenue": Decimal("20.00"), "lifetime_sessions": 2, "page_views_last_7_days": 2,
        "sessions_last_7_days": 2, "revenue_last_30_days": Decimal("20.00"), "events_last_30_days": 6,
        "attributes_as_of": D(2026, 1, 8)}


def test_attributes_exclude_days_from_as_of_and_use_half_open_windows():
    # as_of 2026-02-10: the 7-day window is [02-03, 02-10), the 30-day window [01-11, 02-10).
    rows = [
        plain(event_id="old", derived=at(5, 10), load=at(5, 10, 5), session="a", name="transaction",
              tr_total=Decimal("1.10")),  # 01-10: lifetime only
        plain(event_id="d30", derived=at(6, 10), load=at(6, 10, 5), session="b", name="transaction",
              tr_total=Decimal("2.25")),  # 01-11: in the 30-day window
        plain(event_id="d8", derived=at(28, 10), load=at(28, 10, 5), session="c"),  # 02-02: not in 7 days
        plain(event_id="d7", derived=at(29, 10), load=at(29, 10, 5), session="d"),  # 02-03: in 7 days
        plain(event_id="today", derived=at(36, 10), load=at(36, 10, 5), session="e"),  # 02-10: excluded
    ]
    [user] = tables(rows, as_of=D(2026, 2, 10))["attributes"]
    assert user == {
        "domain_userid": "u1", "first_event_date": D(2026, 1, 10), "last_event_date": D(2026, 2, 3),
        "days_active": 4, "lifetime_events": 4, "lifetime_page_views": 2, "lifetime_transactions": 2,
        "lifetime_revenue": Decimal("3.35"), "lifetime_sessions": 4, "page_views_last_7_days": 1,
        "sessions_last_7_days": 1, "revenue_last_30_days": Decimal("2.25"), "events_last_30_days": 3,
        "attributes_as_of": D(2026, 2, 10)}
    assert tables(rows, as_of=D(2026, 1, 10))["attributes"] == []


# The hostile builders and the random sources

SETTINGS_VARIANTS = [S, dataclasses.replace(S, app_ids=("web",), event_names=("page_view", "transaction")),
                     dataclasses.replace(S, allow_null_dvce_tstamps=False, dedupe_lookback_days=5, max_session_days=1)]


@pytest.mark.parametrize("builder", hostile.BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("settings", SETTINGS_VARIANTS, ids=["default", "narrowed", "strict"])
def test_builders_produce_rows_the_reference_accepts(builder, settings):
    rows = builder()
    result = expected_tables(rows, settings, AS_OF)
    assert set(result) == set(COLUMNS)
    assert 10 <= len(rows) <= 99
    assert result["base_events"] or result["rejected_events"]


def test_builders_hit_what_they_are_for():
    def run(builder):
        return expected_tables(builder(), S, AS_OF)
    reasons = {r["reject_reason"] for r in run(hostile.invalid_rows)["rejected_events"]}
    assert reasons == {"null event_id", "null domain_userid", "null domain_sessionid", "null derived_tstamp",
                       "null load_tstamp", "derived_tstamp after load_tstamp", "sent_too_late"}
    assert {s["domain_sessionid"] for s in run(hostile.runaway_bots)["quarantined_sessions"]} == {"f-bot1", "f-bot2"}
    assert len(run(hostile.replayed_duplicates)["base_events"]) == 14 + 4  # four 40-day replays stand alone


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile.source_rows())
def test_random_sources_are_accepted(rows):
    for settings in SETTINGS_VARIANTS:
        expected_tables(rows, settings, AS_OF)


def test_write_source_matches_the_atomic_schema(tmp_path):
    schema_py = Path(__file__).resolve().parents[2] / "incremental_assets" / "sources" / "schema.py"
    pytest.importorskip("pyspark")
    spec = importlib.util.spec_from_file_location("atomic_schema_only", schema_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # only schema.py: the package itself may be mid-change
    types = {f.name: f.dataType.simpleString() for f in module.ATOMIC_EVENTS_SCHEMA.fields}
    names = [name for name, _ in hostile.SOURCE_COLUMNS]
    assert names == [n for n in types if n in names]
    arrow_to_spark = {"string": "string", "timestamp[us, tz=UTC]": "timestamp", "int32": "int",
                      "decimal128(18, 2)": "decimal(18,2)", "date32[day]": "date"}
    assert {n: arrow_to_spark[str(t)] for n, t in hostile.SOURCE_COLUMNS} == {n: types[n] for n in names}

    from deltalake import DeltaTable
    hostile.write_source(tmp_path / "src", hostile.invalid_rows())
    hostile.write_source(tmp_path / "src", hostile.commerce_and_filters())
    table = DeltaTable(str(tmp_path / "src"))
    assert table.metadata().partition_columns == ["load_date"]
    stats_columns = table.metadata().configuration["delta.dataSkippingStatsColumns"]
    assert stats_columns == "load_tstamp,collector_tstamp,derived_tstamp"
    assert table.version() == 1
