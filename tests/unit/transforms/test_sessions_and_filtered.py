from datetime import date

from pyspark.sql import functions as F

from incremental_assets.transforms.filtered_events import filtered_events
from incremental_assets.transforms.sessions import (
    SESSION_EVENT_COLUMNS,
    quarantined_sessions,
    session_lifecycle,
    sessions_needing_update,
)

from .conftest import event, naive, ts


def lifecycle_rows(events_df, rows, max_session_days=3):
    return {r.domain_sessionid: r for r in
            session_lifecycle(events_df(rows), max_session_days=max_session_days).collect()}


def test_lifecycle_start_end_and_counts(events_df):
    rows = [event("a", derived=ts(0), load=ts(1)), event("b", derived=ts(2), load=ts(2.1)),
            event("c", derived=ts(-1), load=ts(5), user_id="known")]
    row = lifecycle_rows(events_df, rows)["s1"]
    assert (row.start_tstamp, row.end_tstamp, row.event_count) == (naive(ts(-1)), naive(ts(2)), 3)
    assert (row.first_load_tstamp, row.last_load_tstamp) == (naive(ts(1)), naive(ts(5)))
    assert row.user_id == "known" and not row.is_quarantined and row.quarantined_at is None


def test_lifecycle_needs_only_the_session_event_columns(events_df):
    """The hourly step keeps only SESSION_EVENT_COLUMNS of a session's earlier events."""
    rows = [event("a", derived=ts(0), load=ts(1), user_id="u"), event("b", derived=ts(2), load=ts(2.1)),
            event("c", derived=ts(5, days=4), load=ts(5.1, days=4), session="s2"),
            event("d", derived=ts(-1), load=ts(5), session="s2")]
    events = events_df(rows)
    assert set(SESSION_EVENT_COLUMNS) < set(events.columns)
    whole = session_lifecycle(events, max_session_days=3).collect()
    narrow = session_lifecycle(events.select(*SESSION_EVENT_COLUMNS), max_session_days=3).collect()
    assert sorted(narrow) == sorted(whole) and len(whole) == 2


def test_sessions_past_max_days_are_quarantined_and_their_far_events_not_kept(events_df):
    rows = [event("a", derived=ts(0), load=ts(0.1)),
            event("b", derived=ts(0, days=3), load=ts(0.1, days=3)),  # exactly at the limit: kept
            event("c", derived=ts(1, days=3), load=ts(1.1, days=3)),
            event("d", derived=ts(5, days=4), load=ts(5.1, days=4))]
    row = lifecycle_rows(events_df, rows)["s1"]
    assert row.is_quarantined
    assert (row.end_tstamp, row.event_count) == (naive(ts(0, days=3)), 2)
    assert row.quarantined_at == naive(ts(1.1, days=3))


def test_an_event_past_the_limit_changes_nothing_but_quarantined_at(events_df):
    """A frozen quarantined session is never recomputed for a far-out event,
    so such an event's user_id and smaller domain_sessionidx must not count in a rebuild either."""
    inside = [event("a", derived=ts(0), load=ts(0.1), user_id="early"), event("b", derived=ts(1), load=ts(1.1))]
    far = event("z", derived=ts(5, days=4), load=ts(5.1, days=4), user_id="login", domain_sessionidx=0)
    without, with_far = lifecycle_rows(events_df, inside)["s1"], lifecycle_rows(events_df, [*inside, far])["s1"]
    assert with_far.is_quarantined and with_far.quarantined_at == naive(ts(5.1, days=4))
    assert ((with_far.user_id, with_far.domain_sessionidx) == (without.user_id, without.domain_sessionidx)
            == ("early", 1))
    assert with_far.asDict() | {"is_quarantined": False, "quarantined_at": None} == without.asDict()


def test_quarantined_session_with_only_far_new_events_needs_no_update(events_df, spark):
    stored = spark.createDataFrame(
        [("s1", ts(0), True, ts(0.1), ts(3, days=3)), ("s2", ts(0), True, ts(0.1), ts(3, days=3)),
         ("s4", ts(0), True, ts(0.1), ts(3, days=3))],
        "domain_sessionid string, start_tstamp timestamp, is_quarantined boolean, first_load_tstamp timestamp, "
        "quarantined_at timestamp")
    window = events_df([event("x", session="s1", derived=ts(0, days=5), load=ts(0, days=5)),
                        event("y", session="s2", derived=ts(1), load=ts(0, days=5)),  # late, inside limit
                        event("z", session="s3", derived=ts(0, days=5), load=ts(0, days=5)),
                        # past the limit, but loaded before the session was quarantined (a late file)
                        event("w", session="s4", derived=ts(0, days=5), load=ts(1, days=3))])
    need = {r.domain_sessionid: r.scan_from for r in
            sessions_needing_update(window, stored, max_session_days=3).collect()}
    assert need == {"s2": naive(ts(0.1)), "s3": naive(ts(0, days=5)), "s4": naive(ts(0.1))}


