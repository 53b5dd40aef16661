"""The sensors: hourly_load_sensor launches the oldest load hours whose data differs from what
they were processed from (new hours, gaps, hours a late file landed in, however old), skips
cleanly otherwise; late_days_sensor plans the event days from the daily ledger, and
attributes_sensor follows the daily runs.

The first tests need no Spark: the source is a small Delta table written with delta-rs (the
sensor only reads its log), and "processed" hours are what a run leaves: ledger rows with the
hours' fingerprints and PROCESSED manifest records. The last test runs the real jobs in this
process on a source that grows hour by hour.
"""

from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dagster import AssetRecordsFilter, DagsterEventType, DagsterRunStatus, build_sensor_context
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from deltalake import DeltaTable, write_deltalake

from incremental_assets.automation import hourly_sensor, late_days_sensors
from incremental_assets.definitions import defs, warehouse
from incremental_assets.names import (
    APP_IDS_TAG,
    APPLIED_PLAN_TAG,
    HOUR_LEDGER,
    HOURLY_ASSETS,
    PLAN_TAG,
    PLANS,
    PRIORITY_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
)
from incremental_assets.operator import plans
from incremental_assets.planning.processing_manifest import State
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import file_hours, holds_no_load_time, source_snapshot
from resources.manifest import ManifestStore
from resources.manifest_items import item_id
from tests.delta_reads import read_pandas

DAY = datetime(2026, 1, 5, tzinfo=timezone.utc)
H = timedelta(hours=1)


def at(hour: float) -> datetime:
    return DAY + timedelta(hours=hour)


