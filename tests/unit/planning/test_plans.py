"""A plan's id, its refusal reasons, and the reasons it gives each hour and day."""

import json
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

from incremental_assets.operator.plans import as_json, from_json
from incremental_assets.planning.hours import ranges_within
from incremental_assets.planning.plans import (
    ERASED_HOUR,
    Plan,
    PlannedDay,
    PlannedErasure,
    PlannedHour,
    RunToLaunch,
    attribute_changes,
    hour_reasons,
    runs_to_launch,
    why_plan_moved,
    widened_days,
)

H0 = datetime(2026, 3, 2, 22, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)


def plan(**changes) -> Plan:
    fields = dict(trigger="due", until=H0 + 3 * HOUR, source_version=809, settings_digest="s1",
                  hours=(PlannedHour(H0, "new", 10), PlannedHour(H0 + HOUR, "new", 5)),
                  days=(PlannedDay(date(2026, 3, 2), "load hour"),), runs=1, estimate_seconds=12.0)
    return Plan(**{**fields, **changes})


ERASURE = PlannedErasure(ids=(("user_id", "ab12"),), rows=(("base_events", 4), ("source", 5)), sessions=2)


def test_the_id_follows_what_the_plan_depends_on_and_does_not_its_estimate():
    assert plan().plan_id == plan(estimate_seconds=99.0, runs=3).plan_id
    ids = {plan().plan_id, plan(source_version=810).plan_id, plan(settings_digest="s2").plan_id,
           plan(hours=plan().hours[:1]).plan_id, plan(trigger="restate 2026-03-02..2026-03-02").plan_id,
           plan(days=()).plan_id, plan(until=H0 + 4 * HOUR).plan_id,
           plan(attributes=("visits@2 added: computed for every user",)).plan_id,
           plan(erasure=ERASURE).plan_id, plan(erasure=PlannedErasure(ERASURE.ids, ERASURE.rows, 3)).plan_id}
    assert len(ids) == 10


def test_a_moved_source_settings_or_closure_is_named():
    assert why_plan_moved(plan(), plan()) is None
    assert why_plan_moved(plan(), plan(source_version=812)) == "source at version 812, planned at 809: plan again"
    assert "settings changed" in why_plan_moved(plan(), plan(settings_digest="s2"))
    more = plan(hours=(*plan().hours, PlannedHour(H0 + 2 * HOUR, "new", 1)))
    assert why_plan_moved(plan(), more) == ("the closure changed since the plan (1 load hour(s) due and not planned, "
                                            "first 2026-03-03-00:00): plan again")
    assert "planned and no longer due, first 2026-03-02-22:00" in why_plan_moved(plan(), plan(hours=plan().hours[1:]))
    assert "event days" in why_plan_moved(plan(), plan(days=()))


def test_a_source_commit_is_judged_by_the_planned_hours_files():
    fingerprinted = plan(hours=(PlannedHour(H0, "new", 10, "f1"), PlannedHour(H0 + HOUR, "changed", 5, "")))
    # A loader's commit elsewhere (a new source version, the same files in every planned hour).
    assert why_plan_moved(fingerprinted, replace(fingerprinted, source_version=812)) is None
    touched = replace(fingerprinted, source_version=812,
                      hours=(fingerprinted.hours[0], PlannedHour(H0 + HOUR, "changed", 6, "f2")))
    assert why_plan_moved(fingerprinted, touched) == (
        "1 planned load hour(s) changed in the source since the plan (source at version 812, planned at 809), "
        "first 2026-03-02-23:00: plan again")
    # A plan recorded without fingerprints is refused by any commit, as it was.
    assert why_plan_moved(plan(), plan(source_version=812)) == "source at version 812, planned at 809: plan again"


def test_a_plan_read_back_keeps_its_fingerprints_and_one_recorded_without_them_reads():
    fingerprinted = plan(hours=(PlannedHour(H0, "new", 10, "f1"),))
    assert from_json(as_json(fingerprinted)) == fingerprinted
    old = json.loads(as_json(fingerprinted))
    old["hours"] = [h[:3] for h in old["hours"]]
    assert from_json(json.dumps(old)).hours == (PlannedHour(H0, "new", 10),)


def test_only_the_allowed_hours_of_a_range_run_in_contiguous_stretches():
    allowed = {H0, H0 + HOUR, H0 + 3 * HOUR}
    assert ranges_within(H0 - HOUR, H0 + 5 * HOUR, allowed) == [(H0, H0 + 2 * HOUR), (H0 + 3 * HOUR, H0 + 4 * HOUR)]
    assert ranges_within(H0 + 4 * HOUR, H0 + 6 * HOUR, allowed) == []


