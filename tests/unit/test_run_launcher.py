"""The run worker health check marks a run failed only when its worker ran on this host and
is gone: a run executed in a process of its own (the CLI, perhaps on another host) or started
by a code server elsewhere is never failed by a pid this host does not know."""

import json
import os
import subprocess
import sys

import pytest
from dagster import DagsterInstance, DagsterRun
from dagster._core.launcher.base import WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG

from incremental_assets.names import MAX_RUNTIME_TAG, USER_TAG, WORKER_TAG
from incremental_assets.runner import in_process_tags
from resources import run_launcher
from resources.run_launcher import LocalProcessRunLauncher


@pytest.fixture
def gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def health(monkeypatch, pid: int, tags: dict):
    monkeypatch.setattr(run_launcher, "run_worker_pid", lambda instance, run_id: pid)
    with DagsterInstance.ephemeral() as instance:
        launcher = LocalProcessRunLauncher()
        launcher.register_instance(instance)
        return launcher.check_run_worker_health(DagsterRun(job_name="hourly_job", tags=tags))


def launched_to(host: str) -> dict:
    return {GRPC_INFO_TAG: json.dumps({"host": host, "port": 4266})}


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_a_launched_run_whose_worker_is_gone_here_is_failed(monkeypatch, gone_pid, host):
    result = health(monkeypatch, gone_pid, launched_to(host))
    assert result.status is WorkerStatus.FAILED and str(gone_pid) in result.msg


def test_a_launched_run_whose_worker_lives_is_running(monkeypatch):
    assert health(monkeypatch, os.getpid(), launched_to("localhost")).status is WorkerStatus.RUNNING


def test_a_run_executed_in_a_process_of_its_own_is_not_judged_by_a_pid_of_this_host(monkeypatch, gone_pid):
    result = health(monkeypatch, gone_pid, {})
    assert result.status is WorkerStatus.RUNNING
    assert "not checked" in result.msg and "not launched through the instance's run launcher" in result.msg


def test_a_run_of_a_code_server_on_another_host_is_not_judged_here(monkeypatch, gone_pid):
    result = health(monkeypatch, gone_pid, launched_to("code-server-2.internal"))
    assert result.status is WorkerStatus.RUNNING and "code-server-2.internal" in result.msg


def executed_by(host: str, pid: int) -> dict:
    return {WORKER_TAG: json.dumps({"host": host, "pid": pid})}


def test_a_run_executed_by_a_process_of_this_host_is_judged_by_that_process(monkeypatch, gone_pid):
    import socket

    assert health(monkeypatch, None, executed_by(socket.gethostname(), os.getpid())).status is WorkerStatus.RUNNING
    result = health(monkeypatch, None, executed_by(socket.gethostname(), gone_pid))
    assert result.status is WorkerStatus.FAILED and str(gone_pid) in result.msg
    result = health(monkeypatch, None, executed_by("cli-host-2.internal", gone_pid))
    assert result.status is WorkerStatus.RUNNING and "cli-host-2.internal" in result.msg


def test_the_runners_runs_name_their_process_and_have_no_maximum_runtime():
    """Run monitoring's runtime limit would cancel a long CLI backfill while it writes; its
    health check fails the run once the process is gone instead."""
    import socket

    tags = in_process_tags()
    assert tags[MAX_RUNTIME_TAG] == "0"
    assert json.loads(tags[WORKER_TAG]) == {"host": socket.gethostname(), "pid": os.getpid()}
    assert socket.gethostname() in tags[USER_TAG] and str(os.getpid()) in tags[USER_TAG]
