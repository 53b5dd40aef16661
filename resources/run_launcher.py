"""The run launcher of a single-host deployment (deploy/dagster.yaml): Dagster's default
launcher (the code server starts each run in a process of its own) plus the run worker health
check that run monitoring needs and the default launcher does not have. Without it, a run whose
process was killed stays STARTED until its maximum run time, and the hourly sensor waits for it
all that time.

A run's worker reports its pid in the run's first engine events; the worker is alive while a
process with that pid exists on this host. A run the product executes in a process of its own
(`incremental-assets run`, the demo) names that process in its `incremental/worker` tag, and
is checked the same way when the process runs on this host. Any other run (`dagster job
execute`, a CLI on another host, a code server elsewhere) has a pid this host cannot judge,
and is left to the run's maximum runtime (a false FAILED would let the next run take its locks
while it still writes). Launchers of container platforms (Docker, Kubernetes, ECS) check their
workers themselves.
"""

import json
import os
import socket

from dagster import DagsterEventType, DefaultRunLauncher
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG  # where the launcher records the code server

from incremental_assets.names import WORKER_TAG

# How a code server on this host is addressed.
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def run_worker_pid(instance, run_id: str) -> int | None:
    """The pid the run's worker process reported, or None before it has."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        metadata = record.dagster_event.event_specific_data.metadata or {}
        if "pid" in metadata:
            return int(metadata["pid"].value)
    return None


def _on_this_host(host: str | None) -> bool:
    return host is None or host in _LOOPBACK_NAMES or host in (socket.gethostname(), socket.getfqdn())


def worker_on_this_host(run) -> str | None:
    """None when the run's worker runs on this host (started by a code server here through the
    launcher, or a process that executes the run in itself); else why its pid cannot be checked."""
    worker = run.tags.get(WORKER_TAG)
    if worker:
        host = json.loads(worker).get("host")
        return None if host and _on_this_host(host) else f"it is executed by a process on {host}, not on this host"
    info = run.tags.get(GRPC_INFO_TAG)
    if not info:
        return "it was not launched through the instance's run launcher (executed in a process of its own)"
    host = json.loads(info).get("host")
    if _on_this_host(host):
        return None
    return f"its code server runs on {host}, not on this host ({socket.gethostname()})"


def worker_pid(instance, run) -> int | None:
    """The pid of the process executing the run: the one its tag names, else the one the
    launcher's worker reported (None before it has)."""
    worker = run.tags.get(WORKER_TAG)
    if worker:
        return int(json.loads(worker)["pid"])
    return run_worker_pid(instance, run.run_id)


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
        pid = worker_pid(self._instance, run)
        if pid is None:  # not started yet: run monitoring's start timeout covers a run that never does
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker has not reported its pid yet")
        if process_exists(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker process {pid} is running")
        return CheckRunHealthResult(WorkerStatus.FAILED,
                                    f"run worker process {pid} is gone (killed or crashed) while the run was "
                                    "STARTED; the next run over its partitions releases its manifest locks")
