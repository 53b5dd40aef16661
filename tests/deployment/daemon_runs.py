"""What the stack tests share: the sensor's clock and the source's hours, a sample moved to
them, waiting for the daemon's runs (with the stack's logs when a wait times out), and a
directory for a stack."""

import shutil
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from dagster import DagsterRunStatus, RunsFilter

from tests.live import moved_in_time

NOW = datetime(2026, 1, 7, 12, 5, tzinfo=timezone.utc)  # the sensor's clock (INCREMENTAL_SENSOR_CLOCK)
T0 = NOW.replace(minute=0) - timedelta(hours=10)
SAMPLE_START, SAMPLE_HOUR_0 = date(2026, 1, 4), datetime(2026, 1, 6, tzinfo=timezone.utc)
PHASE_SECONDS = 900


def hour(h: int) -> datetime:
    return T0 + timedelta(hours=h)


def sample_events(spark, *, seed: int):
    """900 generated events over 3 days, moved so that their loads fall in the hours from T0."""
    from incremental_assets.sources.generator import generate_events_df

    sample = generate_events_df(spark, events=900, days=3, start=SAMPLE_START, seed=seed)
    return moved_in_time(sample, T0 - SAMPLE_HOUR_0).cache()


def stack_directory(request) -> Path:
    """A directory for a stack, removed after the test. Not under pytest's tmp_path (mode 700):
    as root, PostgreSQL runs as the postgres user."""
    directory = Path(tempfile.mkdtemp(prefix="incremental-stack-"))
    directory.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(directory, ignore_errors=True))
    return directory


def wait_until(what: str, condition, stack, timeout: float = PHASE_SECONDS):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(3)
    logs = [f"--- {log.name} ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            for log in sorted((stack.directory / "logs").glob("*.log"))]
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n" + "\n".join(logs))


def succeeded(instance, job: str):
    return instance.get_runs(filters=RunsFilter(job_name=job, statuses=[DagsterRunStatus.SUCCESS]))
