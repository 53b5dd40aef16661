"""attributes and daily_aggregates runs that meet a missing input or a busy attributes item.

- Before any event day is aggregated, `attributes_schedule` skips: a run then can only fail,
  and a failure that had claimed `attributes/all` would fail-lock every later attributes run
  until an operator resolved it. A run by hand fails with an error that names the missing
  table, and claims nothing. The same for daily_aggregates before any load hour.
- A second attributes run (the schedule's beside the sensor's) waits for the run that holds
  `attributes/all` instead of failing, then succeeds.
"""

import os
import socket
import threading
import time
from datetime import date, datetime, timezone

import pyarrow as pa
import pytest
from dagster import DagsterEventType, DagsterRun, DagsterRunStatus, build_schedule_context, instance_for_test
from deltalake import DeltaTable, write_deltalake

from incremental_assets.assets import daily as daily_assets
from incremental_assets.automation.late_days_sensors import attributes_schedule
from incremental_assets.definitions import defs, warehouse
from incremental_assets.names import ATTRIBUTE_STATES, ATTRIBUTES, DAILY_AGGREGATES, USERS_TO_REFRESH
from incremental_assets.planning.processing_manifest import ItemStatus, State
from incremental_assets.runner import run_until, step_failure_lines
from incremental_assets.settings import Settings
from incremental_assets.sources.generator import generate_events_df
from incremental_assets.sources.writer import write_source_table
from resources.manifest import ManifestStore
from resources.manifest_items import item_id
from tests.delta_reads import read_pandas, read_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = date(2026, 1, 5)
ATTRIBUTES_ITEM = item_id(ATTRIBUTES, None)


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "source"))
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", DAY.isoformat())
    monkeypatch.setenv("INCREMENTAL_ATTRIBUTES_AS_OF", "2026-01-06")
    with instance_for_test() as instance:
        yield instance


def schedule_tick(instance, day: date):
    midnight = datetime(day.year, day.month, day.day, 0, 5, tzinfo=timezone.utc)
    with build_schedule_context(instance=instance, scheduled_execution_time=midnight,
                                resources={"warehouse": warehouse}) as context:
        return attributes_schedule.evaluate_tick(context)


def execute(job_name: str, instance, tags: dict | None = None):
    return defs.resolve_job_def(job_name).execute_in_process(instance=instance, tags=tags or {}, raise_on_error=False)


def manifest_items() -> dict:
    return ManifestStore.of(Settings.load()).states()


def test_before_any_data_the_schedule_skips_and_runs_claim_nothing(instance):
    tick = schedule_tick(instance, date(2026, 1, 6))
    assert not tick.run_requests and "daily_aggregates does not exist" in tick.skip_message

    result = execute("attributes_job", instance)
    assert not result.success
    (message,) = step_failure_lines(result.all_events)
    assert "input table 'daily_aggregates' does not exist yet" in message and "daily_job" in message
    result = execute("daily_job", instance, {"dagster/partition": DAY.isoformat()})
    assert not result.success
    (message,) = step_failure_lines(result.all_events)
    assert "input table 'filtered_events' does not exist yet" in message and "hourly_job" in message
    # Nothing was claimed, so nothing is fail-locked: the first real runs go through.
    assert manifest_items() == {}


def test_the_schedule_requests_one_run_per_day_once_a_day_is_aggregated(instance):
    write_deltalake(Settings.load().table_path(DAILY_AGGREGATES),
                    pa.table({"event_date": [DAY], "domain_userid": ["u1"]}))
    first, second = schedule_tick(instance, date(2026, 1, 6)), schedule_tick(instance, date(2026, 1, 7))
    (request,) = first.run_requests
    assert request.run_key == "attributes as of 2026-01-06"
    assert [r.run_key for r in second.run_requests] == ["attributes as of 2026-01-07"]


def test_a_second_attributes_run_waits_for_the_run_that_holds_the_item(instance, monkeypatch, spark):
    events = generate_events_df(spark, events=300, days=1, start=DAY, seed=11)
    write_source_table(events, os.environ["INCREMENTAL_SOURCE_PATH"], mode="overwrite")
    assert run_until(datetime(2026, 1, 6, 6, tzinfo=timezone.utc), instance=instance, echo=print).success

    # Another attributes run, still going, holds the item (its process is this one: alive).
    holder = "holder-run"
    instance.add_run(DagsterRun(job_name="attributes_job", run_id=holder, status=DagsterRunStatus.STARTED))
    manifest = ManifestStore.of(Settings.load())
    manifest.claim([ATTRIBUTES_ITEM], application=ATTRIBUTES, run_id=holder, run_finished=lambda lock: None,
                   payload={"host": socket.gethostname(), "pid": os.getpid()})
    monkeypatch.setattr(daily_assets, "LOCK_WAIT_SECONDS", 1)

    before = {r.run_id for r in instance.get_runs()}
    refused = threading.Event()

    def finish_the_holder_once_refused():
        deadline = time.time() + 300
        while time.time() < deadline:
            waiting = [r.run_id for r in instance.get_runs() if r.run_id not in before]
            if waiting and instance.all_logs(waiting[0], of_type=DagsterEventType.STEP_UP_FOR_RETRY):
                refused.set()
                manifest.close([ATTRIBUTES_ITEM], run_id=holder, state=State.PROCESSED, application=ATTRIBUTES)
                return
            time.sleep(0.1)

    finisher = threading.Thread(target=finish_the_holder_once_refused, daemon=True)
    finisher.start()
    result = execute("attributes_job", instance)
    finisher.join(timeout=10)
    assert refused.is_set(), "the second run never asked to try again"
    assert result.success, step_failure_lines(result.all_events)
    state = manifest.states([ATTRIBUTES_ITEM])[ATTRIBUTES_ITEM]
    assert state.status is ItemStatus.READY
    assert (state.last.state, state.last.run_id) == (State.PROCESSED, result.run_id)


