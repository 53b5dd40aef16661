"""A real Dagster: dagster-webserver and dagster-daemon on 127.0.0.1 with a temporary
DAGSTER_HOME. A partition backfill launched through the GraphQL API runs (max_hours_per_run
hours a run) and late_days_sensor follows it; new source data arrives meanwhile and
hourly_load_sensor, running in the daemon, launches a run for it once the backfill is done.
And `dagster asset materialize` of one load hour.

Runs are subprocesses that start their own Spark JVM (local[1], 1 GB), at most two at a time.
Every process started here is stopped at the end, whatever happens (runs still in flight
are stopped with them: the test's warehouse is thrown away).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from tests.delta_reads import read_pandas, read_table
from tests.live import HOURLY, launch_backfill, moved_in_time, settled, write_loads

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long, pytest.mark.clock]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPARK_CONF = "spark.master=local[1];spark.ui.enabled=false;spark.sql.shuffle.partitions=1;spark.driver.memory=1g"
# The daemon's sensor takes its clock from INCREMENTAL_SENSOR_CLOCK: NOW, by default a fixed
# noon, or the time TEST_CLOCK names (`make test-clocks` runs this module at 00:05 and 12:05).
# The test uses the ten closed load hours before NOW (T0 .. T0 + 9 h); partitions start on
# T0's day. Its events are one fixed generated sample whose hours SAMPLE_HOUR_0 .. + 9 h all
# hold valid loads, moved in time so that those hours become T0 .. T0 + 9 h.
NOW = datetime.fromisoformat(os.environ.get("TEST_CLOCK", "2026-01-07T12:05:00+00:00"))
T0 = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=10)
SAMPLE_START = date(2026, 1, 4)
SAMPLE_HOUR_0 = datetime(2026, 1, 6, tzinfo=timezone.utc)
# How long one phase may wait for the daemon (a backfill, a sensor's run, every run settling).
# A phase is several runs of a few minutes each on a machine three to four times slower than
# usual (2026-11-25): 420 s cut the last phase off while its final run was ending.
PHASE_SECONDS = 900


def hour(h: int) -> datetime:
    return T0 + timedelta(hours=h)


def hour_key(h: int) -> str:
    return hour(h).strftime("%Y-%m-%d-%H:%M")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def deployment(tmp_path):
    """Paths and the environment every process of the deployment gets."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    # At most two runs at a time: each run starts a JVM.
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nrun_queue:\n  max_concurrent_runs: 2\n")
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: incremental_assets.definitions\n"
        f"      attribute: defs\n      working_directory: {REPO}\n"
        f"      executable_path: {sys.executable}\n      location_name: incremental_assets\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INCREMENTAL_", "DAGSTER_"))}
    env.update({
        "DAGSTER_HOME": str(home),
        "INCREMENTAL_WAREHOUSE": str(tmp_path / "warehouse"),
        "INCREMENTAL_SOURCE_PATH": str(tmp_path / "source"),
        "INCREMENTAL_START_DATE": T0.date().isoformat(),
        "INCREMENTAL_SENSOR_INTERVAL_SECONDS": "30",
        "INCREMENTAL_SENSOR_CLOCK": NOW.isoformat(),
        "INCREMENTAL_LOOKBACK_WINDOW_HOURS": "0",  # the sensor's run: exactly the hours after the backfill
        "INCREMENTAL_MAX_HOURS_PER_RUN": "3",  # the six-hour backfill: two runs
        "INCREMENTAL_AUTOMATION_RUNNING": "true",  # the sensors start with the daemon, as in production
        "INCREMENTAL_SPARK_CONF": SPARK_CONF,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    })
    return {"home": home, "workspace": workspace, "env": env, "tmp": tmp_path,
            "warehouse": tmp_path / "warehouse", "source": tmp_path / "source"}


@pytest.fixture(scope="module")
def events(spark):
    from incremental_assets.sources.generator import generate_events_df

    sample = generate_events_df(spark, events=900, days=3, start=SAMPLE_START, seed=9)
    return moved_in_time(sample, T0 - SAMPLE_HOUR_0).cache()


