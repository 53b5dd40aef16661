"""Watermarks per app (planning.app_units) on the hostile source: an app added to `app_ids`
mid-stream runs its own history in catch-up runs, after the hours due for every app (the present
keeps its cadence); a failure in them leaves the other app's rows complete; an app removed has
its rows removed. After each, the tables equal the documented rules for the declared apps
(one of the hostile sessions mixes the two apps)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from dagster import AssetKey

from incremental_assets import runner
from incremental_assets.names import APP_IDS_TAG, PRIORITY_TAG
from incremental_assets.operator.operations import describe_limits, resolve_item
from incremental_assets.planning.hours import parse_hour_key
from incremental_assets.planning.processing_manifest import ItemStatus
from incremental_assets.settings import Settings
from incremental_assets.state.progress import plan_next_run
from incremental_assets.steps import hourly as hourly_step
from resources.manifest import ManifestStore
from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import (
    AS_OF,
    Source,
    assert_same_tables,
    fail_locked_hour_items,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def expected(rows: list[dict], *apps: str) -> dict[str, list[dict]]:
    return reference.expected_tables(rows, dataclasses.replace(reference_settings(), app_ids=apps), AS_OF)


def unit_items_fail_locked() -> list[str]:
    """The fail-locked base_events items of catch-up runs (`base_events@APPS/HOUR`)."""
    states = ManifestStore.of(Settings.load()).states()
    return sorted(i for i, s in states.items() if i.startswith("base_events@") and s.status is ItemStatus.FAIL_LOCKED)


def hourly_runs(instance, report) -> list[tuple[str, str | None]]:
    """(first hour, app ids tag) of the report's hourly runs, in the order they ran."""
    runs = [instance.get_run_by_id(run.run_id) for run in report.runs if run.job == "hourly_job"]
    return [(run.tags["dagster/asset_partition_range_start"], run.tags.get(APP_IDS_TAG)) for run in runs]


# 170 s: in `make test-long` (and CI), to keep `make test` under 20 minutes on 2 cores; the
# catch-up plans are checked in `make test` (tests/unit/planning/test_app_units.py,
# tests/integration/test_sensors.py).
@pytest.mark.long
def test_an_app_added_catches_up_behind_the_present_and_an_app_removed_leaves(spark, instance, tmp_path,
                                                                              monkeypatch):
    source = Source(str(tmp_path / "events"), [build() for build in hostile.BUILDERS])
    warehouse = tmp_path / "incremental"
    use(monkeypatch, source.path, warehouse, INCREMENTAL_APP_IDS="web")

    def run_at(t: dt.datetime, expect_success: bool = True):
        source.land_until(t)
        report = runner.run_until(t, instance=instance, echo=quiet)
        assert report.success == expect_success, (t, report.refused, report.runs)
        return report

    run_at(at(3, 11))
    assert_same_tables(pipeline_tables(warehouse), expected(source.rows, "web"), "web alone")

    # mobile is added: the hours processed for web catch up for mobile alone, after the new
    # hours, which run for both first.
    use(monkeypatch, source.path, warehouse, INCREMENTAL_APP_IDS="web,mobile")
    source.land_until(at(3, 15))
    settings = Settings.load()
    plan = plan_next_run(settings, at(3, 15), ManifestStore.of(settings).snapshot())
    assert plan.ranges and plan.next_run()[2] is None  # the present, for every app
    assert plan.catch_up.runs and all(run.app_ids == ("mobile",) for run in plan.catch_up.runs)
    assert plan.catch_up.runs[-1].end <= at(3, 11) <= plan.ranges[0][0]
    assert "catching up app(s) mobile added" in describe_limits(settings, at(3, 15))

    # A failure in mobile's catch-up: web's rows stay complete, the present hours run.
    with monkeypatch.context() as m:
        real = hourly_step.compute

        def failing_for_mobile(warehouse, start, end, app_ids=None):
            if app_ids is not None:
                raise RuntimeError("injected failure in a catch-up run")
            return real(warehouse, start, end, app_ids=app_ids)

        m.setattr(hourly_step, "compute", failing_for_mobile)
        report = run_at(at(3, 15), expect_success=False)
    ran = hourly_runs(instance, report)
    assert ran[0][1] is None and ran[-1][1] == "mobile", ran  # the present first, then the catch-up
    assert instance.get_run_by_id(report.runs[-1].run_id).tags[PRIORITY_TAG] == "-1"
    web_rows = [r for r in source.rows if r["app_id"] == "web"]
    tables = pipeline_tables(warehouse)
    assert ({r["event_id"] for r in tables["base_events"] if r["app_id"] == "web"}
            == {r["event_id"] for r in expected(web_rows, "web", "mobile")["base_events"]})

    # The failure locks mobile's catch-up alone: the hours' own items stay free, so a late web
    # row in one of those hours runs (for every app) while mobile's other hours wait.
    assert fail_locked_hour_items() == []
    failed = unit_items_fail_locked()
    assert failed and all(item.startswith("base_events@mobile/") for item in failed), failed
    assert "catch-up hour(s) blocked, for their app ids alone" in describe_limits(Settings.load(), at(3, 15))
    hour = parse_hour_key(failed[0].partition("/")[2])
    late = hostile.event(hour + dt.timedelta(minutes=5), session="late-web-s", user="late-web-u", app="web",
                         load=hour + dt.timedelta(minutes=20))
    hostile.write_source(source.path, [late])
    source.rows.append(late)
    with monkeypatch.context() as m:
        m.setattr(hourly_step, "compute", failing_for_mobile)
        report = run_at(at(3, 15), expect_success=False)
    assert [apps for _, apps in hourly_runs(instance, report)] == [None], hourly_runs(instance, report)
    assert "is fail-locked, for its app ids alone" in report.refused
    web_rows = [r for r in source.rows if r["app_id"] == "web"]
    assert ({r["event_id"] for r in pipeline_tables(warehouse)["base_events"] if r["app_id"] == "web"}
            == {r["event_id"] for r in expected(web_rows, "web", "mobile")["base_events"]})

    # Resolved, the catch-up runs; the tables are the rules' for both apps.
    for item in unit_items_fail_locked():
        resolve_item(Settings.load(), item, note="transient")
    report = run_at(at(4, 1))
    assert_same_tables(pipeline_tables(warehouse), expected(source.rows, "web", "mobile"), "mobile caught up")
    settings = Settings.load()
    assert not plan_next_run(settings, at(4, 1), ManifestStore.of(settings).snapshot()).catch_up.hours

    # web is removed: its rows leave every table by catch-up runs of web alone.
    use(monkeypatch, source.path, warehouse, INCREMENTAL_APP_IDS="mobile")
    report = run_at(at(4, 1))
    assert {apps for _, apps in hourly_runs(instance, report)} == {"web"}, hourly_runs(instance, report)
    assert_same_tables(pipeline_tables(warehouse), expected(source.rows, "mobile"), "web removed")
    # The catch-up's per-hour figures are its apps' rows, named so, not the partition's row count.
    metadata = instance.get_latest_materialization_event(AssetKey("base_events")).asset_materialization.metadata
    assert metadata["catch_up_app_ids"].value == "web" and "dagster/partition_row_count" not in metadata