def key(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d-%H:%M")


def add_loads(source, *loads: datetime) -> None:
    """Append one file per load day with rows loaded at `loads` (delta-rs writes min/max stats)."""
    table = pa.table({
        "event_id": [f"e-{ts.isoformat()}" for ts in loads],
        "collector_tstamp": pa.array([ts - timedelta(minutes=2) for ts in loads], pa.timestamp("us", "UTC")),
        "load_tstamp": pa.array(list(loads), pa.timestamp("us", "UTC")),
        "load_date": pa.array([ts.date() for ts in loads], pa.date32()),
    })
    write_deltalake(str(source), table, mode="append", partition_by=["load_date"])


def mark_processed(source, first: datetime, end: datetime, run_id: str = "run-1", app_ids: str | None = None) -> None:
    """What a successful hourly run over [first, end) leaves: the hours' ledger rows (with the
    fingerprints of the source as it is now, for `app_ids`) and PROCESSED manifest records."""
    settings = Settings.load()
    hours = [first + i * H for i in range((end - first) // H)]
    fingerprints = source_snapshot(str(source), first, end).fingerprints
    if DeltaTable.is_deltatable(settings.table_path(HOUR_LEDGER)):  # a run replaces its hours' rows
        DeltaTable(settings.table_path(HOUR_LEDGER)).delete(
            f"load_hour_tstamp >= '{first.isoformat()}' AND load_hour_tstamp < '{end.isoformat()}'")
    write_deltalake(settings.table_path(HOUR_LEDGER), pa.table({
        "load_hour_tstamp": pa.array(hours, pa.timestamp("us", "UTC")),
        "source_fingerprint": [fingerprints.get(h, "") for h in hours],
        "rules_digest": [settings.rules_digest()] * len(hours),
        "processed_at": pa.array([end] * len(hours), pa.timestamp("us", "UTC")),
        "run_id": [run_id] * len(hours),
        **({"app_ids": [app_ids] * len(hours)} if app_ids else {}),
    }), mode="append", schema_mode="merge")
    manifest = ManifestStore.of(settings)
    items = [item_id(model, key(h)) for model in HOURLY_ASSETS for h in hours]
    manifest.claim(items, application="test", run_id=run_id, run_finished=lambda lock: None)
    manifest.close(items, run_id=run_id, state=State.PROCESSED, application="test")


def fail(hour: datetime, run_id: str = "bad-run") -> str:
    manifest = ManifestStore.of(Settings.load())
    item = item_id("base_events", key(hour))
    manifest.claim([item], application="base_events", run_id=run_id, run_finished=lambda lock: None)
    manifest.close([item], run_id=run_id, state=State.FAILED, application="base_events", payload={"reason": "boom"})
    return item


def tick(instance, monkeypatch, now: datetime):
    monkeypatch.setattr(hourly_sensor, "utc_now", lambda: now)
    with build_sensor_context(instance=instance, definitions=defs, resources={"warehouse": warehouse}) as context:
        return hourly_sensor.hourly_load_sensor.evaluate_tick(context)


def hours_of(result) -> tuple[str, str]:
    (request,) = result.run_requests
    return request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]


def test_a_missing_source_is_a_clean_skip(env, monkeypatch):
    _, instance = env
    result = tick(instance, monkeypatch, at(5))
    assert not result.run_requests
    assert "no table at the source path" in result.skip_message and "INCREMENTAL_SOURCE_PATH" in result.skip_message


def test_new_hours_run_once_and_hours_whose_files_change_run_again_however_old(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.2), at(1.5), at(2.1), at(3.9), at(4.1))  # 04:00 is still open at 04:30

    first = tick(instance, monkeypatch, at(4.5))
    assert hours_of(first) == (key(at(0)), key(at(3)))
    request = first.run_requests[0]
    assert request.tags["incremental/run_state"] == "FIRST_RUN"
    assert "new data in 4 hour(s) from 2026-01-05-00:00" in request.tags["incremental/reason"]
    # The run applies a plan the sensor recorded: every hour due with why and its source rows.
    shown = launched_plan(instance, first)
    assert [(h.hour, h.reason, h.rows) for h in shown.hours] == [(at(h), "new", 1) for h in range(4)]
    assert shown.until == at(4.5) and [d.day for d in shown.days] == [DAY.date()]
    # ... and shows it on the `plans` asset, as the UI lists plans.
    (observed,) = [e for e in first.asset_events if e.asset_key.path == ["plans"]]
    assert observed.metadata["plan_id"].value == shown.plan_id and observed.metadata["load_hours"].value == 4
    # Nothing processed yet, nothing new: the same request again is dropped by its run key.
    assert tick(instance, monkeypatch, at(4.6)).run_requests[0].run_key == request.run_key

    mark_processed(source, at(0), at(4))
    idle = tick(instance, monkeypatch, at(4.7))
    assert not idle.run_requests and "no new data in a closed load hour" in idle.skip_message

    # 04:00 closes with data in it: launched alone, in a standard run.
    second = tick(instance, monkeypatch, at(5.1))
    assert hours_of(second) == (key(at(4)), key(at(4)))
    for event in second.asset_events:  # stored by the daemon
        instance.report_runless_asset_event(event)
    assert second.run_requests[0].tags["incremental/run_state"] == "STANDARD"
    mark_processed(source, at(4), at(5), run_id="run-2")
    assert not tick(instance, monkeypatch, at(5.2)).run_requests

    # A late file lands in 01:00, processed hours ago: that hour runs again, and only it.
    add_loads(source, at(1.7))
    rerun = tick(instance, monkeypatch, at(9.3))
    assert hours_of(rerun) == (key(at(1)), key(at(1)))
    assert "changed in 1 hour(s) from 2026-01-05-01:00" in rerun.run_requests[0].tags["incremental/reason"]
    shown = launched_plan(instance, rerun)
    assert [(h.hour, h.reason, h.rows) for h in shown.hours] == [(at(1), "changed", 2)]

    # The source's closed hours are reported as their loader's materializations once per
    # version of their files, the hour's fingerprint its data version: after the first
    # launches, only the hour whose files changed, with a new one.
    def versions(result) -> dict[str, str]:
        return {e.partition: e.tags["dagster/data_version"] for e in result.asset_events
                if e.asset_key.path == ["atomic_events"]}

    assert sorted(versions(first)) == [key(at(h)) for h in range(4)]
    assert list(versions(rerun)) == [key(at(1))]
    assert versions(rerun)[key(at(1))] != versions(first)[key(at(1))]
    # With the source's columns (from its Delta schema), for the columns_unchanged check.
    columns = first.asset_events[0].metadata["columns"].value
    assert columns["load_tstamp"].startswith("timestamp") and "event_id" in columns


def plans_version() -> int | None:
    path = Settings.load().table_path(PLANS)
    return DeltaTable(path).version() if DeltaTable.is_deltatable(path) else None


def test_a_preview_of_the_tick_writes_no_plan(env, monkeypatch):
    """The UI's "Test sensor" evaluates the tick as the daemon does: the plan it would apply is
    only shown (on the `plans` observation), never recorded by the evaluation."""
    source, instance = env
    add_loads(source, at(0.2), at(1.5))
    before = plans_version()

    preview = tick(instance, monkeypatch, at(2.5))
    assert hours_of(preview) == (key(at(0)), key(at(1)))
    assert plans_version() == before
    # A real tick: the daemon stores the observation, then the run records the plan at its start.
    shown = launched_plan(instance, preview)
    assert shown.plan_id == preview.run_requests[0].tags[APPLIED_PLAN_TAG]
    assert plans.record_observed_plan(Settings.load(), instance, shown.plan_id) is None  # recorded once


def launched_plan(instance, result) -> plans.Plan:
    """What follows a real tick: the daemon stores its observations, then the run it launched
    records the plan its tags name when it starts (as the hourly step does); the plan as recorded."""
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    plan_id = result.run_requests[0].tags[APPLIED_PLAN_TAG]
    plans.record_observed_plan(Settings.load(), instance, plan_id)
    return plans.recorded_plan(Settings.load(), plan_id)


def test_an_app_added_catches_up_after_the_hours_due_for_every_app(env, monkeypatch):
    source, instance = env
    monkeypatch.setenv("INCREMENTAL_APP_IDS", "web,mobile")
    add_loads(source, at(0.2), at(1.5))
    mark_processed(source, at(0), at(2), app_ids="web")  # processed before mobile was added
    add_loads(source, at(2.5))

    present = tick(instance, monkeypatch, at(3.1))
    assert hours_of(present) == (key(at(2)), key(at(2)))
    assert APP_IDS_TAG not in present.run_requests[0].tags
    shown = launched_plan(instance, present)
    assert [(h.hour, h.reason) for h in shown.hours] == [(at(0), "app(s) mobile added"),
                                                         (at(1), "app(s) mobile added"), (at(2), "new")]

    mark_processed(source, at(2), at(3), run_id="run-2", app_ids="mobile,web")
    catch_up = tick(instance, monkeypatch, at(3.2))
    assert hours_of(catch_up) == (key(at(0)), key(at(1)))
    tags = catch_up.run_requests[0].tags
    assert (tags[APP_IDS_TAG], tags[PRIORITY_TAG]) == ("mobile", "-1")
    assert tags["incremental/reason"] == "catching up: app(s) mobile added"

    mark_processed(source, at(0), at(2), run_id="run-3", app_ids="mobile,web")
    assert not tick(instance, monkeypatch, at(3.3)).run_requests


def test_hours_after_end_date_are_neither_run_nor_reconciled(env, monkeypatch):
    source, instance = env
    add_loads(source, at(20.5), at(22.5), at(25.5), at(27.5))  # two hours of 01-05, two of 01-06
    monkeypatch.setenv("INCREMENTAL_END_DATE", DAY.date().isoformat())
    result = tick(instance, monkeypatch, at(30))
    assert hours_of(result) == (key(at(20)), key(at(22)))
    # An hour after the end processed before the end was set stays as it is, changed or not.
    mark_processed(source, at(20), at(23))
    mark_processed(source, at(25), at(26), run_id="before-the-end")
    add_loads(source, at(25.7))
    idle = tick(instance, monkeypatch, at(30.1))
    assert not idle.run_requests and "no new data in a closed load hour" in idle.skip_message
    # Without an end, the day after runs (its processed hour too, since its files changed).
    monkeypatch.delenv("INCREMENTAL_END_DATE")
    assert hours_of(tick(instance, monkeypatch, at(30.2))) == (key(at(25)), key(at(27)))


def test_every_loaded_hour_is_reported_not_only_the_launched_ones(env, monkeypatch):
    # Two days of loads, one day a run: the request takes the first day; the catalog shows the
    # second day's loaded hours as materialized by their loader too, each with its fingerprint.
    source, instance = env
    monkeypatch.setenv("INCREMENTAL_BACKFILL_LIMIT_DAYS", "1")
    add_loads(source, at(1.5), at(10.5), at(30.5), at(40.5))
    result = tick(instance, monkeypatch, at(47))
    assert hours_of(result) == (key(at(1)), key(at(10)))
    observed = {e.partition for e in result.asset_events if e.asset_key.path == ["atomic_events"]}
    # (an hour holds data where a file's load_tstamp statistics span it: 01:00..10:00, 06:00..16:00)
    loaded = {key(hour) for hour in source_snapshot(str(source), at(0), at(47)).fingerprints}
    assert observed == loaded and {key(at(30)), key(at(40))} <= observed


def test_a_gap_left_by_hours_processed_by_hand_is_run(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.5), at(1.5), at(2.5), at(3.5))
    mark_processed(source, at(0), at(1))
    mark_processed(source, at(3), at(4), run_id="by-hand")  # e.g. a UI materialization of 03:00
    result = tick(instance, monkeypatch, at(4.5))
    assert hours_of(result) == (key(at(1)), key(at(2)))


