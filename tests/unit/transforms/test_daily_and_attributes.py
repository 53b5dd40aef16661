import random
from datetime import date, timedelta
from decimal import Decimal

from incremental_assets.planning.attribute_declarations import declarations
from incremental_assets.planning.default_attributes import DEFAULT_ATTRIBUTES, daily_measure
from incremental_assets.transforms.attribute_states import attribute_states, declared_values, with_declared_attributes
from incremental_assets.transforms.attributes import refresh_window_metrics, user_attributes, users_with_changed_rows
from incremental_assets.transforms.daily_aggregates import daily_aggregates, rows_by_day_and_load_day
from incremental_assets.transforms.filtered_events import filtered_events
from incremental_assets.transforms.sessions import session_lifecycle

from .conftest import event, naive, ts


def filtered(events_df, rows):
    base = events_df(rows)
    return filtered_events(base, session_lifecycle(base, max_session_days=3), event_names=(),
                           start_date=ts(-1000), max_session_days=3)


def test_daily_metrics_per_user_and_day(events_df):
    rows = [event("1", derived=ts(0)), event("2", name="page_ping", derived=ts(0.1)),
            event("3", name="transaction", revenue="10.10", derived=ts(0.2)),
            event("4", name="transaction", revenue="0.20", session="s2", derived=ts(1)),
            event("5", user="u2", session="s3", derived=ts(2)),
            event("6", derived=ts(0, days=1))]
    daily = {(r.event_date, r.domain_userid): r for r in daily_aggregates(filtered(events_df, rows)).collect()}
    d0 = ts(0).date()
    u1 = daily[(d0, "u1")]
    assert (u1.events, u1.page_views, u1.page_pings, u1.sessions, u1.transactions) == (4, 1, 1, 2, 2)
    assert u1.revenue == Decimal("10.30")
    assert (u1.first_event_tstamp, u1.last_event_tstamp) == (naive(ts(0)), naive(ts(1)))
    assert daily[(d0, "u2")].revenue == Decimal("0.00")
    assert daily[(d0 + timedelta(days=1), "u1")].events == 1
    assert u1.session_ids == ["s1", "s2"]
    assert {(r.event_date, r.load_date): r.rows_aggregated for r in rows_by_day_and_load_day(
        filtered(events_df, rows)).collect()} == {(d0, d0): 5, (d0 + timedelta(days=1), d0 + timedelta(days=1)): 1}


def test_attributes_lifetime_and_half_open_windows(events_df):
    as_of = date(2026, 1, 20)
    days_back = lambda n: (as_of - timedelta(days=n))  # noqa: E731
    rows = []
    for i, back in enumerate([1, 7, 8, 30, 31]):
        derived = ts(0) + (days_back(back) - ts(0).date())
        rows.append(event(f"pv{i}", session=f"s{i}", derived=derived))
        rows.append(event(f"tr{i}", name="transaction", revenue="1.00", session=f"s{i}", derived=derived))
    rows.append(event("today", session="s9", derived=ts(0) + (as_of - ts(0).date())))  # as_of itself: excluded
    f = filtered(events_df, rows)
    attrs = user_attributes(daily_aggregates(f), as_of=as_of, declared=DEFAULT_ATTRIBUTES).collect()[0]
    assert attrs.page_views_last_7_days == 2  # 1 and 7 days back; 8 is outside
    assert attrs.revenue_last_30_days == Decimal("4.00")  # 1, 7, 8, 30 back; 31 is outside
    # Every metric is as of as_of: the event on as_of itself is left out.
    assert attrs.lifetime_events == 10 and attrs.lifetime_page_views == 5
    assert attrs.lifetime_sessions == 5 and attrs.days_active == 5
    assert attrs.first_event_date == days_back(31) and attrs.last_event_date == days_back(1)

    later = as_of + timedelta(days=10)
    stored = user_attributes(daily_aggregates(f), as_of=as_of, declared=DEFAULT_ATTRIBUTES)
    refreshed = refresh_window_metrics(stored, daily_aggregates(f), stored.limit(0), as_of=later,
                                       declared=DEFAULT_ATTRIBUTES).collect()[0]
    assert refreshed.lifetime_events == 10  # untouched
    # [Dec 31, Jan 30) holds the days 1, 7 and 8 back from Jan 20; none is in the last 7 days.
    assert refreshed.page_views_last_7_days == 0 and refreshed.revenue_last_30_days == Decimal("3.00")


