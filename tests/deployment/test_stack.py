"""The production-like stack end to end (`deploy/stack.py`, what `make stack-up` starts):
PostgreSQL as Dagster's storage, a Spark standalone master with two workers, a Spark Connect
server in front of them (the runs are its sessions, with no JVM of their own),
dagster-webserver and dagster-daemon with deploy/dagster.yaml, all on free loopback ports.
(tests/deployment/test_object_store.py runs the other way: each run a driver on the master.)

The daemon's sensors process the source's closed load hours through the cluster and record
everything in PostgreSQL. Three overlapping runs started at once (two through the queue, one
executed by the CLI in its own process) are serialised by the pool. A run whose process is
killed is retried by the daemon, and the retry releases its locks; a run killed with its code
server is marked failed by run monitoring, and the next run releases its locks. In the end
the tables equal a local-mode run over the same source. Every process started is stopped at
the end, whatever happens; nothing listens beyond 127.0.0.1.
"""

import json
import os
import re
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster_graphql import DagsterGraphQLClient

from deploy.stack import HOST, REPO, Stack
from incremental_assets.planning.processing_manifest import ItemStatus, State
from resources.manifest import ManifestStore
from tests.deployment.daemon_runs import NOW, T0, hour, sample_events, stack_directory, succeeded, wait_until
from tests.live import assert_tables_equal_a_local_run, settled, write_loads

pytestmark = [pytest.mark.spark, pytest.mark.slow]



@pytest.fixture(scope="module")
def events(spark):
    return sample_events(spark, seed=9)


def listening_addresses(stack: Stack) -> dict[str, set[str]]:
    """Every address a process of the stack listens on (its process groups, and the PostgreSQL
    server, which pg_ctl detaches)."""
    groups = set(stack.pids.values())
    pids = {int(pid) for pid, pgid in (line.split() for line in subprocess.run(
        ["ps", "-eo", "pid=,pgid="], capture_output=True, text=True).stdout.splitlines()) if int(pgid) in groups}
    postmaster = stack.directory / "postgres" / "postmaster.pid"
    if postmaster.exists():
        pids.add(int(postmaster.read_text().split()[0]))
    found: dict[str, set[str]] = {}
    for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines():
        local = line.split()[3]
        address = re.sub(r"^\[(::ffff:)?|\]$", "", local.rsplit(":", 1)[0])
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.setdefault(address, set()).add(local)
    return found


def key(h: int) -> str:
    return hour(h).strftime("%Y-%m-%d-%H:%M")


FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def launch_hours(client: DagsterGraphQLClient, first: int, last: int) -> str:
    """A run of hourly_job over hours first..last, as the UI launches one; its run id."""
    return client.submit_job_execution("hourly_job", repository_location_name="incremental_assets",
                                       repository_name="__repository__", tags={
                                           "dagster/asset_partition_range_start": key(first),
                                           "dagster/asset_partition_range_end": key(last)})


def finished(instance, run_ids: list[str]):
    """The runs, once every one of them has finished; else None."""
    runs = [instance.get_run_by_id(run_id) for run_id in run_ids]
    return runs if all(run is not None and run.status in FINISHED for run in runs) else None


def step_span(instance, run_id: str, step_key: str) -> tuple[float, float]:
    """When the step started and when it finished, in the run's event log."""
    times = {e.dagster_event.event_type_value: e.timestamp for e in instance.all_logs(run_id)
             if e.dagster_event and e.step_key == step_key}
    return times["STEP_START"], times.get("STEP_SUCCESS", times.get("STEP_FAILURE"))


def materialize_in_process(stack: Stack, first: int, last: int) -> subprocess.Popen:
    """`dagster job execute` of hourly_job over hours first..last (a partition range, as its run
    tags say): a run executed in the CLI's own process, on the stack's instance and cluster."""
    tags = {"dagster/asset_partition_range_start": key(first), "dagster/asset_partition_range_end": key(last)}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m", "incremental_assets.definitions",
         "-a", "defs", "-j", "hourly_job", "--tags", json.dumps(tags)],
        env=stack.dagster_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def retries(instance, run_id: str) -> list:
    """The runs re-executing run_id (its retries, and theirs), oldest first."""
    return list(reversed(instance.get_runs(filters=RunsFilter(tags={"dagster/root_run_id": run_id}))))


