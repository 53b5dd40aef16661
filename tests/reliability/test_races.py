"""Two processes writing at once: the manifest lets exactly one claim a range; steps over
different ranges take turns (the hourly step's turn item), both land, and the tables are those
of one run over both.

One side is a child process (tests/reliability/driver.py), the other this test process; both
wait at a barrier once Spark is up, then start together. Each holds base_events a few
seconds after claiming (a long computation), so the two claims always overlap.
"""

from __future__ import annotations

import re

import pytest

from incremental_assets.names import HOURLY_TURN
from incremental_assets.planning.processing_manifest import ItemStatus
from resources.manifest import ManifestStore
from tests.reliability.helpers import (
    MANIFEST,
    SECOND_RUN,
    assert_same_tables,
    child_env,
    child_process,
    copy_warehouse,
    make_dagster_home,
    run_in_process,
    snapshot,
    use_settings,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

HOLD_SECONDS = 6
HOURLY_STEP_TABLES = ["base_events", "rejected_events", "event_copies", "sessions_lifecycle_manifest",
                      "quarantined_sessions", "filtered_events", "filtered_events_counts", "processed_load_hours"]
SECOND_RUN_HOURS = [f"2026-01-05-{hour:02d}:00" for hour in range(1, 6)]


@pytest.fixture
def slow_hourly_step(monkeypatch):
    """In this process, the hourly step holds its claim HOLD_SECONDS before computing."""
    import time

    import incremental_assets.steps.hourly_compute as hourly

    real = hourly.validate

    def validate(*args, **kwargs):
        time.sleep(HOLD_SECONDS)
        return real(*args, **kwargs)

    monkeypatch.setattr(hourly, "validate", validate)


def start_together(child, barrier):
    wait_for(lambda: any(barrier.glob("ready-*")), timeout=600, what="the child at the barrier", child=child)
    (barrier / "go").touch()


def test_two_runs_of_the_same_range_at_once_one_writes_the_other_is_refused(
        lake, after_first_run, second_run_tables, slow_hourly_step, tmp_path):
    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    args = ["--slow", str(HOLD_SECONDS), "--barrier", str(barrier), "--", "run", "--until", SECOND_RUN.isoformat()]
    env = child_env(lake, warehouse, make_dagster_home(tmp_path / "child_home"))
    lines: list[str] = []
    with child_process(args, env, tmp_path / "child") as child:
        start_together(child, barrier)
        report = run_in_process(SECOND_RUN, lake, warehouse, echo=lines.append)
        child.wait()
    here = "\n".join(lines)
    outcomes = {"child": child.process.returncode == 0, "test process": report.success}
    assert sorted(outcomes.values()) == [False, True], (outcomes, here, child.describe())

    manifest = ManifestStore(str(warehouse / MANIFEST))
    claimers = {r.run_id for r in manifest.records() if r.item_id == f"base_events/{SECOND_RUN_HOURS[0]}"
                and r.state.name == "PROCESSING"}
    first_run_claimers = {r.run_id for r in ManifestStore(str(after_first_run / MANIFEST)).records()}
    (winner,) = claimers - first_run_claimers
    loser_output = child.stdout if report.success else here
    # The loser is refused before it starts (its plan sees the lock) or at its claim.
    refused = re.search(r"hourly_job (?:failed \(run ([0-9a-f-]+)\)|not run): .*is locked by run ([0-9a-f-]+)",
                        loser_output)
    assert refused and refused.group(2) == winner, loser_output
    if refused.group(1):
        assert refused.group(1) not in {r.run_id for r in manifest.records()}  # the loser wrote nothing
    if report.success:
        assert winner in {run.run_id for run in report.runs}
    assert all(s.status is ItemStatus.READY for s in manifest.states().values())
    # (only hourly_job ran: the daily tables are not compared)
    assert_same_tables(snapshot(warehouse), second_run_tables, HOURLY_STEP_TABLES)


def test_two_runs_of_different_ranges_at_once_both_write_and_keep_each_others_rows(
        lake, after_first_run, second_run_tables, slow_hourly_step, tmp_path):
    from dagster import DagsterInstance

    from incremental_assets.runner import execute_job

    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    args = ["--slow", str(HOLD_SECONDS), "--barrier", str(barrier), "--hours", SECOND_RUN_HOURS[0], SECOND_RUN_HOURS[1]]
    env = child_env(lake, warehouse, make_dagster_home(tmp_path / "child_home"))
    lines: list[str] = []
    with child_process(args, env, tmp_path / "child") as child, pytest.MonkeyPatch.context() as mp:
        use_settings(mp, lake, warehouse)
        start_together(child, barrier)
        run = execute_job("hourly_job", instance=DagsterInstance.ephemeral(), echo=lines.append,
                          partitions=(SECOND_RUN_HOURS[2], SECOND_RUN_HOURS[-1]))
        child.wait()
    assert child.process.returncode == 0, child.describe()
    assert run.success, lines

    manifest = ManifestStore(str(warehouse / MANIFEST))
    assert all(s.status is ItemStatus.READY for s in manifest.states().values())
    # The two steps took turns (the hourly_step/turn item), so every table,
    # sessions and their filtered rows included, holds what one run over both ranges writes.
    turns = [r for r in manifest.records() if r.item_id == HOURLY_TURN and r.state.name == "PROCESSING"]
    assert len(turns) >= 2
    # (only hourly_job ran: the daily tables are not compared)
    assert_same_tables(snapshot(warehouse), second_run_tables, HOURLY_STEP_TABLES)