def test_attributes_leave_the_users_queued_by_a_daily_run_still_in_progress(instance, spark):
    # A daily run queues its users before it commits daily_aggregates; an
    # attributes run meanwhile would compute them from the old daily rows and consume the queue
    # rows, and the users would keep stale attributes. Rows of a finished run are consumed.

    events = generate_events_df(spark, events=200, days=1, start=DAY, seed=12)
    write_source_table(events, os.environ["INCREMENTAL_SOURCE_PATH"], mode="overwrite")
    assert run_until(datetime(2026, 1, 6, 6, tzinfo=timezone.utc), instance=instance, echo=print).success
    # A daily run in progress holds its day (its process, this one, is alive); another is done.
    instance.add_run(DagsterRun(job_name="daily_job", run_id="daily-in-progress", status=DagsterRunStatus.STARTED))
    instance.add_run(DagsterRun(job_name="daily_job", run_id="daily-done", status=DagsterRunStatus.SUCCESS))
    ManifestStore.of(Settings.load()).claim(
        [item_id(DAILY_AGGREGATES, DAY.isoformat())], application=DAILY_AGGREGATES, run_id="daily-in-progress",
        run_finished=lambda lock: None, payload={"host": socket.gethostname(), "pid": os.getpid()})
    queue_path = Settings.load().table_path(USERS_TO_REFRESH)
    now = datetime(2026, 1, 6, 6, tzinfo=timezone.utc)
    write_deltalake(queue_path, pa.table({
        "domain_userid": ["u-waiting", "u-done"], "append_id": ["daily-in-progress", "daily-done"],
        "queued_at": pa.array([now, now], pa.timestamp("us", "UTC"))}), mode="append")

    result = execute("attributes_job", instance)
    assert result.success, step_failure_lines(result.all_events)
    assert read_pandas(queue_path, ["append_id"]).append_id.tolist() == ["daily-in-progress"]


def _rows_by_user(path) -> dict[str, list[str]]:
    """Each user's rows of a table, as comparable text."""
    rows: dict[str, list[str]] = {}
    for record in read_pandas(path).to_dict("records"):
        rows.setdefault(record["domain_userid"], []).append(repr(sorted(record.items())))
    return {user: sorted(texts) for user, texts in rows.items()}


def _changed_users(before: dict, after: dict) -> set[str]:
    return {user for user in before.keys() | after.keys() if before.get(user) != after.get(user)}


def _queued_after(path, version: int) -> set[str]:
    """The users daily runs appended to the queue after `version` (attributes delete them again)."""
    users = set()
    for commit in DeltaTable(str(path)).history():
        if commit["version"] > version and commit["operation"] == "WRITE":
            now = read_table(path, version=commit["version"]).to_pandas()
            earlier = set(read_table(path, version=commit["version"] - 1, columns=["append_id"]).column(0).to_pylist())
            users |= set(now[~now.append_id.isin(earlier)].domain_userid)
    return users


# Seven runs (80 s): in `make test-long`; `make test` checks the rule itself
# (tests/unit/transforms/test_daily_and_attributes.py) and, through the differential suite, that the
# attributes it leaves alone equal the recompute.
@pytest.mark.long
def test_a_daily_rebuild_queues_only_the_users_whose_rows_it_changes(instance, spark, tmp_path, monkeypatch):
    # A new load hour rebuilds its whole event day; the users queued for attributes are those
    # whose daily row or declared attribute states came out different (not every user of the
    # day), and a rebuild that changes nothing queues nobody.
    declaration = tmp_path / "attributes.yml"
    declaration.write_text("attributes:\n- name: pages\n  aggregation: distinct_count\n  property: page_url\n"
                           "  events: [page_view]\n")
    monkeypatch.setenv("INCREMENTAL_ATTRIBUTES_FILE", str(declaration))
    write_source_table(generate_events_df(spark, events=400, days=1, start=DAY, seed=5),
                       os.environ["INCREMENTAL_SOURCE_PATH"], mode="overwrite")
    settings = Settings.load()
    daily_path, states_path, queue_path = (settings.table_path(t) for t in (DAILY_AGGREGATES, ATTRIBUTE_STATES,
                                                                             USERS_TO_REFRESH))
    assert run_until(datetime(2026, 1, 5, 12, tzinfo=timezone.utc), instance=instance, echo=print).success
    daily_before, states_before = _rows_by_user(daily_path), _rows_by_user(states_path)
    version = DeltaTable(str(queue_path)).version()

    assert run_until(datetime(2026, 1, 5, 13, tzinfo=timezone.utc), instance=instance, echo=print).success
    daily_after, states_after = _rows_by_user(daily_path), _rows_by_user(states_path)
    changed = _changed_users(daily_before, daily_after) | _changed_users(states_before, states_after)
    assert 0 < len(changed) < len(daily_after), (len(changed), len(daily_after))
    assert _queued_after(queue_path, version) == changed

    version = DeltaTable(str(queue_path)).version()
    result = execute("daily_job", instance, {"dagster/partition": DAY.isoformat()})
    assert result.success, step_failure_lines(result.all_events)
    assert _queued_after(queue_path, version) == set()