def test_a_session_over_midnight_counts_once_in_every_session_metric(events_df):
    as_of = ts(0, days=3).date()
    rows = [event("late", session="night", derived=ts(13.5)), event("early", session="night", derived=ts(14.5)),
            event("next", session="day", derived=ts(20))]  # T0 is 10:00: 23:30, 00:30 and 06:00 next day
    daily = daily_aggregates(filtered(events_df, rows))
    assert sorted(r.sessions for r in daily.collect()) == [1, 2]  # one session on each of two days ...
    attrs = user_attributes(daily, as_of=as_of, declared=DEFAULT_ATTRIBUTES).collect()[0]
    assert attrs.lifetime_sessions == 2 and attrs.sessions_last_7_days == 2  # ... counted once


# Attributes daily_aggregates holds what they read, beside the defaults: other periods of them.
LIKE_THE_DEFAULTS = declarations([
    {"name": "pings_3_days", "aggregation": "count", "events": ["page_ping"], "period": 3},
    {"name": "transactions_2_days", "aggregation": "count", "events": ["transaction"], "period": 2},
    {"name": "days_active_3_days", "aggregation": "distinct_count", "property": "event_date", "period": 3},
    {"name": "first_day_3_days", "aggregation": "min", "property": "event_date", "type": "date", "period": 3},
    {"name": "revenue_1_day", "aggregation": "sum", "property": "tr_total", "events": ["transaction"],
     "type": "decimal", "default": 0, "period": 1},
])


def test_attributes_computed_from_daily_aggregates_equal_the_same_merged_from_states(events_df):
    """The defaults (and attributes like them) are computed from daily_aggregates, any other
    declaration from its states: on a random history both ways give every user the same values."""
    assert all(daily_measure(d) is not None for d in (*DEFAULT_ATTRIBUTES, *LIKE_THE_DEFAULTS))
    rng = random.Random(46)
    rows = []
    for i in range(160):
        name = rng.choice(["page_view", "page_view", "page_ping", "transaction", "link_click"])
        revenue = f"{rng.randint(0, 5000) / 100:.2f}" if name == "transaction" and rng.random() < 0.8 else None
        rows.append(event(f"e{i}", user=f"u{rng.randint(1, 6)}", session=f"s{rng.randint(1, 12)}", name=name,
                          revenue=revenue, derived=ts(rng.uniform(0, 24 * 9))))
    f = filtered(events_df, rows)
    declared = (*DEFAULT_ATTRIBUTES, *LIKE_THE_DEFAULTS)
    as_of = ts(0, days=8).date()  # days after it are left out by both ways
    from_daily = user_attributes(daily_aggregates(f), as_of=as_of, declared=declared)
    users = from_daily.select("domain_userid")
    from_states = with_declared_attributes(users, declared_values(attribute_states(f, declared), declared,
                                                                  as_of=as_of), declared)
    names = [d.name for d in declared]
    assert dict(from_daily.select(*names).dtypes) == dict(from_states.select(*names).dtypes)
    got = {r.domain_userid: r.asDict() for r in from_daily.select("domain_userid", *names).collect()}
    expected = {r.domain_userid: r.asDict() for r in from_states.select("domain_userid", *names).collect()}
    assert len(got) == 6 and got == expected


def test_a_rebuilt_day_queues_only_the_users_whose_rows_changed(events_df):
    # u1 gains a late event, u2's page_url is corrected in place (same events, same times), u3
    # loses their only event, u4 is new, u5 comes out the same: the daily rows of u1, u3 and u4
    # change, the states of every user but u5 (u2's: only its states).
    declared = declarations([{"name": "pages", "aggregation": "distinct_list", "property": "page_url",
                              "events": ["page_view"]}])
    before = [event("1", derived=ts(0), page_url="/a"),
              event("2", user="u2", session="s2", derived=ts(1), page_url="/a"),
              event("3", user="u3", session="s3", derived=ts(2), page_url="/a"),
              event("5", user="u5", session="s5", derived=ts(3), page_url="/a")]
    after = [before[0], event("1b", derived=ts(0.5), page_url="/a"),
             event("2", user="u2", session="s2", derived=ts(1), page_url="/b"),
             event("4", user="u4", session="s4", derived=ts(2.5), page_url="/a"), before[3]]
    rows_before, rows_after = filtered(events_df, before), filtered(events_df, after)

    def changed(old, new):
        return sorted(r.domain_userid for r in users_with_changed_rows(old, new).collect())

    assert changed(daily_aggregates(rows_before), daily_aggregates(rows_after)) == ["u1", "u3", "u4"]
    assert changed(attribute_states(rows_before, declared), attribute_states(rows_after, declared)) \
        == ["u1", "u2", "u3", "u4"]
    # The same rows, their columns in another order: nobody.
    daily = daily_aggregates(rows_after)
    assert changed(daily.select(*reversed(daily.columns)), daily) == []
