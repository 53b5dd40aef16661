"""The run launcher of a single-host deployment (deploy/dagster.yaml): Dagster's default
launcher (the code server starts each run in a process of its own) plus the run worker health
check that run monitoring needs and the default launcher does not have. Without it, a run whose
process was killed stays STARTED until its maximum run time, and the hourly sensor waits for it
all that time.

A run's worker reports its pid in the run's first engine events; the worker is alive while a
process with that pid exists on this host. That says something only of a run this launcher
started through a code server on this host (the daemon beside it): a run executed in a
process of its own (`incremental-assets run`, `dagster job execute`), perhaps on another
host, or started by a code server elsewhere, has a pid this host cannot judge, and is left
to the run's maximum runtime (a false FAILED would let the next run take its locks while it
still writes). Launchers of container platforms (Docker, Kubernetes, ECS) check their workers
themselves.
"""

import json
import os
import socket

from dagster import DagsterEventType
from dagster._core.launcher import DefaultRunLauncher  # not exported at top level
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG  # where the launcher records the code server

# How a code server on this host is addressed.
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def run_worker_pid(instance, run_id: str) -> int | None:
    """The pid the run's worker process reported, or None before it has."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        metadata = record.dagster_event.event_specific_data.metadata or {}
        if "pid" in metadata:
            return int(metadata["pid"].value)
    return None


def worker_on_this_host(run) -> str | None:
    """None when the run's worker was started by a code server on this host through the
    launcher; else why its pid cannot be checked here."""
    info = run.tags.get(GRPC_INFO_TAG)
    if not info:
        return "it was not launched through the instance's run launcher (executed in a process of its own)"
    host = json.loads(info).get("host")
    if host is None or host in _LOOPBACK_NAMES or host in (socket.gethostname(), socket.getfqdn()):
        return None
    return f"its code server runs on {host}, not on this host ({socket.gethostname()})"


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


class LocalProcessRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher whose run workers run monitoring can check (same host)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        elsewhere = worker_on_this_host(run)
        if elsewhere:  # run monitoring fails a run on anything but RUNNING
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"not checked: {elsewhere}; its maximum runtime "
                                        "still applies")
        pid = run_worker_pid(self._instance, run.run_id)
        if pid is None:  # not started yet: run monitoring's start timeout covers a run that never does
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker has not reported its pid yet")
        if process_exists(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker process {pid} is running")
        return CheckRunHealthResult(WorkerStatus.FAILED,
                                    f"run worker process {pid} is gone (killed or crashed) while the run was "
                                    "STARTED; the next run over its partitions releases its manifest locks")
