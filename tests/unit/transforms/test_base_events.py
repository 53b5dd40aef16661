from collections import Counter
from datetime import datetime, timedelta, timezone

from incremental_assets.sources.schema import load_time
from incremental_assets.transforms.base_events import copies, copy_verdicts, dominated_later, kept_copies, validate
from resources.spark import broadcasts_allowed

from .conftest import event, naive, ts

LOOKBACK = timedelta(days=30)


def run(events_df, rows, start=ts(0), end=ts(1), lookback=LOOKBACK, **kw):
    """As the hourly step does: the window's rows validated, their copies kept or not against the
    copies recorded before the window (earlier load hours already processed)."""
    source = events_df(rows)
    loaded = load_time()
    options = dict(days_late_allowed=kw.pop("days_late_allowed", 3),
                   allow_null_dvce_tstamps=kw.pop("allow_null_dvce_tstamps", True), **kw)
    window = validate(source.where((loaded >= start) & (loaded < end)), **options)
    earlier = copies(validate(source.where(loaded < start), **options).valid)
    verdicts = copy_verdicts(window.valid, earlier, lookback=lookback)
    kept = kept_copies(window.valid, verdicts, broadcast_verdicts=True).collect()
    # Spark's own choice of joins (a rebuild with many verdicts) keeps the same rows.
    assert Counter(kept) == Counter(kept_copies(window.valid, verdicts, broadcast_verdicts=False).collect())
    return kept, window.rejected.collect()


def test_invalid_rows_are_rejected_with_the_first_failing_reason(events_df):
    rows = [event("ok", load=ts(0.1)), event(None, load=ts(0.2)), event("nouser", user=None, load=ts(0.3)),
            event("nosession", session=None, load=ts(0.3)), event("nolts", load=None, collector=ts(0.4))]
    rows[-1]["load_tstamp"] = None
    kept, rejected = run(events_df, rows)
    assert [r.event_id for r in kept] == ["ok"]
    reasons = sorted(r.reject_reason for r in rejected)
    assert reasons == ["null domain_sessionid", "null domain_userid", "null event_id", "null load_tstamp"]
    # A row without load_tstamp is placed in the hour of its collector_tstamp.
    assert {r.load_hour_tstamp for r in rejected} == {naive(ts(0))}


def test_events_sent_too_late_are_dropped_and_counted(events_df):
    rows = [event("late", created=ts(-100), sent=ts(-100) + timedelta(days=3, seconds=1), derived=ts(-100),
                  load=ts(0.5)),
            event("just_in_time", created=ts(-100), sent=ts(-100) + timedelta(days=3), derived=ts(-100),
                  load=ts(0.5))]
    kept, rejected = run(events_df, rows)
    assert [r.event_id for r in kept] == ["just_in_time"]
    assert [(r.event_id, r.reject_reason) for r in rejected] == [("late", "sent_too_late")]


def test_far_future_derived_tstamp_is_rejected(events_df):
    kept, rejected = run(events_df, [event("future", derived=ts(48), load=ts(0.5))])
    assert kept == [] and rejected[0].reject_reason == "derived_tstamp after load_tstamp"


def test_duplicates_keep_the_first_loaded_copy_within_the_window(events_df):
    rows = [event("d", load=ts(0.7), collector=ts(0.6), page_url="second"),
            event("d", load=ts(0.2), collector=ts(0.1), page_url="first")]
    kept, _ = run(events_df, rows)
    assert [(r.event_id, r.page_url) for r in kept] == [("d", "first")]


def test_duplicate_whose_first_copy_was_loaded_in_an_earlier_hour_is_dropped(events_df):
    rows = [event("d", load=ts(-5), page_url="first"), event("d", load=ts(0.5), page_url="second"),
            event("other", load=ts(-5))]
    kept, _ = run(events_df, rows)
    assert kept == []  # the earlier copy belongs to its own hour; nothing of the window is new


