"""`incremental-assets plan` and `apply` on the hostile sources: a plan lists the load hours
its apply processes, exactly, with the source rows each holds; a restatement lists the event
days its apply rebuilds, exactly; apply refuses a plan the source or the settings moved under."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from dagster import DagsterInstance

from incremental_assets import cli, runner
from incremental_assets.names import APPLIED_PLAN_TAG, ATTRIBUTES, BASE_EVENTS, HOUR_LEDGER
from incremental_assets.operator import apply, plans
from incremental_assets.planning.default_attributes import DEFAULT_ATTRIBUTES
from incremental_assets.planning.processing_manifest import State
from incremental_assets.progress_display import PlainDisplay, RunTally
from incremental_assets.settings import Settings
from incremental_assets.state.progress import current_snapshot
from resources.manifest import ManifestStore
from tests.delta_reads import read_table
from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import Source, quiet, use

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def instance():
    return DagsterInstance.ephemeral()


def hours_written_by(settings: Settings, report) -> set[dt.datetime]:
    """The load hours with data the report's hourly runs recorded in the hour ledger."""
    run_ids = {run.run_id for run in report.runs if run.job == "hourly_job"}
    ledger = read_table(settings.table_path(HOUR_LEDGER)).to_pylist()
    return {row["load_hour_tstamp"].astimezone(dt.UTC) for row in ledger
            if row["run_id"] in run_ids and row["source_fingerprint"]}


def source_rows_read(settings: Settings, report) -> dict[str, int]:
    """Per hourly run of the report, the source rows its PROCESSED records say it read."""
    run_ids = {run.run_id for run in report.runs if run.job == "hourly_job"}
    return {r.run_id: r.payload["source_rows"] for r in ManifestStore.of(settings).records()
            if r.run_id in run_ids and r.state is State.PROCESSED and r.item_id.startswith(f"{BASE_EVENTS}/")}


def source_rows_by_hour(rows: list[dict]) -> Counter:
    return Counter(reference.hour_of(t) for r in rows if (t := reference.load_time(r)) is not None)