def test_hours_processed_elsewhere_are_not_relaunched(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.5), at(1.5), at(2.5))
    mark_processed(source, at(0), at(3))  # e.g. `incremental-assets backfill` or a UI backfill
    result = tick(instance, monkeypatch, at(3.5))
    assert not result.run_requests, result.run_requests
    assert "no new data in a closed load hour" in result.skip_message


def test_a_fail_locked_hour_is_left_out_with_the_way_out_and_the_others_run(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.5), at(1.5), at(2.5))
    item = fail(at(1))
    result = tick(instance, monkeypatch, at(3.5))
    assert hours_of(result) == (key(at(0)), key(at(0)))  # the oldest range; 02:00 follows

    mark_processed(source, at(0), at(1))
    mark_processed(source, at(2), at(3), run_id="run-2")
    blocked = tick(instance, monkeypatch, at(3.6))
    assert not blocked.run_requests
    assert item in blocked.skip_message and "manifest resolve" in blocked.skip_message

    ManifestStore.of(Settings.load()).resolve([item], note="fixed")
    assert hours_of(tick(instance, monkeypatch, at(3.7))) == (key(at(1)), key(at(1)))


def test_an_hour_an_operator_skipped_is_never_run_and_strands_nothing(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.5), at(1.5), at(2.5))
    ManifestStore.of(Settings.load()).skip([item_id("base_events", key(at(1)))], note="bad file")
    first = tick(instance, monkeypatch, at(3.5))
    assert hours_of(first) == (key(at(0)), key(at(0)))
    mark_processed(source, at(0), at(1))
    assert hours_of(tick(instance, monkeypatch, at(3.6))) == (key(at(2)), key(at(2)))