def test_an_invalid_earlier_copy_does_not_hide_a_valid_later_one(events_df):
    rows = [event("d", user=None, load=ts(-5)), event("d", load=ts(0.5), page_url="valid")]
    kept, _ = run(events_df, rows)
    assert [(r.event_id, r.page_url) for r in kept] == [("d", "valid")]


def test_first_copy_in_the_window_wins_even_if_a_later_copy_exists(events_df):
    rows = [event("d", load=ts(0.5), page_url="first"), event("d", load=ts(3), page_url="later")]
    kept, _ = run(events_df, rows)
    assert [(r.event_id, r.page_url) for r in kept] == [("d", "first")]


def test_equal_load_and_collector_tstamps_break_ties_deterministically(events_df):
    rows = [event("d", load=ts(0.5), page_url="a"), event("d", load=ts(0.5), page_url="b")]
    first, _ = run(events_df, rows)
    second, _ = run(events_df, list(reversed(rows)))
    assert len(first) == 1 and first[0].page_url == second[0].page_url


def test_identical_rows_are_kept_once_also_without_a_collector_tstamp(events_df):
    rows = [event("a", load=ts(0.5)), event("a", load=ts(0.5)),
            event("b", load=ts(0.5), collector_tstamp=None), event("b", load=ts(0.5), collector_tstamp=None)]
    kept, _ = run(events_df, rows)
    assert sorted(r.event_id for r in kept) == ["a", "b"]


def test_a_dominated_copy_without_a_collector_tstamp_is_dropped(events_df):
    # A null collector_tstamp ranks last; the dominated copy must still be found and removed
    # (an equality join on the copy's key would never match its null).
    rows = [event("d", load=ts(0.2), page_url="first"),
            event("d", load=ts(0.7), page_url="second", collector_tstamp=None),
            event("d", load=ts(0.7), page_url="second", collector_tstamp=None)]
    kept, _ = run(events_df, rows)
    assert [(r.event_id, r.page_url) for r in kept] == [("d", "first")]


def test_a_null_collector_tstamp_ranks_after_every_collector_tstamp_even_the_latest(events_df):
    # Null last is an order, not a stand-in value: a copy without collector_tstamp ranks after a
    # copy loaded at the same instant with the latest timestamp there is.
    latest = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    rows = [event("d", load=ts(0.5), page_url="no collector", collector_tstamp=None),
            event("d", load=ts(0.5), page_url="latest collector", collector=latest, sent=ts(0))]
    for order in (rows, list(reversed(rows))):
        kept, _ = run(events_df, order)
        assert [(r.event_id, r.page_url) for r in kept] == [("d", "latest collector")]


def test_a_dropped_copy_still_dominates_the_copies_after_it(events_df):
    # A, then B 20 days later (dropped: within A's look-back), then C 40 days after A: C is
    # within B's look-back, so only A is kept although C is beyond A's.
    rows = [event("d", derived=ts(0, days=-40), load=ts(0.5, days=-40), page_url="A"),
            event("d", derived=ts(0, days=-40), load=ts(0.5, days=-20), page_url="B"),
            event("d", derived=ts(0, days=-40), load=ts(0.5), page_url="C")]
    kept, _ = run(events_df, rows)
    assert kept == []


def test_app_ids_filter_leaves_other_apps_out_without_rejecting_them(events_df):
    rows = [event("w", app="web", load=ts(0.1)), event("m", app="mobile", load=ts(0.1))]
    kept, rejected = run(events_df, rows, app_ids=("web",))
    assert [r.event_id for r in kept] == ["w"] and rejected == []


def test_window_is_half_open(events_df):
    rows = [event("at_start", load=ts(0)), event("at_end", load=ts(1))]
    kept, _ = run(events_df, rows)
    assert [r.event_id for r in kept] == ["at_start"]
    assert kept[0].load_date == ts(0).date()