def few_rows() -> list[dict]:
    """Two sessions, one per app, in load hour at(0, 1), and a web row in at(0, 4)."""
    every = dt.timedelta(minutes=10)
    return [*hostile.session_events("web-s", "web-u", at(0, 1), 2, every, app="web"),
            *hostile.session_events("mobile-s", "mobile-u", at(0, 1, 5), 2, every, app="mobile"),
            hostile.event(at(0, 4), session="web-s2", user="web-u", app="web")]


def runs_until(instance):
    def run(t: dt.datetime, expect_success: bool = True):
        report = runner.run_until(t, instance=instance, echo=quiet)
        assert report.success == expect_success, (t, report.refused, report.runs)
        return report
    return run


def failing_after_the_writes(real):
    """filtered_counts that raises in a catch-up run: its rows are written, its ledger rows not."""
    def counts(warehouse, results):
        if results.app_ids is not None:
            raise RuntimeError("injected failure in a catch-up run, after its rows were written")
        return real(warehouse, results)
    return counts


def test_a_row_deleted_while_a_catch_up_runs_leaves_every_table(spark, instance, tmp_path, monkeypatch):
    from deltalake import DeltaTable

    rows, source, warehouse = few_rows(), str(tmp_path / "events"), tmp_path / "incremental"
    hostile.write_source(source, rows)
    run = runs_until(instance)
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web")
    run(at(0, 6))

    # mobile is added; the web row is deleted after the plan, as the catch-up begins.
    gone = rows[0]
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web,mobile")
    with monkeypatch.context() as m:
        real, deleted = hourly_step.compute, []

        def deleting_first(warehouse, start, end, app_ids=None):
            if app_ids is not None and not deleted:
                DeltaTable(source).delete(f"event_id = '{gone['event_id']}'")
                deleted.append(gone)
            return real(warehouse, start, end, app_ids=app_ids)

        m.setattr(hourly_step, "compute", deleting_first)
        run(at(0, 6))
    assert deleted, "no catch-up ran"
    run(at(0, 7))
    left = [r for r in rows if r is not gone]
    assert_same_tables(pipeline_tables(warehouse), expected(left, "web", "mobile"), "a web row deleted mid catch-up")


def test_a_catch_up_failed_after_its_writes_ends_with_the_apps_declared_next(spark, instance, tmp_path,
                                                                            monkeypatch):
    rows, source, warehouse = few_rows(), str(tmp_path / "events"), tmp_path / "incremental"
    hostile.write_source(source, rows)
    run = runs_until(instance)
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web")
    run(at(0, 6))

    # mobile is added, its catch-up fails once its rows are written; then mobile is taken out.
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web,mobile")
    with monkeypatch.context() as m:
        m.setattr(hourly_step, "filtered_counts", failing_after_the_writes(hourly_step.filtered_counts))
        run(at(0, 6), expect_success=False)
    assert unit_items_fail_locked()
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web")
    run(at(0, 7))
    assert_same_tables(pipeline_tables(warehouse), expected(rows, "web"), "mobile's failed catch-up, mobile taken out")
    assert unit_items_fail_locked() == []


def test_a_removal_failed_after_its_writes_ends_with_the_app_added_back(spark, instance, tmp_path, monkeypatch):
    rows, source, warehouse = few_rows(), str(tmp_path / "events"), tmp_path / "incremental"
    hostile.write_source(source, rows)
    run = runs_until(instance)
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web,mobile")
    run(at(0, 6))

    # mobile is taken out, the removal fails once its rows are removed; then mobile is added back.
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web")
    with monkeypatch.context() as m:
        m.setattr(hourly_step, "filtered_counts", failing_after_the_writes(hourly_step.filtered_counts))
        run(at(0, 6), expect_success=False)
    use(monkeypatch, source, warehouse, INCREMENTAL_APP_IDS="web,mobile")
    run(at(0, 7))
    assert_same_tables(pipeline_tables(warehouse), expected(rows, "web", "mobile"),
                       "mobile's failed removal, added back")