def test_grace_delays_a_new_hour_and_abstinent_a_changed_one(env, monkeypatch):
    source, instance = env
    monkeypatch.setenv("INCREMENTAL_GRACE_PERIOD", "PT30M")
    monkeypatch.setenv("INCREMENTAL_ABSTINENT_PERIOD", "PT2H")
    add_loads(source, at(0.5))
    waiting = tick(instance, monkeypatch, at(1.2))
    assert not waiting.run_requests and "wait for the grace or abstinent period" in waiting.skip_message
    assert hours_of(tick(instance, monkeypatch, at(1.6))) == (key(at(0)), key(at(0)))
    mark_processed(source, at(0), at(1))  # processed at 01:00
    add_loads(source, at(0.7))
    assert not tick(instance, monkeypatch, at(2.5)).run_requests
    assert hours_of(tick(instance, monkeypatch, at(3.1))) == (key(at(0)), key(at(0)))


def launched(instance, request, status=DagsterRunStatus.STARTED):
    """The run the daemon starts for `request`, with its run key."""
    from dagster._core.test_utils import create_run_for_test

    return create_run_for_test(instance, job_name="hourly_job", status=status,
                               tags={**request.tags, "dagster/run_key": request.run_key})


def test_waits_while_an_hourly_run_is_in_progress_and_never_relaunches_a_successful_run_key(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.5))
    request = tick(instance, monkeypatch, at(1.5)).run_requests[0]
    run = launched(instance, request)
    waiting = tick(instance, monkeypatch, at(1.6))
    assert not waiting.run_requests and f"waiting for run {run.run_id}" in waiting.skip_message

    instance.delete_run(run.run_id)
    launched(instance, request, status=DagsterRunStatus.SUCCESS)  # and its hours are still due: not again
    again = tick(instance, monkeypatch, at(1.7))
    assert not again.run_requests and "already launched" in again.skip_message
    add_loads(source, at(0.7))  # new data: a new run key
    assert hours_of(tick(instance, monkeypatch, at(1.8))) == (key(at(0)), key(at(0)))