def test_an_hour_takes_the_first_reason_that_applies():
    reasons = hour_reasons(new=[H0], changed=[H0 + HOUR], removed=[H0 + HOUR], lookback=[H0 - HOUR],
                           other_rules=[H0], restated=[])
    assert reasons == {H0: "rules changed", H0 + HOUR: "data gone", H0 - HOUR: "look-back"}


def test_days_widen_to_where_an_hours_rows_landed_each_with_why():
    days = widened_days({H0: "changed"}, {H0: {date(2026, 3, 1), date(2026, 3, 2)}, H0 + HOUR: {date(2026, 2, 1)}},
                        due_days={date(2026, 2, 27)}, requested={date(2026, 3, 2)})
    assert [d.day for d in days] == [date(2026, 2, 27), date(2026, 3, 1), date(2026, 3, 2)]
    reasons = {d.day: d.reason for d in days}
    assert reasons[date(2026, 3, 2)] == "restated"
    assert reasons[date(2026, 3, 1)].startswith("widened from load day 2026-03-02: rows of load hour 2026-03-02-22:00")
    assert reasons[date(2026, 2, 27)].startswith("due now")


def test_declared_attributes_added_changed_and_removed_are_each_named():
    recorded = {"visits@a1", "revenue@b1", "country@c1"}
    declared = {"visits@a1", "revenue@b2", "first_page@d1"}
    assert attribute_changes(recorded, declared) == (
        "revenue@b2 changed from revenue@b1: recomputed for every user",
        "first_page@d1 added: computed for every user",
        "country@c1 removed: its column dropped")
    assert attribute_changes(recorded, recorded) == ()
    assert attribute_changes(None, declared) == ()  # no attributes table yet: the first run computes them all
    moved = why_plan_moved(plan(), plan(attributes=attribute_changes(recorded, declared)))
    assert moved == "the declared attributes to recompute changed since the plan: plan again"


def test_an_erasure_runs_its_hours_again_and_rebuilds_only_the_days_its_sessions_lie_on():
    reasons = hour_reasons(new=[H0 + HOUR], changed=[], removed=[], lookback=[], other_rules=[],
                           erased=[H0, H0 + HOUR])
    assert reasons == {H0: ERASED_HOUR, H0 + HOUR: "new"}  # an hour due anyway keeps its reason
    days = widened_days(reasons, {H0: {date(2026, 3, 1), date(2026, 3, 2)}, H0 + HOUR: {date(2026, 3, 3)}},
                        due_days=set(), erased_days={date(2026, 2, 28)})
    # The erased hour's other rows are read unchanged: none of its days is widened to.
    assert {d.day: d.reason.split(":")[0] for d in days} == {
        date(2026, 2, 28): "erasure", date(2026, 3, 2): "load hour 2026-03-02-23",
        date(2026, 3, 3): "widened from load day 2026-03-02"}
    moved = why_plan_moved(plan(erasure=ERASURE), plan(erasure=PlannedErasure(ERASURE.ids, (("base_events", 5),), 2)))
    assert moved == "the rows holding the erased ids changed since the plan: plan again"


def test_a_plan_applied_from_a_job_launches_its_hours_in_stretches_else_its_days_else_attributes():
    hours = tuple(PlannedHour(H0 + n * HOUR, "new", 1) for n in (0, 1, 2, 5))
    assert runs_to_launch(plan(hours=hours), max_hours_per_run=2) == [
        RunToLaunch("hourly_job", "2026-03-02-22:00", "2026-03-02-23:00"),
        RunToLaunch("hourly_job", "2026-03-03-00:00", "2026-03-03-00:00"),
        RunToLaunch("hourly_job", "2026-03-03-03:00", "2026-03-03-03:00")]
    days = tuple(PlannedDay(date(2026, 3, d), "restated") for d in (1, 2, 4))
    assert runs_to_launch(plan(hours=(), days=days), max_hours_per_run=2) == [
        RunToLaunch("daily_job", "2026-03-01", "2026-03-02"), RunToLaunch("daily_job", "2026-03-04", "2026-03-04")]
    assert runs_to_launch(plan(hours=(), days=(), attributes=("added a",)), 2) == [RunToLaunch("attributes_job")]
    assert runs_to_launch(plan(hours=(), days=()), 2) == []