class Processes:
    """Started processes, each in its own process group; stop() ends them all."""

    def __init__(self, logs: Path):
        self.logs, self.started = logs, []

    def start(self, name: str, args: list[str], env: dict) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "w")
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.started.append((name, proc, log))
        return proc

    def tail(self, lines: int = 40) -> str:
        out = []
        for name, _, _ in self.started:
            text = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
            out.append(f"--- {name}.log (last {lines} lines) ---\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        for _, proc, _ in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 15
        for _, proc, log in self.started:
            try:
                proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            log.close()


def wait_for(what: str, condition, processes: Processes, timeout: float = PHASE_SECONDS, every: float = 3):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{processes.tail()}")


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    response = requests.post(f"http://127.0.0.1:{port}/graphql", json={"query": query, "variables": variables or {}},
                             timeout=60, proxies={"http": None, "https": None})
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body
    return body["data"]


LOCATIONS = """{ workspaceOrError { __typename ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def location_loaded(port: int) -> bool:
    try:
        entries = graphql(port, LOCATIONS)["workspaceOrError"]["locationEntries"]
    except (requests.RequestException, KeyError):
        return False
    entry = next((e for e in entries if e["name"] == "incremental_assets"), None)
    if entry and entry["locationOrLoadError"] and entry["locationOrLoadError"]["__typename"] == "PythonError":
        pytest.fail(f"the code location failed to load: {entry['locationOrLoadError']['message']}")
    return bool(entry) and entry["loadStatus"] == "LOADED" and \
        entry["locationOrLoadError"]["__typename"] == "RepositoryLocation"


MATERIALIZATION = """query($key: AssetKeyInput!, $partitions: [String!]) { assetOrError(assetKey: $key) {
  ... on Asset { assetMaterializations(partitions: $partitions, limit: 1) { partition runId metadataEntries {
    label ... on IntMetadataEntry { intValue } ... on JsonMetadataEntry { jsonString }
    ... on TextMetadataEntry { text } ... on BoolMetadataEntry { boolValue } } } } } }"""
OBSERVATION = """query($key: AssetKeyInput!, $partitions: [String!]) { assetOrError(assetKey: $key) {
  ... on Asset { assetObservations(partitions: $partitions, limit: 1) { partition tags { key value }
    metadataEntries { label ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } } } } } }"""
CHECK_EXECUTIONS = """query($key: AssetKeyInput!, $check: String!, $partition: String) {
  assetCheckExecutions(assetKey: $key, checkName: $check, partition: $partition, limit: 5) {
    runId status partition evaluation { partition success metadataEntries {
      label ... on IntMetadataEntry { intValue } } } } }"""


def _entry_value(entry: dict):
    if "jsonString" in entry:
        return json.loads(entry["jsonString"])
    return next((entry[k] for k in ("intValue", "text", "boolValue") if k in entry), None)


def ui_metadata(port: int, asset: str, partition: str | None = None) -> dict:
    """The metadata the UI shows for the asset's (partition's) latest materialization."""
    data = graphql(port, MATERIALIZATION, {"key": {"path": [asset]},
                                           "partitions": [partition] if partition else None})
    (event,) = data["assetOrError"]["assetMaterializations"]
    assert event["partition"] == partition
    return {e["label"]: _entry_value(e) for e in event["metadataEntries"]}


def ui_observation(port: int, asset: str, partition: str | None = None) -> tuple[dict, dict]:
    """The tags and metadata of the asset's (partition's) latest observation, as the UI shows them."""
    data = graphql(port, OBSERVATION, {"key": {"path": [asset]}, "partitions": [partition] if partition else None})
    (event,) = data["assetOrError"]["assetObservations"]
    return ({t["key"]: t["value"] for t in event["tags"]},
            {e["label"]: _entry_value(e) for e in event["metadataEntries"]})


def ui_check_executions(port: int, asset: str, check: str, partition: str) -> list[dict]:
    return graphql(port, CHECK_EXECUTIONS, {"key": {"path": [asset]}, "check": check,
                                            "partition": partition})["assetCheckExecutions"]


def step_failures(instance, run_id: str) -> list[str]:
    """Each failed step's own error, in one line."""
    from dagster import DagsterEventType

    from incremental_assets.runner import step_failure_lines

    return step_failure_lines(e.dagster_event for e in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE))


def runs_of(instance, job_name: str, status=None, tags=None):
    from dagster import RunsFilter

    return instance.get_runs(filters=RunsFilter(job_name=job_name, statuses=[status] if status else None,
                                                tags=tags or {}))


