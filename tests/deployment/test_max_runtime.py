"""A CLI run on the stack's instance that lasts longer than the instance's maximum runtime is
not cancelled by run monitoring, and keeps its manifest locks until it ends.

The stack runs deploy/dagster.yaml with a maximum runtime of a minute (production's is two
hours). The run is executed by a process of its own, as `incremental-assets run` does
(tests/reliability/driver.py, whose hourly step holds its claim well past that minute): no
launcher can stop that process, so a cancelled run would leave it writing while the next run
released its locks. A run launched as the UI does over some of the same hours waits for it.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient

from deploy.stack import HOST, REPO, Stack
from incremental_assets.planning.processing_manifest import State
from resources.manifest import ManifestStore
from resources.manifest_items import item_id
from tests.deployment.daemon_runs import hour, sample_events, stack_directory, wait_until
from tests.deployment.test_stack import failure_messages, finished, key, step_span
from tests.live import write_loads
from tests.reliability.helpers import DRIVER

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MAX_RUNTIME_SECONDS = 60
MONITORING_POLL_SECONDS = 5
HELD_SECONDS = MAX_RUNTIME_SECONDS + 90  # how long the run's hourly step holds its claim


@pytest.fixture(scope="module")
def events(spark):
    return sample_events(spark, seed=11)


def lock_holder(warehouse) -> tuple[str, int] | None:
    """The run holding manifest items, and the pid of its process (None: no item is locked)."""
    if not (warehouse / "processing_manifest").exists():
        return None
    holders = {(state.open_lock.run_id, int(state.open_lock.payload["pid"]))
               for state in ManifestStore(str(warehouse / "processing_manifest")).states().values()
               if state.open_lock is not None}
    assert len(holders) <= 1, holders
    return next(iter(holders), None)


def test_a_cli_run_longer_than_the_maximum_runtime_is_not_cancelled_and_keeps_its_locks(
        spark, events, tmp_path, monkeypatch, request):
    source, warehouse = tmp_path / "source", tmp_path / "warehouse"
    assert write_loads(events, source, hour(0), hour(6)) > 0
    # No sensor or schedule: the only runs are the two this test starts.
    env = {"INCREMENTAL_WAREHOUSE": str(warehouse), "INCREMENTAL_SOURCE_PATH": str(source),
           "INCREMENTAL_START_DATE": hour(0).date().isoformat(), "INCREMENTAL_AUTOMATION_RUNNING": "false"}
    stack = Stack.up(stack_directory(request), env, instance_settings={"run_monitoring": {
        "max_runtime_seconds": MAX_RUNTIME_SECONDS, "poll_interval_seconds": MONITORING_POLL_SECONDS}})
    cli = None
    try:
        monkeypatch.setenv("DAGSTER_PG_URL", stack.pg_url)
        instance = DagsterInstance.from_config(str(stack.dagster_home))
        assert instance.run_monitoring_max_runtime_seconds == MAX_RUNTIME_SECONDS
        output = tmp_path / "cli.log"
        with open(output, "w") as log:
            cli = subprocess.Popen([sys.executable, str(DRIVER), "--slow", str(HELD_SECONDS), "--hours", key(0),
                                    key(3)], env=stack.dagster_env(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        run_id, pid = wait_until("the CLI run to hold its manifest items", lambda: lock_holder(warehouse), stack)
        assert pid == cli.pid
        started = instance.get_run_record_by_id(run_id).start_time
        assert started is not None

        # Past its maximum runtime and several rounds of run monitoring, which checked it: still
        # going, and still holding its items.
        past = started + MAX_RUNTIME_SECONDS + 4 * MONITORING_POLL_SECONDS
        wait_until("the run's maximum runtime to pass", lambda: time.time() > past or cli.poll() is not None, stack)
        assert cli.poll() is None, "the run ended before its maximum runtime: it proves nothing"
        assert instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED, \
            failure_messages(instance, run_id)
        assert lock_holder(warehouse) == (run_id, cli.pid)
        daemon_log = (stack.directory / "logs" / "daemon.log").read_text(errors="replace")
        assert f"Checking run {run_id}" in daemon_log

        # A run over some of the same hours, launched as the UI does (with a maximum runtime of
        # its own, as it waits longer than the instance's): its hourly step waits for the CLI
        # run's to end, and never takes that run's locks.
        client = DagsterGraphQLClient(HOST, port_number=stack.webserver_port)
        other = client.submit_job_execution("hourly_job", repository_location_name="incremental_assets",
                                            repository_name="__repository__", tags={
                                                "dagster/asset_partition_range_start": key(2),
                                                "dagster/asset_partition_range_end": key(5),
                                                "dagster/max_runtime": "1800"})
        assert cli.wait(timeout=900) == 0, output.read_text(errors="replace")[-3000:]
        (other_run,) = wait_until("the other run to finish", lambda: finished(instance, [other]), stack)
        cli_record = instance.get_run_record_by_id(run_id)
        assert cli_record.dagster_run.status == DagsterRunStatus.SUCCESS
        assert other_run.status == DagsterRunStatus.SUCCESS, failure_messages(instance, other)
        assert not instance.all_logs(run_id, of_type=DagsterEventType.RUN_CANCELING)
        assert step_span(instance, other, "hourly_assets")[0] >= cli_record.end_time
        records = ManifestStore(str(warehouse / "processing_manifest")).records()
        assert not [r for r in records if (r.payload or {}).get("abandoned_run_id") == run_id]
        processed_by_cli = {r.item_id for r in records if r.run_id == run_id and r.state is State.PROCESSED}
        assert {item_id("base_events", key(h)) for h in range(4)} <= processed_by_cli
        instance.dispose()
    finally:
        if cli is not None and cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait(30)
        stack.down()
    assert not stack.running()
