"""Watermarks per app: which hours catch up for which app ids, in which runs."""

from datetime import datetime, timedelta, timezone

from incremental_assets.planning.app_units import (
    RecordedHour,
    apps_to_catch_up,
    catch_up_record,
    catch_up_runs,
    joined,
    split,
)

H0 = datetime(2026, 3, 2, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
BOTH = frozenset({"web", "mobile"})


def at(hours: int) -> datetime:
    return H0 + hours * HOUR


def test_an_hour_catches_up_the_apps_it_lacks_and_those_it_holds_and_should_not():
    processed_for = {at(0): frozenset({"web"}), at(1): BOTH, at(2): frozenset({"web", "shop"})}
    assert apps_to_catch_up(processed_for, BOTH) == {at(0): {"mobile"}, at(2): {"mobile", "shop"}}


def test_hours_needing_the_same_apps_run_together_over_empty_gaps_never_over_data():
    web = frozenset({"web"})
    # 0-1 and 4 need mobile; 2-3 hold no data; 6 needs mobile but 5 holds data due for every app.
    processed_for = {at(0): web, at(1): web, at(4): web, at(6): web}
    catch_up = catch_up_runs(processed_for, BOTH, max_hours_per_run=168, backfill_limit_days=30,
                             not_bridged={at(5)})
    assert [(r.start, r.end, r.app_ids, r.added, r.removed) for r in catch_up.runs] == [
        (at(0), at(5), ("mobile",), ("mobile",), ()), (at(6), at(7), ("mobile",), ("mobile",), ())]
    assert catch_up.runs[0].describe() == "app(s) mobile added"
    assert (catch_up.hours, catch_up.deferred) == (4, 0)
    assert catch_up.progress() == "0% done, 4 of 4 processed hour(s) left"


def test_a_run_takes_at_most_max_hours_per_run_and_a_plan_at_most_backfill_limit_days():
    processed_for = {at(h): frozenset({"web", "gone"}) for h in range(0, 24 * 3)}
    catch_up = catch_up_runs(processed_for, BOTH, max_hours_per_run=24, backfill_limit_days=2)
    assert [(r.start, r.end) for r in catch_up.runs] == [(at(0), at(24)), (at(24), at(48))]
    assert catch_up.runs[0].app_ids == ("gone", "mobile") and catch_up.runs[0].describe() == (
        "app(s) mobile added and app(s) gone removed")
    assert (catch_up.hours, catch_up.deferred) == (72, 24)
    assert catch_up.reason(at(50)) == "app(s) mobile added and app(s) gone removed"


def test_hours_processed_for_the_declared_apps_are_done():
    processed_for = {at(0): BOTH, at(1): frozenset({"web"})}
    catch_up = catch_up_runs(processed_for, BOTH, max_hours_per_run=168, backfill_limit_days=30)
    assert catch_up.progress() == "50% done, 1 of 2 processed hour(s) left"
    assert catch_up_runs({at(0): BOTH}, BOTH, max_hours_per_run=168, backfill_limit_days=30).runs == []


def test_app_ids_are_kept_sorted_and_joined_and_a_missing_list_means_every_app():
    assert joined({"web", "mobile"}) == "mobile,web"
    assert split("mobile,web") == BOTH and split("") == frozenset() and split(None) is None


def test_an_hour_whose_catch_up_failed_waits_alone_for_those_apps():
    web = frozenset({"web"})
    processed_for = {at(h): web for h in range(4)}
    locked = {at(1): (frozenset({"mobile"}), "base_events@mobile/2026-03-02-01:00"),
              at(3): (frozenset({"shop"}), "base_events@shop/2026-03-02-03:00")}  # another app: no bearing
    catch_up = catch_up_runs(processed_for, BOTH, max_hours_per_run=168, backfill_limit_days=30, fail_locked=locked)
    assert [(r.start, r.end) for r in catch_up.runs] == [(at(0), at(1)), (at(2), at(4))]
    assert catch_up.blocked == {at(1): "base_events@mobile/2026-03-02-01:00"}
    assert catch_up.hours == 4  # the blocked hour still has to catch up
    everything_locked = catch_up_runs({at(1): web}, BOTH, max_hours_per_run=168, backfill_limit_days=30,
                                      fail_locked=locked)
    assert everything_locked.runs == [] and everything_locked.hours == 1 and everything_locked.blocked


def test_a_catch_up_records_what_it_read_only_when_the_other_apps_rows_came_from_the_same():
    recorded = RecordedHour("f1", "rules", 7, frozenset({"web"}))
    assert catch_up_record(recorded, "f1", 9, "rules") == ("f1", 9, "rules")
    # Rows landed, deleted or corrected since the other apps' rows were processed: kept as recorded (due again).
    assert catch_up_record(recorded, "f2", 9, "rules") == ("f1", 7, "rules")
    assert catch_up_record(RecordedHour("run-again", "rules", None, None), "f1", 9, "rules") == ("run-again", None,
                                                                                                  "rules")
    # An hour never recorded: processed empty, so due for every app once it holds data.
    assert catch_up_record(None, "f1", 9, "rules") == ("", None, "rules")
    assert catch_up_record(None, "", 9, "rules") == ("", 9, "rules")