def retried(instance, run_id: str, printed: set[str]):
    """The retry of run_id that succeeded, once one has; a failed retry's messages are printed
    (once: `printed` holds the ids already shown)."""
    for run in retries(instance, run_id):
        if run.status == DagsterRunStatus.SUCCESS:
            return run
        if run.status == DagsterRunStatus.FAILURE and run.run_id not in printed:
            printed.add(run.run_id)
            print(f"retry {run.run_id} failed:", failure_messages(instance, run.run_id))
    return None


def assert_released_by(warehouse: Path, dead_run_id: str, run_ids: set[str]) -> None:
    """No manifest item is locked, and the dead run's locks were released by one of run_ids."""
    manifest = ManifestStore(str(warehouse / "processing_manifest"))
    assert not [item for item, state in manifest.states().items() if state.status is ItemStatus.LOCKED]
    released = [r for r in manifest.records() if r.state is State.FAILED
                and (r.payload or {}).get("abandoned_run_id") == dead_run_id]
    assert released and {r.run_id for r in released} <= run_ids, (released, run_ids)


def failure_messages(instance, run_id: str) -> list[str]:
    return [e.message for e in instance.all_logs(run_id) if e.dagster_event and e.dagster_event.event_type_value in
            ("RUN_FAILURE", "PIPELINE_FAILURE", "STEP_FAILURE", "ENGINE_EVENT")][-4:]


def claiming_pid(warehouse: Path, run_id: str) -> int | None:
    """The process that holds the run's manifest items (its hourly step claimed them), once it does."""
    if not (warehouse / "processing_manifest").exists():
        return None
    for state in ManifestStore(str(warehouse / "processing_manifest")).states().values():
        lock = state.open_lock
        if lock is not None and lock.run_id == run_id:
            return int(lock.payload["pid"])
    return None


