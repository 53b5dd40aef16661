"""Operating the pipeline: a failed run leaves a fail-locked item, `incremental-assets limits`
reports it, `manifest resolve` (CLI or manifest_admin_job) releases it, the next run proceeds;
plan_job makes a plan from the UI and shows it on the `plans` asset; forget_job plans an erasure
(by default) or records it."""

import os
from datetime import date, datetime, timezone

import pytest
from dagster import DagsterInstance

from incremental_assets import cli
from incremental_assets.names import BASE_EVENTS
from incremental_assets.operator import plans
from incremental_assets.operator.operations import describe_limits
from incremental_assets.planning.processing_manifest import ItemStatus, State
from incremental_assets.settings import Settings
from incremental_assets.state.skipped_hours import skipped_hours
from resources.manifest import ManifestStore
from resources.manifest_items import item_id
from tests.delta_reads import read_table

DAY = date(2026, 1, 5)
UNTIL = "2026-01-05T01:30:00Z"  # one closed load hour: 00:00
ITEM = "base_events/2026-01-05-00:00"


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    from incremental_assets.sources.generator import generate_events

    path = tmp_path_factory.mktemp("ops_lake") / "events"
    generate_events(spark, events=200, days=1, start=DAY, out=str(path), seed=7, progress=lambda *_: None)
    return str(path)


@pytest.fixture
def dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", DAY.isoformat())
    monkeypatch.setenv("INCREMENTAL_ATTRIBUTES_AS_OF", "2026-01-06")
    return home


def status(item: str) -> ItemStatus:
    return ManifestStore.of(Settings.load()).states([item])[item].status


@pytest.mark.spark
@pytest.mark.slow
def test_a_failed_item_is_reported_resolved_and_the_next_run_proceeds(lake, dagster_home, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "not_there_yet"))
    assert cli.main(["run", "--until", UNTIL]) == 2  # no source: said in one line, nothing claimed
    assert "source table not found" in capsys.readouterr().err
    assert not (tmp_path / "warehouse" / "processing_manifest").exists()

    # A source whose file for 2026-01-05 is not Parquet: the hour fails while it is read.
    broken = tmp_path / "broken" / "load_date=2026-01-05"
    broken.mkdir(parents=True)
    (broken / "part-0.parquet").write_bytes(b"not parquet at all")
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "broken"))
    assert cli.main(["run", "--until", UNTIL]) == 1
    assert status(ITEM) is ItemStatus.FAIL_LOCKED

    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", lake)  # the cause is fixed ...
    capsys.readouterr()
    assert cli.main(["run", "--until", UNTIL]) == 1  # ... but the item stays locked until resolved
    refused = capsys.readouterr().out
    assert "hourly_job not run" in refused and ITEM in refused and "manifest resolve" in refused
    assert status(ITEM) is ItemStatus.FAIL_LOCKED

    assert cli.main(["limits", "--now", UNTIL]) == 0
    report = capsys.readouterr().out
    assert "4 item(s) need attention" in report
    assert f"{ITEM}  FAIL_LOCKED" in report and "neither a Delta table nor readable Parquet" in report

    assert cli.main(["manifest", "resolve", ITEM, "--note", "source restored"]) == 0
    assert "resolved" in capsys.readouterr().out
    assert status(ITEM) is ItemStatus.READY

    capsys.readouterr()
    assert cli.main(["run", "--until", UNTIL]) == 0
    assert ManifestStore.of(Settings.load()).states([ITEM])[ITEM].last.state is State.PROCESSED
    # Off a terminal, a plain line of figures per finished run: the hour's rows are base_events'.
    shown = capsys.readouterr().out
    rows = read_table(Settings.load().table_path(BASE_EVENTS)).num_rows
    assert f"progress: hourly: 1/1 load hours, 1/1 runs, {rows:,} rows written, " in shown, shown
    assert "progress: daily: 1/1 event days, 1/1 runs, " in shown and "progress: attributes: 1/1 runs, " in shown
    assert cli.main(["limits", "--now", UNTIL]) == 0
    report = capsys.readouterr().out
    assert "need attention" not in report
    # Each asset's own progress: the hourly step's prefix, the loads aggregated, attributes.
    assert ("base_events, sessions_lifecycle_manifest, quarantined_sessions, filtered_events (one step): every load "
            "before 2026-01-05 01:00 processed; nothing due") in report
    assert "daily_aggregates: the filtered rows of every load before 2026-01-05 01:00 aggregated or pending" in report
    assert "attributes: last computed at " in report and "; nothing queued" in report
    # The runs went to the instance in DAGSTER_HOME, where the UI shows them.
    assert len(DagsterInstance.get().get_run_records()) >= 3

    # A rules change makes the processed hour due again: limits says so, and what it should cost
    # at the hourly step's recorded rate (one successful step so far).
    monkeypatch.setenv("INCREMENTAL_APP_IDS", "only-this-app")
    assert cli.main(["limits", "--now", UNTIL]) == 0
    report = capsys.readouterr().out
    assert "due: 1 load hour(s) (1 processed under other rules (a settings change))" in report, report
    assert "at the hourly step's recorded cost" in report and "from the last 1 hourly step(s)" in report