def test_quarantined_sessions_are_the_lifecycle_rows_past_their_limit(events_df):
    rows = [event("a", derived=ts(0), load=ts(0.1)), event("b", derived=ts(0, days=4), load=ts(0, days=4)),
            event("c", session="s2", derived=ts(0), load=ts(0.1))]
    lifecycle = session_lifecycle(events_df(rows), max_session_days=3)
    assert [r.domain_sessionid for r in quarantined_sessions(lifecycle).collect()] == ["s1"]


def test_changed_sessions_are_those_whose_filtered_fields_moved(events_df, spark):
    from incremental_assets.transforms.sessions import changed_sessions

    stored = session_lifecycle(events_df([event("a", session="same", load=ts(0.1)),
                                          event("b", session="login", load=ts(0.1)),
                                          event("c", session="start", derived=ts(1), load=ts(1.1))]),
                               max_session_days=3)
    new = session_lifecycle(events_df([event("a", session="same", load=ts(0.1)),
                                       event("b", session="login", load=ts(0.1)),
                                       event("b2", session="login", derived=ts(0.5), user_id="me", load=ts(2)),
                                       event("c", session="start", derived=ts(1), load=ts(1.1)),
                                       event("c0", session="start", derived=ts(0), load=ts(3))]),
                            max_session_days=3)
    changed = {r.domain_sessionid: r.changed_from for r in changed_sessions(new, stored).collect()}
    assert changed == {"login": naive(ts(0.1)), "start": naive(ts(1.1))}


def test_filtered_events_rules(events_df):
    rows = [event("pv", derived=ts(0)), event("ping", name="page_ping", derived=ts(0.5)),
            event("other", name="link_click", derived=ts(0.6)),
            event("early", derived=ts(-24 * 30)),
            event("far", derived=ts(1, days=3)), event("near", derived=ts(0, days=3))]
    base = events_df(rows)
    lifecycle = session_lifecycle(base, max_session_days=3)
    out = filtered_events(base, lifecycle.withColumn("start_tstamp", F.lit(ts(0))),
                          event_names=("page_view", "page_ping"), start_date=ts(-24),
                          max_session_days=3)
    got = {r.event_id: r for r in out.collect()}
    assert set(got) == {"pv", "ping", "near"}
    assert got["pv"].event_date == date(2026, 1, 5) and got["pv"].session_start_tstamp == naive(ts(0))
    assert got["near"].event_date == ts(0, days=3).date()


def test_a_row_digest_changes_with_any_column_and_only_then(spark):
    """Rules 6: a row corrected in place in any column, a context's field or a map included,
    gets another digest (its event day is then rebuilt); the same row keeps its digest."""
    from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

    from incremental_assets.transforms.filtered_events import ROW_DIGEST, with_row_digest

    schema = StructType([StructField("event_id", StringType()), StructField("user_id", StringType()),
                         StructField("contexts_x_1", ArrayType(StructType([StructField("plan", StringType())]))),
                         StructField("labels", MapType(StringType(), StringType())),
                         StructField("n", LongType())])
    base = ("e1", "alice", [("pro",)], {"k": "v"}, 1)
    variants = [base, base, ("e1", None, [("pro",)], {"k": "v"}, 1), ("e1", "alice", [("free",)], {"k": "v"}, 1),
                ("e1", "alice", [("pro",)], {"k": "w"}, 1), ("e1", "alice", [("pro",)], {"k": "v"}, 2)]
    digests = [r[ROW_DIGEST] for r in with_row_digest(spark.createDataFrame(variants, schema)).collect()]
    assert digests[0] == digests[1]
    assert len(set(digests[1:])) == 5, digests
    assert all(0 <= d < 2 ** 31 for d in digests)
    # Computed again over rows that already carry one: the old digest is not hashed in.
    again = with_row_digest(with_row_digest(spark.createDataFrame(variants[:1], schema)))
    assert again.first()[ROW_DIGEST] == digests[0]


def test_a_content_digest_is_null_when_a_row_has_no_digest(spark):
    """Rows written before digests were kept make their pair's digest unknown (compared by
    count only), never a sum of some rows' digests."""
    from incremental_assets.transforms.filtered_events import ROW_DIGEST, content_digest

    rows = spark.createDataFrame([("a", 5), ("a", 7), ("b", 5), ("b", None)], f"day string, {ROW_DIGEST} long")
    sums = {r.day: r.digest for r in rows.groupBy("day").agg(content_digest(rows).alias("digest")).collect()}
    assert sums == {"a": 12, "b": None}
    no_column = rows.drop(ROW_DIGEST)
    assert no_column.groupBy("day").agg(content_digest(no_column).alias("digest")).first().digest is None


def test_a_row_digest_does_not_depend_on_the_order_of_the_columns(spark):
    """The window's rows and a session's rows read back from base_events hold their columns in
    different orders: the same row must get the same digest from both."""
    from incremental_assets.transforms.filtered_events import ROW_DIGEST, with_row_digest

    rows = spark.createDataFrame([("e1", "alice", 3)], "event_id string, user_id string, n long")
    reordered = rows.select("n", "user_id", "event_id")
    assert with_row_digest(rows).first()[ROW_DIGEST] == with_row_digest(reordered).first()[ROW_DIGEST]