def test_the_daemon_runs_the_hours_on_the_cluster_with_postgres_and_matches_local_mode(
        spark, events, tmp_path, monkeypatch, request):
    source, cluster_warehouse = tmp_path / "source", tmp_path / "cluster_warehouse"
    assert write_loads(events, source, hour(0), hour(6)) > 0
    # Attributes count the days before their as-of day: the day after the data.
    env = {"INCREMENTAL_WAREHOUSE": str(cluster_warehouse), "INCREMENTAL_SOURCE_PATH": str(source),
           "INCREMENTAL_START_DATE": T0.date().isoformat(), "INCREMENTAL_SENSOR_CLOCK": NOW.isoformat(),
           "INCREMENTAL_SENSOR_INTERVAL_SECONDS": "30",
           "INCREMENTAL_ATTRIBUTES_AS_OF": (NOW.date() + timedelta(days=1)).isoformat()}
    stack = Stack.up(stack_directory(request), env)
    try:
        monkeypatch.setenv("DAGSTER_PG_URL", stack.pg_url)
        instance = DagsterInstance.from_config(str(stack.dagster_home))
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        (hourly,) = wait_until("hourly_load_sensor's run to succeed", lambda: succeeded(instance, "hourly_job"), stack)
        assert hourly.tags["dagster/sensor_name"] == "hourly_load_sensor"
        assert hourly.tags["dagster/asset_partition_range_start"] == hour(0).strftime("%Y-%m-%d-%H:%M")
        wait_until("attributes_job after the late days' daily runs", lambda: succeeded(instance, "attributes_job"),
                   stack)
        wait_until("every run to finish", lambda: settled(instance), stack)
        assert not instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
        assert succeeded(instance, "daily_job")
        # The runs computed on the cluster through the Connect server: the master lists only
        # the server's application, still running, and no run started a driver of its own.
        master = requests.get(f"http://{HOST}:{stack.spark_ui_port}/json/", timeout=30,
                              proxies={"http": None}).json()
        assert master["aliveworkers"] == 2
        assert [app["name"] for app in master["activeapps"]] == ["incremental-assets-connect"]
        assert master["completedapps"] == []
        addresses = listening_addresses(stack)
        assert set(addresses) == {HOST}, addresses

        # Three overlapping runs at once: two launched as the UI's "Materialize" does (through
        # GraphQL, so through the queue) and one executed in its own process by Dagster's CLI
        # (`dagster job execute`, which never passes through the queue). The pool
        # (hourly_sessions, limit 1, op granularity) runs their hourly steps one after the
        # other, and all succeed (without it, a run would find the shared hours locked and fail).
        client = DagsterGraphQLClient(HOST, port_number=stack.webserver_port)
        run_ids = [launch_hours(client, 0, 3), launch_hours(client, 2, 5)]
        cli = materialize_in_process(stack, 1, 4)
        runs = wait_until("the three runs to finish", lambda: cli.poll() is not None and finished(instance, run_ids),
                          stack)
        out, _ = cli.communicate()
        assert cli.returncode == 0, out
        (cli_run,) = [r for r in instance.get_runs(filters=RunsFilter(tags={
            "dagster/asset_partition_range_start": key(1)})) if r.run_id not in run_ids]
        runs.append(cli_run)
        assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS] * 3, [r.run_id for r in runs]
        records = instance.get_run_records(RunsFilter(run_ids=[r.run_id for r in runs]))
        assert max(r.start_time for r in records) < min(r.end_time for r in records)  # together
        spans = sorted(step_span(instance, r.run_id, "hourly_assets") for r in runs)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans  # their hourly steps: one at a time

        # A run whose process is killed (the kernel's OOM killer, a `kill -9`): its code server
        # marks it failed, and the daemon retries it (run_retries: a dead worker is not a failed
        # step) from the step that did not finish; the retry's claim releases its locks.
        killed_id, printed = launch_hours(client, 0, 1), set()
        os.kill(wait_until("the run to hold its manifest items",
                           lambda: claiming_pid(cluster_warehouse, killed_id), stack), signal.SIGKILL)
        retry = wait_until("the daemon's retry of the killed run to succeed",
                           lambda: retried(instance, killed_id, printed), stack)
        assert instance.get_run_by_id(killed_id).status == DagsterRunStatus.FAILURE
        assert int(retry.tags["dagster/retry_number"]) >= 1
        assert_released_by(cluster_warehouse, killed_id, {r.run_id for r in retries(instance, killed_id)})

        # A run whose process dies with the code server that started it (as when their host
        # goes down): nothing is left to report the run, so run monitoring must find its worker
        # gone and mark it failed (resources/run_launcher.py). The daemon cannot retry it until
        # it has restarted the code server it lost (Dagster gives the retry up if it tries
        # before), so the next run is launched by hand until one runs; the daemon's retry, if
        # it made one, counts too. That run releases the dead run's locks.
        killed_id = launch_hours(client, 0, 1)
        pid = wait_until("the run to hold its manifest items", lambda: claiming_pid(cluster_warehouse, killed_id),
                         stack)
        code_server = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(code_server, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
        wait_until("run monitoring to mark the killed run failed", lambda: instance.get_run_by_id(
            killed_id).status == DagsterRunStatus.FAILURE, stack)
        assert any("Detected run worker status FAILED" in (e.message or "") for e in instance.all_logs(killed_id))
        attempts: list[str] = []
        printed = set()

        def next_run_succeeded():
            if (retry := retried(instance, killed_id, printed)) is not None:
                return retry
            runs = finished(instance, attempts) if attempts else []
            if runs is None:
                return None  # one still going
            if runs and runs[-1].status == DagsterRunStatus.SUCCESS:
                return runs[-1]
            for run in runs[-1:]:
                print(f"run {run.run_id} {run.status}:", failure_messages(instance, run.run_id))
            attempts.append(launch_hours(client, 0, 1))
            return None

        wait_until("a run over those hours to succeed after the kill", next_run_succeeded, stack)
        wait_until("every run to finish", lambda: settled(instance), stack)
        assert_released_by(cluster_warehouse, killed_id,
                           set(attempts) | {r.run_id for r in retries(instance, killed_id)})
        instance.dispose()
    finally:
        stack.down()
    assert not stack.running()
    assert not listening_addresses(stack)

    # Local mode over the same source gives the same tables.
    assert_tables_equal_a_local_run(cluster_warehouse, NOW, env, monkeypatch, tmp_path / "local_warehouse")