def test_a_graphql_backfill_then_the_sensors_in_the_daemon(deployment, events, monkeypatch):
    from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster._core.execution.backfill import BulkActionStatus

    source, warehouse, env = deployment["source"], deployment["warehouse"], deployment["env"]
    assert write_loads(events, source, hour(0), hour(6)) > 0
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    for name in ("INCREMENTAL_WAREHOUSE", "INCREMENTAL_START_DATE", "NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, env[name])
    port = free_port()
    processes = Processes(deployment["tmp"])
    try:
        processes.start("webserver", [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port),
                                      "-w", str(deployment["workspace"])], env)
        wait_for("the webserver and the code location", lambda: location_loaded(port), processes, timeout=240)
        # Requested before the daemon starts: hourly_load_sensor's first tick waits for it.
        backfill_id = launch_backfill(port, hour_key(0), hour_key(5))
        processes.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(deployment["workspace"])], env)
        # New loads arrive while the backfill runs; hourly_load_sensor waits for the backfill.
        assert write_loads(events, source, hour(6), hour(9)) > 0
        instance = DagsterInstance.get()

        def backfill_done():
            status = instance.get_backfill(backfill_id).status
            return status if status not in (BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING) else None

        assert wait_for("the backfill", backfill_done, processes) in (BulkActionStatus.COMPLETED,
                                                                       BulkActionStatus.COMPLETED_SUCCESS)
        # A UI backfill runs max_hours_per_run hours a run (the backfill policy), as the sensor does.
        backfill_runs = instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
        assert sorted((r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
                      for r in backfill_runs) == [(hour_key(0), hour_key(2)), (hour_key(3), hour_key(5))]
        assert instance.get_materialized_partitions(AssetKey("filtered_events")) >= {hour_key(h) for h in range(6)}
        record = instance.fetch_materializations(AssetKey("base_events"), limit=1).records[0]
        assert {"table_version", "run_limits", "settings"} <= set(record.asset_materialization.metadata)
        base = read_pandas(warehouse / "base_events", ["event_id", "load_tstamp"])
        # Every backfilled hour holds valid loads (the sample was chosen so): the first is in base_events.
        assert base.event_id.is_unique and base.load_tstamp.min() < hour(1)
        assert read_table(warehouse / "filtered_events").num_rows > 0

        # What the UI shows for one hour of a ranged backfill run is that hour's, equal to the
        # tables (later runs only add hours after the backfill's): rows, rejected rows by
        # reason, filtered rows by event day, the event_id check's own result for the hour.
        for h in (0, 3):
            key, start, end = hour_key(h), hour(h), hour(h + 1)
            shown = ui_metadata(port, "base_events", key)
            in_hour = base[(base.load_tstamp >= start) & (base.load_tstamp < end)]
            assert shown["dagster/partition_row_count"] == len(in_hour) > 0
            first_of_run = hour(h - h % 3)  # the backfill ran hours 0-2 and 3-5
            in_run = base[(base.load_tstamp >= first_of_run) & (base.load_tstamp < first_of_run + timedelta(hours=3))]
            # The run's total is observed once, on its last hour, not beside each hour's own figures.
            assert "rows_written" not in shown
            last_of_run = hour_key(h - h % 3 + 2)
            (total,) = [r.asset_observation.metadata["rows_written"].value for r in
                        instance.fetch_observations(AssetKey("base_events"), limit=100).records
                        if r.asset_observation.partition == last_of_run
                        and "rows_written" in r.asset_observation.metadata]
            assert total == len(in_run)
            rejected = read_pandas(warehouse / "rejected_events", ["load_hour_tstamp", "reject_reason"])
            rejected = rejected[rejected.load_hour_tstamp == start].reject_reason.value_counts().to_dict()
            assert shown["rejected_by_reason"] == rejected and shown["rejected_rows"] == sum(rejected.values())
            filtered = read_pandas(warehouse / "filtered_events", ["load_tstamp", "event_date"])
            filtered = filtered[(filtered.load_tstamp >= start) & (filtered.load_tstamp < end)]
            by_day = {str(d): n for d, n in filtered.event_date.value_counts().items()}
            shown = ui_metadata(port, "filtered_events", key)
            assert shown["rows_by_event_day"] == by_day
            assert shown["dagster/partition_row_count"] == len(filtered)
            (execution,) = ui_check_executions(port, "base_events", "event_id_unique", key)
            assert execution["status"] == "SUCCEEDED" and execution["evaluation"]["partition"] == key
            checked = {e["label"]: e.get("intValue") for e in execution["evaluation"]["metadataEntries"]}
            assert checked["rows_checked"] == len(in_hour) and checked["duplicate_event_ids"] == 0

        # Meanwhile late_days_sensor planned the backfill's event days ...
        # (from the daily ledger: every event day with rows neither aggregated nor pending).
        daily_runs = wait_for("the daily run planned after the backfill", lambda: runs_of(
            instance, "daily_job", None, {"dagster/sensor_name": "late_days_sensor"}), processes)
        assert min(r.tags["dagster/asset_partition_range_start"] for r in daily_runs) <= hour(0).strftime("%Y-%m-%d")
        assert all(r.tags.get("incremental/late_days_plan") for r in daily_runs)
        # ... and, once the backfill was done, hourly_load_sensor launched one ranged run for the
        # new hours (lookback 0: exactly the hours after the backfill, up to the last closed one).
        (run,) = wait_for("hourly_load_sensor's run", lambda: runs_of(
            instance, "hourly_job", None, {"dagster/sensor_name": "hourly_load_sensor"}), processes)
        assert run.tags["dagster/asset_partition_range_start"] == hour_key(6)
        assert run.tags["dagster/asset_partition_range_end"] >= hour_key(8)
        assert run.tags["incremental/run_state"] == "STANDARD"
        assert "new data" in run.tags["incremental/reason"]

        # The source's hours that hold data are materialized partitions (by their loader, as the
        # sensor reports them), each with its rows and its fingerprint (lineage starts at the events).
        from incremental_assets.sources.load_hours import rows_by_hour, source_snapshot

        snapshot = source_snapshot(str(source), hour(6), hour(9))
        shown = ui_metadata(port, "atomic_events", hour_key(6))
        assert shown["fingerprint"] == snapshot.fingerprints[hour(6)]
        assert shown["dagster/partition_row_count"] == rows_by_hour(str(source), snapshot.version, [hour(6)])[hour(6)]

        # Once every run is done: each day's numbers and the tables' totals equal the tables.
        wait_for("every run to finish, and no new one for a sensor interval", lambda: settled(instance), processes,
                 every=1)
        failed = {run.run_id: (run.job_name, run.tags.get("dagster/schedule_name", run.tags.get("dagster/sensor_name")),
                               step_failures(instance, run.run_id))
                  for run in instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.FAILURE]))}
        assert not failed, failed
        daily = read_pandas(warehouse / "daily_aggregates", ["event_date", "domain_userid"])
        ledger = read_pandas(warehouse / "daily_aggregation_manifest", ["event_date", "rows_aggregated"])
        day = min(daily.event_date)
        shown = ui_metadata(port, "daily_aggregates", day.isoformat())
        assert shown["dagster/partition_row_count"] == (daily.event_date == day).sum() > 0
        assert shown["rows_aggregated"] == ledger[ledger.event_date == day].rows_aggregated.sum()
        assert shown["rebuilt_because"]
        for asset in ("base_events", "daily_aggregates"):
            latest = instance.fetch_materializations(AssetKey(asset), limit=1).records[0].asset_materialization
            assert latest.metadata["dagster/row_count"].value == read_table(warehouse / asset).num_rows
        # The state tables are in the catalog, observed by the steps that wrote them.
        _, rejected = ui_observation(port, "rejected_events")
        assert rejected["dagster/row_count"] == read_table(warehouse / "rejected_events").num_rows
        _, manifest = ui_observation(port, "processing_manifest")
        assert manifest["locked_items"] == 0 and manifest["fail_locked_items"] == 0, manifest
    finally:
        processes.stop()
    assert all(proc.poll() is not None for _, proc, _ in processes.started)


def test_dagster_asset_materialize_runs_one_hour(deployment, events):
    # Dagster's own command line takes one partition of the hourly assets; a range is for the UI's
    # backfills or `incremental-assets backfill`, which cut it into runs of max_hours_per_run hours.
    env = deployment["env"]
    write_loads(events, deployment["source"], hour(0), hour(3))
    command = [str(BIN / "dagster"), "asset", "materialize", "-m", "incremental_assets.definitions",
               "--select", ",".join(HOURLY), "--partition", hour_key(1)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "RUN_SUCCESS" in done.stdout + done.stderr

    from dagster import AssetKey, DagsterInstance

    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    (run,) = instance.get_runs()
    assert run.tags["dagster/partition"] == hour_key(1)
    assert instance.get_materialized_partitions(AssetKey("base_events")) == {hour_key(1)}
    instance.dispose()