def test_a_plan_lists_what_its_apply_runs_and_is_refused_once_the_source_moves(spark, instance, tmp_path,
                                                                              monkeypatch, capsys):
    source = Source(str(tmp_path / "events"), [build() for build in hostile.BUILDERS])
    warehouse = tmp_path / "warehouse"
    use(monkeypatch, source.path, warehouse)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    source.land_until(at(2, 12))

    # Planned from the CLI: an id, the hours due with their rows, how to apply it.
    assert cli.main(["plan", "--until", at(2, 12).isoformat()]) == 0
    shown = capsys.readouterr().out
    plan_id = shown.split()[1].rstrip(":")
    assert f"incremental-assets apply {plan_id}" in shown and "new:" in shown, shown
    settings = Settings.load()
    plan = plans.recorded_plan(settings, plan_id)
    landed = source_rows_by_hour(source.rows)
    # Every hour that holds rows, with its rows (an hour a file's statistics may hold, with none, shows 0).
    assert {h.hour: h.rows for h in plan.hours} == {h.hour: landed[h.hour] for h in plan.hours}
    assert {h.hour for h in plan.hours if h.rows} == {hour for hour in landed if hour < at(2, 12)}
    assert {h.reason for h in plan.hours} == {"new"}

    # Rows land in planned and new hours (a source commit): the plan is refused, saying why.
    source.land_until(at(3, 11))
    with pytest.raises(plans.PlanRefused, match=r"planned load hour\(s\) changed in the source since the plan \(source "
                                                 r"at version \d+, planned at \d+\), first"):
        runner.apply_plan(settings, plan_id, instance=instance, echo=quiet)

    # Planned again, applied: the hours it processes are the hours listed, no more, no fewer.
    plan = plans.make_plan(settings, at(3, 11))
    plans.record_plan(settings, plan, at(3, 11))
    lines = []
    display = PlainDisplay(RunTally(cost=None, clock=lambda: 0.0), lines.append)
    report = runner.apply_plan(settings, plan.plan_id, instance=instance, echo=display.echo, observer=display)
    assert report.success, report.runs
    assert hours_written_by(settings, report) == {h.hour for h in plan.hours}
    # Its progress names the plan, and the rows its hourly runs wrote are those base_events holds.
    progress = [line for line in lines if line.startswith("progress")]
    assert progress and all(line.startswith(f"progress (plan {plan.plan_id}): ") for line in progress), lines
    hourly_rows = sum(run.rows for run in report.runs if run.job == "hourly_job")
    assert hourly_rows == read_table(settings.table_path(BASE_EVENTS)).num_rows > 0
    assert f"{hourly_rows:,} rows written" in [line for line in progress if ": hourly: " in line][-1]
    assert set(plan.days) and {d.day for d in plan.days} <= set(report.rebuilt_days)
    # Every run it launched carries the plan's id.
    assert {instance.get_run_by_id(run.run_id).tags[APPLIED_PLAN_TAG] for run in report.runs} == {plan.plan_id}
    # Each hourly step records the source rows it read (the cost model's rows): the plan's, in all.
    assert sum(source_rows_read(settings, report).values()) == plan.rows

    # Attributes declared before they are applied: the plan names them (nothing else is due),
    # and its apply computes them, then none is left to plan.
    declaration = tmp_path / "attributes.yml"
    declaration.write_text("attributes:\n"
                           "  - {name: page_views, aggregation: count, events: [page_view]}\n"
                           "  - {name: last_event, aggregation: last, property: event_name}\n")
    monkeypatch.setenv("INCREMENTAL_ATTRIBUTES_FILE", str(declaration))
    declared = Settings.load()
    keys = sorted(d.key for d in declared.declared_attributes() if d not in DEFAULT_ATTRIBUTES)  # the defaults are held
    added = plans.make_plan(declared, at(3, 11))
    assert (added.hours, added.days) == ((), ()) and added.attributes == tuple(
        f"{key} added: computed for every user" for key in sorted(keys, key=lambda k: k.rpartition("@")[0]))
    assert "attributes: the declared attributes changed" in plans.describe(added)
    plans.record_plan(declared, added, at(3, 11))
    report = runner.apply_plan(declared, added.plan_id, instance=instance, echo=quiet)
    assert report.success and [run.job for run in report.runs] == ["attributes_job"], report.runs
    assert {"page_views", "last_event"} <= set(read_table(declared.table_path(ATTRIBUTES)).column_names)
    assert plans.make_plan(declared, at(3, 11)).attributes == ()
    monkeypatch.delenv("INCREMENTAL_ATTRIBUTES_FILE")

    # Late rows land in hours processed already: they are planned as changed, with their rows.
    source.land_until(at(11))
    late = plans.make_plan(settings, at(11))
    changed = {h.hour for h in late.hours if h.reason == "changed"}
    assert changed and all(hour < at(3, 11) for hour in changed)
    assert {h.hour: h.rows for h in late.hours} == {h: source_rows_by_hour(source.rows)[h] for h in
                                                    {h.hour for h in late.hours}}

    # A restatement of day 2: every load hour of it, and exactly the event days its apply
    # rebuilds, each with why: day 2, widened to day 1 (a session over midnight loaded on day 2).
    restated = plans.make_plan(settings, at(3, 11), restate=(at(2).date(), at(2).date()))
    assert [h.hour for h in restated.hours] == [at(2) + i * dt.timedelta(hours=1) for i in range(24)]
    assert [d.day for d in restated.days if d.reason.startswith("widened")] == [at(1).date()], restated.days
    plans.record_plan(settings, restated, at(3, 11))

    # A settings change between plan and apply refuses it too; planned under the new settings
    # (before the code location uses them), every processed hour the source's files hold is due,
    # "rules changed".
    monkeypatch.setenv("INCREMENTAL_EVENT_NAMES", "page_view")
    reshaped = plans.make_plan(Settings.load(), at(3, 11))
    ledger_rows = read_table(settings.table_path(HOUR_LEDGER)).to_pylist()
    processed = {row["load_hour_tstamp"].astimezone(dt.UTC) for row in ledger_rows}
    in_files = set(current_snapshot(settings, at(3, 11)).fingerprints)
    assert {h.hour for h in reshaped.hours if h.reason == "rules changed"} == processed & in_files
    with pytest.raises(plans.PlanRefused, match="settings changed"):
        runner.apply_plan(Settings.load(), restated.plan_id, instance=instance, echo=quiet)
    monkeypatch.delenv("INCREMENTAL_EVENT_NAMES")
    report = runner.apply_plan(settings, restated.plan_id, instance=instance, echo=quiet)
    assert report.success, report.runs
    assert set(report.rebuilt_days) == {d.day for d in restated.days}
    assert {h.hour for h in restated.hours if h.rows} <= hours_written_by(settings, report) <= {
        h.hour for h in restated.hours}

    # A restatement of daily_aggregates alone: the event days asked for, no load hour; its
    # apply rebuilds exactly those days, then attributes.
    daily = plans.make_plan(settings, at(3, 11), restate=(at(1).date(), at(2).date()), asset="daily_aggregates")
    assert daily.hours == () and [(d.day, d.reason) for d in daily.days] == [
        (at(1).date(), "restated"), (at(2).date(), "restated")]
    assert "hourly assets: no load hour" in plans.describe(daily) and daily.restated_asset == "daily_aggregates"
    plans.record_plan(settings, daily, at(3, 11))
    report = runner.apply_plan(settings, daily.plan_id, instance=instance, echo=quiet)
    assert report.success and [run.job for run in report.runs] == ["daily_job", "attributes_job"], report.runs
    assert report.rebuilt_days == [at(1).date(), at(2).date()]
    with pytest.raises(ValueError, match="--asset 'attributes': a restatement starts from one of"):
        plans.make_plan(settings, at(3, 11), restate=(at(1).date(), at(2).date()), asset="attributes")