def test_manifest_admin_job_resolves_and_skips_items(dagster_home):
    from incremental_assets.definitions import defs

    manifest = ManifestStore.of(Settings.load())
    failed, unwanted = item_id("base_events", "2026-01-05-03:00"), item_id("base_events", "2026-01-05-04:00")
    manifest.claim([failed, unwanted], application="base_events", run_id="r1", run_finished=lambda lock: None)
    manifest.close([failed, unwanted], run_id="r1", state=State.FAILED, application="base_events",
                   payload={"reason": "boom"})
    job = defs.resolve_job_def("manifest_admin_job")

    def admin(action: str, item: str):
        config = {"ops": {"manifest_admin": {"config": {"action": action, "item": item, "note": "by the test"}}}}
        return job.execute_in_process(run_config=config, instance=DagsterInstance.get(), raise_on_error=False)

    assert admin("resolve", failed).success
    assert status(failed) is ItemStatus.READY
    assert manifest.states([failed])[failed].last.payload == {"note": "by the test"}
    assert admin("skip", unwanted).success
    # A skipped load hour is resolved, and read as empty by every run from now on.
    assert status(unwanted) is ItemStatus.READY
    assert list(skipped_hours(Settings.load())) == [datetime(2026, 1, 5, 4, tzinfo=timezone.utc)]

    refused = admin("resolve", failed)  # nothing to resolve any more: the run fails and says why
    assert not refused.success
    (failure,) = [e for e in refused.all_events if e.is_step_failure]
    assert "not failed: nothing to resolve" in failure.event_specific_data.error.message


def test_plan_job_records_a_plan_and_shows_it_on_the_plans_asset(dagster_home, tmp_path, monkeypatch):
    from dagster import AssetKey

    from incremental_assets.definitions import defs

    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "no_source_yet"))
    job, instance = defs.resolve_job_def("plan_job"), DagsterInstance.get()

    def plan_job(**config):
        return job.execute_in_process(run_config={"ops": {"plan_op": {"config": config}}}, instance=instance,
                                      raise_on_error=False)

    result = plan_job(until="2026-01-06T00:00:00Z", restate_first="2026-01-05", restate_last="2026-01-05")
    assert result.success
    (event,) = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    shown = event.event_specific_data.asset_observation
    assert shown.asset_key == AssetKey("plans")
    plan = plans.recorded_plan(Settings.load(), shown.metadata["plan_id"].value)
    assert shown.metadata["trigger"].value == plan.trigger == "restate 2026-01-05..2026-01-05"
    assert shown.metadata["load_hours"].value == len(plan.hours) == 24
    assert shown.metadata["plan"].value == f"```\n{plans.describe(plan, full=True)}\n```"
    # Beside it, what `incremental-assets limits` prints at the plan's time.
    limits = describe_limits(Settings.load(), datetime(2026, 1, 6, tzinfo=timezone.utc))
    assert shown.metadata["limits"].value == f"```\n{limits}\n```"

    refused = plan_job(restate_first="2026-13-01", restate_last="2026-01-05")
    assert not refused.success
    (failure,) = [e for e in refused.all_events if e.is_step_failure]
    assert "restate_first='2026-13-01' is not a date" in failure.event_specific_data.error.message


@pytest.mark.spark
@pytest.mark.slow
def test_forget_job_plans_by_default_and_records_the_erasure_without_dry_run(lake, dagster_home, monkeypatch):
    from dagster import DagsterEventType

    from incremental_assets.definitions import defs
    from incremental_assets.names import APPLIED_PLAN_TAG, ERASURE_REQUESTS
    from tests.delta_reads import read_pandas

    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", lake)
    user = read_pandas(lake, ["domain_userid"]).domain_userid.dropna().iloc[0]
    job, instance = defs.resolve_job_def("forget_job"), DagsterInstance.get()

    def forget(**config):
        return job.execute_in_process(run_config={"ops": {"forget_op": {"config": {"until": UNTIL, **config}}}},
                                      instance=instance, raise_on_error=False)

    def erasure_states() -> list[str]:
        path = Settings.load().table_path(ERASURE_REQUESTS)
        return sorted(read_pandas(path, ["state"]).state) if os.path.exists(path) else []

    dry = forget(ids=[user])  # dry_run defaults to true: the plan alone
    assert dry.success and erasure_states() == []
    (observed,) = instance.get_records_for_run(dry.run_id, of_type=DagsterEventType.ASSET_OBSERVATION).records
    plan = plans.recorded_plan(Settings.load(), observed.asset_observation.metadata["plan_id"].value)
    assert plan.erasure is not None and APPLIED_PLAN_TAG not in instance.get_run_by_id(dry.run_id).tags

    applied = forget(ids=[user], dry_run=False, note="ticket")
    assert applied.success
    # Nothing processed yet holds the id: the request is recorded and complete at once.
    assert erasure_states() == ["COMPLETED", "REQUESTED"]
    assert instance.get_run_by_id(applied.run_id).tags[APPLIED_PLAN_TAG] == plan.plan_id

    refused = forget(ids=[user, " "], column="user_id")
    assert not refused.success
    (failure,) = [e for e in refused.all_events if e.is_step_failure]
    assert "ids[1]=' '" in failure.event_specific_data.error.message
