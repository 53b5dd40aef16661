"""Soak: many runs in a row over a growing source, in one process and as many CLI processes.

The source grows one load hour at a time; after each hour, `run --until` the end of that hour.
Every run must succeed (every CLI process exit 0: a process that aborts at shutdown after its
work is done fails here), and at the end every output table must equal one run over the
whole source. `make test-long` runs a few hours; `make soak` many (SOAK_HOURS).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tests.reliability.helpers import (
    LAKE_START,
    REPO,
    assert_same_tables,
    child_env,
    make_dagster_home,
    run_in_process,
    snapshot,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

HOURS = int(os.environ.get("SOAK_HOURS", "4"))  # per mode; `make soak` sets more
FIRST_HOUR = datetime(LAKE_START.year, LAKE_START.month, LAKE_START.day, tzinfo=timezone.utc)


def hour(h: int) -> datetime:
    return FIRST_HOUR + timedelta(hours=h)


@pytest.fixture(scope="module")
def events(spark):
    """One generated day; the soak feeds it to the source hour by hour."""
    from incremental_assets.sources.generator import generate_events_df

    return generate_events_df(spark, events=40 * max(HOURS, 4), days=1, start=LAKE_START, seed=21).cache()


def append_hour(events, source, h: int) -> int:
    """Append the loads of hour h (the first call also writes the rows without a load time)."""
    from pyspark.sql import functions as F

    from incremental_assets.sources.schema import load_time
    from incremental_assets.sources.writer import write_source_table

    rows = events.where((load_time() >= F.lit(hour(h))) & (load_time() < F.lit(hour(h + 1))))
    if h == 0:
        rows = rows.unionByName(events.where(load_time() < F.lit(hour(0))))
    return write_source_table(rows.coalesce(1), source, mode="append" if source.exists() else "error")["rows"]


@pytest.fixture(scope="module")
def one_run_over_everything(events, tmp_path_factory):
    """The tables of a single run over the whole grown source."""
    root = tmp_path_factory.mktemp("soak_single")
    source = root / "source"
    for h in range(HOURS):
        append_hour(events, source, h)
    report = run_in_process(hour(HOURS), str(source), root / "warehouse")
    assert report.success, report.runs
    return snapshot(root / "warehouse")


def test_many_runs_in_one_process_over_a_growing_source(events, one_run_over_everything, tmp_path):
    source, warehouse = tmp_path / "source", tmp_path / "warehouse"
    for h in range(HOURS):
        append_hour(events, source, h)
        lines: list[str] = []
        report = run_in_process(hour(h + 1), str(source), warehouse, echo=lines.append)
        assert report.success, (h, lines)
    assert_same_tables(snapshot(warehouse), one_run_over_everything)


def test_many_cli_processes_in_a_row_over_a_growing_source(events, one_run_over_everything, tmp_path):
    source, warehouse = tmp_path / "source", tmp_path / "warehouse"
    env = child_env(str(source), warehouse, make_dagster_home(tmp_path / "dagster_home"),
                    PYTHONFAULTHANDLER="1")
    exits = []
    for h in range(HOURS):
        append_hour(events, source, h)
        done = subprocess.run([sys.executable, "-m", "incremental_assets.cli", "run", "--until",
                               hour(h + 1).isoformat()], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600)
        exits.append(done.returncode)
        assert done.returncode == 0, (h, done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert exits == [0] * HOURS
    assert_same_tables(snapshot(warehouse), one_run_over_everything)