def test_apply_runs_the_plans_hours_alone_and_is_not_refused_by_commits_that_leave_them(spark, instance, tmp_path,
                                                                                     monkeypatch):
    """A loader commits every few minutes: a commit that touches none of the planned hours leaves
    the plan valid; one that lands after the check (while apply starts) adds no hour to the run."""
    source, warehouse = str(tmp_path / "events"), tmp_path / "warehouse"
    use(monkeypatch, source, warehouse)
    hostile.write_source(source, [hostile.event(at(1, 1, 10), session="a"), hostile.event(at(1, 1, 20), session="a")])
    settings = Settings.load()
    plan = plans.make_plan(settings, at(1, 5))
    plans.record_plan(settings, plan, at(1, 5))
    assert {h.hour for h in plan.hours if h.rows} == {at(1, 1)}

    # A commit of rows loaded after the plan's time: no planned hour changed, the plan is applied.
    hostile.write_source(source, [hostile.event(at(1, 7, 10), session="c")])
    # Another lands in a closed hour the plan does not hold, right after apply checked the plan.
    checked = apply.plan_to_apply

    def check_then_commit(*args, **kwargs):
        planned = checked(*args, **kwargs)
        hostile.write_source(source, [hostile.event(at(1, 3, 10), session="b")])
        return planned

    monkeypatch.setattr(runner, "plan_to_apply", check_then_commit)
    report = runner.apply_plan(settings, plan.plan_id, instance=instance, echo=quiet)
    assert report.success, report.runs
    assert hours_written_by(settings, report) == {at(1, 1)}
    # The hour landed meanwhile is left to the next plan.
    assert at(1, 3) in {h.hour for h in plans.make_plan(settings, at(1, 5)).hours}