def test_a_run_that_failed_before_its_claim_is_launched_again_on_a_quiet_source(env, monkeypatch):
    """A run that fails before it claims anything (its worker died, Spark did not start) leaves
    the data and the manifest as they were, so the same run key comes back, and Dagster drops a
    request whose key a run already used: it is launched again under a new key, after a wait
    that doubles with each failure."""
    source, instance = env
    add_loads(source, at(0.5))
    first = tick(instance, monkeypatch, at(1.5)).run_requests[0]
    instance.report_run_failed(launched(instance, first))

    second = tick(instance, monkeypatch, at(1.6))
    assert second.run_requests, second.skip_message
    assert hours_of(second) == (key(at(0)), key(at(0))) and second.run_requests[0].run_key != first.run_key
    instance.report_run_failed(launched(instance, second.run_requests[0]))

    # Two failures: ten minutes (two sensor intervals) after the last launch.
    waiting = tick(instance, monkeypatch, at(1.6) + timedelta(minutes=9))
    assert not waiting.run_requests and "failed 2 time(s) before claiming anything" in waiting.skip_message
    third = tick(instance, monkeypatch, at(1.6) + timedelta(minutes=10))
    assert third.run_requests, third.skip_message
    assert len({first.run_key, second.run_requests[0].run_key, third.run_requests[0].run_key}) == 3


def test_hours_of_files_without_load_tstamp_statistics_come_from_the_load_date_partition():
    day = date(2026, 1, 5)
    start = datetime(2026, 1, 5, tzinfo=timezone.utc)
    assert file_hours(day, None, None, None, None, None) == (start, start + 23 * H)
    assert file_hours(day, at(1.2), at(2.7), 0, None, None) == (at(1), at(2))
    # Rows without load_tstamp are placed by collector_tstamp.
    assert file_hours(day, at(1.2), at(2.7), 3, at(0.9), at(2.8)) == (at(0), at(2))
    assert file_hours(None, None, None, None, None, None) == (None, None)
    # A file whose rows all lack both times holds no load hour (its rows are never read).
    assert holds_no_load_time(4, 4, 4) and not holds_no_load_time(4, 4, 3) and not holds_no_load_time(4, None, None)


# -- the real jobs, in this process, on a source that grows -----------------------------------

@pytest.fixture(scope="module")
def generated_events(spark):
    """~400 generated events of 2026-01-05 (late loads, duplicates, invalid rows included)."""
    from incremental_assets.sources.generator import generate_events_df

    return generate_events_df(spark, events=400, days=1, start=DAY.date(), seed=5).cache()


def append_loads(events, source, start: datetime, end: datetime) -> int:
    from pyspark.sql import functions as F

    from incremental_assets.sources.writer import write_source_table

    rows = events.where((F.col("load_tstamp") >= F.lit(start)) & (F.col("load_tstamp") < F.lit(end)))
    return write_source_table(rows.coalesce(1), source, mode="append")["rows"]


