"""The run launcher of a single-host deployment (deploy/dagster.yaml): Dagster's default
launcher (the code server starts each run in a process of its own) plus the run worker health
check that run monitoring needs and the default launcher does not have. Without it, a run whose
process was killed stays STARTED until its maximum run time, and the hourly sensor waits for it
all that time.

A run's worker reports its pid in the run's first engine events; the worker is alive while a
process with that pid exists on this host (the daemon runs beside the code server here).
Launchers of container platforms (Docker, Kubernetes, ECS) check their workers themselves.
"""

import os

from dagster import DagsterEventType
from dagster._core.launcher import DefaultRunLauncher  # not exported at top level
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus


def run_worker_pid(instance, run_id: str) -> int | None:
    """The pid the run's worker process reported, or None before it has."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        metadata = record.dagster_event.event_specific_data.metadata or {}
        if "pid" in metadata:
            return int(metadata["pid"].value)
    return None


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
        pid = run_worker_pid(self._instance, run.run_id)
        if pid is None:  # not started yet: run monitoring's start timeout covers a run that never does
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker has not reported its pid yet")
        if process_exists(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker process {pid} is running")
        return CheckRunHealthResult(WorkerStatus.FAILED,
                                    f"run worker process {pid} is gone (killed or crashed) while the run was "
                                    "STARTED; the next run over its partitions releases its manifest locks")
