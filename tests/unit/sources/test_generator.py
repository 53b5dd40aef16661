"""The sample-data generator: deterministic, and every kind of mess the pipeline handles.

One table is generated with Spark and read back with delta-rs into pandas, so the checks
below cost no further Spark jobs.
"""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from incremental_assets.sources.generator import (
    generate_events,
    generate_events_df,
    generate_events_with_kinds,
)
from incremental_assets.sources.schema import ATOMIC_EVENTS_SCHEMA
from tests.delta_reads import read_table

START = date(2026, 1, 5)
DAYS = 12
EVENTS = 20_000
SEED = 7

MINUTE = pd.Timedelta(minutes=1)
HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)


@pytest.fixture(scope="module")
def generated(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("generated") / "events"
    lines: list[str] = []
    summary = generate_events(spark, events=EVENTS, days=DAYS, start=START, out=str(out), seed=SEED,
                              progress=lines.append)
    table = read_table(out)
    return table, table.to_pandas(), summary, lines


@pytest.fixture(scope="module")
def events(generated) -> pd.DataFrame:
    return generated[1]


@pytest.fixture(scope="module")
def valid(events) -> pd.DataFrame:
    return events.dropna(subset=["event_id", "domain_userid", "domain_sessionid", "derived_tstamp", "load_tstamp"])


def test_summary_progress_and_schema(generated):
    table, events, summary, lines = generated
    assert summary["rows"] == len(events) == sum(summary["kinds"].values())
    assert summary["version"] == 0 and summary["files"] >= 1 and summary["events_per_second"] > 0
    assert set(summary["kinds"]) == {
        "on_time", "loaded_hours_late", "loaded_days_late", "sent_over_3_days", "duplicate_same_hour",
        "duplicate_later_hour", "bot", "invalid_null_event_id", "invalid_null_domain_userid",
        "invalid_null_domain_sessionid", "invalid_null_derived_tstamp", "invalid_null_load_tstamp",
    }
    # The copies of duplicated events come on top of the requested events.
    copies = summary["kinds"]["duplicate_same_hour"] + summary["kinds"]["duplicate_later_hour"]
    assert summary["rows"] == EVENTS + copies
    assert lines[0].startswith("generating 20,000 events over 12 days")
    assert "events/s" in lines[1]

    assert table.schema.names == ATOMIC_EVENTS_SCHEMA.fieldNames()
    assert str(table.schema.field("load_tstamp").type) == "timestamp[us, tz=UTC]"
    assert str(table.schema.field("tr_total").type) == "decimal128(18, 2)"


def test_event_time_window_and_partition_column(events):
    start = pd.Timestamp(START, tz="UTC")
    assert events.derived_tstamp.min() >= start
    assert events.derived_tstamp.max() < start + DAYS * DAY
    landed = events.load_tstamp.fillna(events.collector_tstamp)
    assert (landed.dt.date == events.load_date).all()


def test_duplicates_share_event_fields_and_load_again_later(events):
    ids = events.event_id.dropna()
    copies = events[events.event_id.isin(ids[ids.duplicated()])]
    assert copies.event_id.value_counts().max() == 2
    pairs = copies.groupby("event_id")
    assert 0.003 * EVENTS < pairs.ngroups < 0.008 * EVENTS
    same_fields = ["derived_tstamp", "dvce_created_tstamp", "dvce_sent_tstamp", "domain_sessionid", "domain_userid",
                   "event_name", "page_url", "tr_total", "event_fingerprint"]
    assert (pairs[same_fields].nunique(dropna=False) == 1).all().all()
    first_load, last_load = pairs.load_tstamp.min(), pairs.load_tstamp.max()
    assert (last_load > first_load).all()
    assert (pairs.collector_tstamp.max() > pairs.collector_tstamp.min()).all()
    same_hour = first_load.dt.floor("h") == last_load.dt.floor("h")
    assert same_hour.sum() > 0 and (~same_hour).sum() > 0
    assert (first_load.dt.date != last_load.dt.date).sum() > 0


def test_load_delays_mostly_minutes_with_late_tails(valid):
    load_after_collect = valid.load_tstamp - valid.collector_tstamp
    load_after_event = valid.load_tstamp - valid.derived_tstamp
    sent_after_created = valid.dvce_sent_tstamp - valid.dvce_created_tstamp
    total = len(valid)
    assert (load_after_collect < 15 * MINUTE).sum() > 0.85 * total
    assert load_after_collect.between(HOUR, 6 * HOUR).sum() > 0.04 * total
    # Days late: sent late by an offline device, loaded minutes after it arrived.
    days_late = sent_after_created.between(DAY, 3 * DAY)
    assert days_late.sum() > 0.005 * total
    assert (load_after_event[days_late] > DAY).all()
    assert (load_after_collect[days_late] < 15 * MINUTE).all()
    # Sent more than 3 days after creation: the pipeline drops these.
    assert 0 < (sent_after_created > 3 * DAY).sum() < 0.002 * total


def test_bot_sessions_span_days_and_load_on_time(valid):
    sessions = valid.groupby("domain_sessionid").agg(
        events=("event_id", "size"),
        first=("derived_tstamp", "min"),
        last=("derived_tstamp", "max"),
        worst_load_delay=("load_tstamp", lambda s: (s - valid.collector_tstamp[s.index]).max()),
    )
    span = sessions["last"] - sessions["first"]
    bots = sessions[span >= 5 * DAY]
    assert len(bots) >= 2
    assert (bots.events >= 5 * 24).all()  # about one event an hour
    assert (bots.worst_load_delay < 15 * MINUTE).all()  # bots are never loaded late
    assert (span[span < 5 * DAY] < DAY).all()  # only bots run for days


def test_invalid_rows_miss_one_required_column(events):
    for column in ["event_id", "domain_userid", "domain_sessionid", "derived_tstamp", "load_tstamp"]:
        assert 0 < events[column].isna().sum() < 0.002 * EVENTS, column
    assert events[["event_id", "domain_userid", "domain_sessionid", "derived_tstamp", "load_tstamp"]].isna().sum(
        axis=1).max() == 1
    assert events.collector_tstamp.notna().all()


def test_apps_events_and_attributes(events):
    assert set(events.app_id) == {"web", "mobile", "shop"}
    assert set(zip(events.app_id, events.platform)) == {("web", "web"), ("mobile", "mob"), ("shop", "web")}
    assert set(zip(events.event, events.event_name)) == {
        ("page_view", "page_view"), ("page_ping", "page_ping"), ("transaction", "transaction"),
        ("unstruct", "link_click"), ("struct", "event")}
    for column in ["geo_country", "geo_timezone", "os_timezone", "br_lang", "useragent", "page_url", "page_urlpath",
                   "network_userid", "dvce_created_tstamp", "dvce_sent_tstamp"]:
        assert events[column].notna().all(), column
    for column in ["user_id", "refr_urlhost", "mkt_source", "mkt_medium", "mkt_campaign"]:
        assert events[column].notna().any(), column

    transactions = events[events.event_name == "transaction"]
    assert len(transactions) > 20
    assert transactions.tr_orderid.notna().all()
    assert (transactions.tr_total.map(float) > 0).all()
    assert events.tr_total[events.event_name != "transaction"].isna().all()


def test_users_return_in_sessions_counted_up_over_days(valid):
    sessions = valid.groupby(["domain_userid", "domain_sessionid"]).agg(
        idx=("domain_sessionidx", "min"), idx_max=("domain_sessionidx", "max"), started=("derived_tstamp", "min"))
    assert (sessions.idx == sessions.idx_max).all()
    sessions = sessions.reset_index().sort_values(["domain_userid", "started"])
    # In time order, a user's sessions are numbered 1, 2, 3, ...
    expected = sessions.groupby("domain_userid").cumcount() + 1
    assert (sessions.idx.to_numpy() == expected.to_numpy()).all()
    per_user = sessions.groupby("domain_userid").agg(
        sessions=("idx", "size"), days=("started", lambda s: s.dt.date.nunique()))
    assert ((per_user.sessions >= 3) & (per_user.days >= 2)).sum() > 0
    # A session opens with a page view (unless that event is one of the invalid rows);
    # page pings come between page views.
    first_events = valid.sort_values("derived_tstamp").groupby("domain_sessionid").event_name.first()
    assert (first_events == "page_view").mean() > 0.99
    assert (valid.event_name == "page_ping").sum() > (valid.event_name == "page_view").sum() / 2


def test_same_seed_same_rows_other_seed_other_rows(spark, generated):
    table = generated[0]
    key = ["event_fingerprint", "load_tstamp"]  # unique: copies of an event load at other times

    again = generate_events_df(spark, events=EVENTS, days=DAYS, start=START, seed=SEED).toArrow().to_pandas()
    again = again.sort_values(key, ignore_index=True)
    written = table.to_pandas().sort_values(key, ignore_index=True)
    pd.testing.assert_frame_equal(again, written, check_dtype=False)

    # Another seed: other events (checked without the write layout, which only orders rows).
    other = generate_events_with_kinds(spark, events=EVENTS, days=DAYS, start=START, seed=SEED + 1)
    other_ids = {row.event_id for row in other.select("event_id").collect()}
    assert len(other_ids) > 0.99 * EVENTS
    assert not (other_ids - {None}) & set(written.event_id.dropna())