def execute(job_name: str, instance, request) -> object:
    """Run what the daemon would launch for `request`, in this process."""
    tags = {**request.tags, **({"dagster/run_key": request.run_key} if request.run_key else {})}
    result = defs.resolve_job_def(job_name).execute_in_process(instance=instance, tags=tags,
                                                               raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    evaluations = result.get_asset_check_evaluations()
    failed_checks = [(c.asset_key.path[-1], c.check_name, c.metadata) for c in evaluations if not c.passed]
    assert not failed_checks
    # A result about a whole asset this run wrote is linked to the run's materialization (the UI
    # shows it beside that materialization); an hour's event_id result to that hour's
    # materialization of the run; another hour's result (a whole-asset outcome given to each
    # hour of the run) to none.
    written = {r.asset_key for r in instance.get_records_for_run(
        result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records}
    for c in evaluations:
        target = c.target_materialization_data
        if c.partition is not None and c.check_name != "event_id_unique":
            assert target is None
        elif c.partition is not None:  # the index's materialization of the hour, as the UI compares
            [hour] = instance.fetch_materializations(
                AssetRecordsFilter(c.asset_key, asset_partitions=[c.partition]), limit=1).records
            assert (target.run_id, target.storage_id) == (result.run_id, hour.storage_id), (c.asset_key, c.partition)
        elif c.asset_key in written:  # (on SQLite a run's own event ids are not the index's: compare the index's)
            [latest] = instance.fetch_materializations(c.asset_key, limit=1).records
            assert (target.run_id, target.storage_id) == (result.run_id, latest.storage_id), (c.asset_key, c.check_name)
    # Every check the run planned has a result for each partition it planned (the UI shows one
    # left planned as skipped): none is still planned once the run is done.
    planned = {(key.asset_key.path[-1], key.name, record.partition)
               for key in defs.resolve_job_def(job_name).asset_layer.asset_graph.asset_check_keys
               for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=1000)
               if record.run_id == result.run_id and record.status is AssetCheckExecutionRecordStatus.PLANNED}
    assert not planned, sorted(planned, key=str)[:10]
    return instance.get_run_by_id(result.run_id)


def sensor_tick(sensor, instance, cursor=None):
    with build_sensor_context(instance=instance, cursor=cursor, resources={"warehouse": warehouse}) as context:
        return sensor.evaluate_tick(context)


@pytest.mark.spark
@pytest.mark.slow
def test_sensors_drive_the_jobs_hour_by_hour(env, monkeypatch, generated_events):
    from incremental_assets.planning.hours import contiguous_ranges
    from incremental_assets.state.day_ledger import rows_accounted_for, unaccounted

    source, instance = env
    monkeypatch.setenv("INCREMENTAL_ATTRIBUTES_AS_OF", "2026-01-06")
    assert append_loads(generated_events, str(source), at(0), at(6)) > 0
    # The run-status sensor starts from the latest run event: start it before any run.
    attributes_cursor = sensor_tick(late_days_sensors.attributes_sensor, instance).cursor

    first = tick(instance, monkeypatch, at(6.5))
    assert hours_of(first) == (key(at(0)), key(at(5)))
    for event in first.asset_events:  # stored by the daemon before it launches the run
        instance.report_runless_asset_event(event)
    execute("hourly_job", instance, first.run_requests[0])
    # The run recorded the plan the tick only showed, under the id its tags carry.
    applied = plans.recorded_plan(Settings.load(), first.run_requests[0].tags[APPLIED_PLAN_TAG])
    assert [h.hour for h in applied.hours] == [at(h) for h in range(6)]

    # The ledger now holds unaccounted rows: the days they fall on are planned and rebuilt.
    open_days = {day for day, _ in unaccounted(Settings.load())}
    late = sensor_tick(late_days_sensors.late_days_sensor, instance)
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in late.run_requests] == \
        [(a.isoformat(), b.isoformat()) for a, b in contiguous_ranges(open_days)]
    assert len({r.tags[PLAN_TAG] for r in late.run_requests}) == 1
    for request in late.run_requests:
        execute("daily_job", instance, request)
    assert not unaccounted(Settings.load())
    idle = sensor_tick(late_days_sensors.late_days_sensor, instance)
    assert not idle.run_requests and "every filtered row is aggregated or pending" in idle.skip_message

    follow = sensor_tick(late_days_sensors.attributes_sensor, instance, attributes_cursor)
    (attributes_request,) = follow.run_requests
    assert attributes_request.job_name == "attributes_job"
    execute("attributes_job", instance, attributes_request)  # runs the every-day invariant check too

    # Three more hours arrive: exactly those are launched, the sensor skips when nothing is new.
    assert not tick(instance, monkeypatch, at(6.6)).run_requests
    append_loads(generated_events, str(source), at(6), at(9))
    second = tick(instance, monkeypatch, at(9.2))
    assert hours_of(second) == (key(at(6)), key(at(8)))
    execute("hourly_job", instance, second.run_requests[0])
    assert not tick(instance, monkeypatch, at(9.3)).run_requests
    base = read_pandas(Settings.load().table_path("base_events"), ["event_id", "load_tstamp"])
    assert base.event_id.is_unique and base.load_tstamp.max() < at(9)

    # Until its late days are planned, the new loads are neither aggregated nor pending.
    assert rows_accounted_for(Settings.load(), at(9.3))["broken"]
    assert sensor_tick(late_days_sensors.late_days_sensor, instance).run_requests
    assert DeltaTable(str(source)).version() >= 1