def test_a_copy_loaded_within_the_lookback_after_a_better_one_is_dropped_and_beyond_it_kept(events_df):
    rows = [event("d", derived=ts(0, days=-29), load=ts(0.5, days=-29)),
            event("d", derived=ts(0, days=-29), load=ts(0.5), page_url="29 days later"),
            event("e", derived=ts(0, days=-30), load=ts(0.5, days=-30)),
            event("e", derived=ts(0, days=-30), load=ts(0.5), page_url="30 days later")]
    kept, _ = run(events_df, rows)
    assert [(r.event_id, r.page_url) for r in kept] == [("e", "30 days later")]


def test_null_device_timestamps_are_kept_or_rejected_as_the_setting_says(events_df):
    rows = [event("no_sent", load=ts(0.5)), event("late_by_collector", load=ts(0.5), collector=ts(0.2),
                                                  created=ts(-100))]
    rows[0]["dvce_sent_tstamp"] = None
    rows[1]["dvce_sent_tstamp"] = None
    kept, rejected = run(events_df, rows)
    # The collector time stands in for the missing sent time: 100 hours after creation is late.
    assert [r.event_id for r in kept] == ["no_sent"]
    assert [(r.event_id, r.reject_reason) for r in rejected] == [("late_by_collector", "sent_too_late")]
    kept, rejected = run(events_df, rows, allow_null_dvce_tstamps=False)
    assert kept == [] and {r.reject_reason for r in rejected} == {"null dvce_tstamp"}


def test_stored_copies_after_the_window_that_a_window_copy_dominates_are_found(events_df):
    later_rows = [event("d", load=ts(5), session="s2"), event("far", derived=ts(0, days=31), load=ts(0.5, days=31)),
                  event("other", load=ts(6))]
    window_rows = [event("d", load=ts(0.5)), event("far", load=ts(0.4))]
    recorded_later = copies(validate(events_df(later_rows), days_late_allowed=3,
                                     allow_null_dvce_tstamps=True).valid)
    kept, _ = run(events_df, window_rows)
    kept_df = events_df(window_rows).where("false").sparkSession.createDataFrame(
        [(r.event_id, r.load_tstamp) for r in kept], "event_id string, load_tstamp timestamp")
    dominated = dominated_later(kept_df, recorded_later, lookback=LOOKBACK).collect()
    assert [(r.event_id, r.domain_sessionid) for r in dominated] == [("d", "s2")]


def test_no_dedupe_join_forces_a_broadcast_of_the_window(spark, events_df):
    """In a full rebuild the window is the whole history: a forced broadcast of its event ids
    failed a 10M-event rebuild ("Not enough memory to build and broadcast the table"). The join
    strategy is Spark's, by size (adaptive execution still broadcasts the small side of an hour),
    so `spark.sql.autoBroadcastJoinThreshold=-1` turns every broadcast off, as Spark's error
    advises. The one broadcast asked for is of the verdicts, when the hourly step has counted
    them and found them few (`broadcast_verdicts`)."""
    rows = [event("d", load=ts(0.5)), event("d", load=ts(0.7), page_url="second"), event("e", load=ts(0.6))]
    window = validate(events_df(rows), days_late_allowed=3, allow_null_dvce_tstamps=True)
    earlier = copies(window.valid.where("false"))
    kept = kept_copies(window.valid, copy_verdicts(window.valid, earlier, lookback=LOOKBACK), broadcast_verdicts=False)
    later = dominated_later(kept.select("event_id", "load_tstamp"), copies(window.valid), lookback=LOOKBACK)
    previous = {key: spark.conf.get(key, None) for key in ("spark.sql.autoBroadcastJoinThreshold",
                                                           "spark.sql.adaptive.autoBroadcastJoinThreshold")}
    assert broadcasts_allowed(spark)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    spark.conf.set("spark.sql.adaptive.autoBroadcastJoinThreshold", "-1")
    try:
        assert not broadcasts_allowed(spark)  # so the hourly step does not broadcast the verdicts
        for df in (kept, later):
            plan = df._jdf.queryExecution().executedPlan().toString()
            assert "Broadcast" not in plan, plan
        assert sorted(r.event_id for r in kept.collect()) == ["d", "e"]
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
