"""A transient failure (a Delta commit that kept conflicting, materialized rows lost with their
executor) retries the step in the same run: the retry takes back the items its first attempt
failed, and the run succeeds with the tables an undisturbed run gives."""

from __future__ import annotations

import pytest
from deltalake.exceptions import CommitFailedError

from incremental_assets.planning.processing_manifest import State
from resources.manifest import ManifestStore
from tests.reliability.helpers import (
    FIRST_RUN,
    MANIFEST,
    SECOND_RUN,
    assert_same_tables,
    copy_warehouse,
    run_in_process,
    snapshot,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_commit_conflict_retries_the_step_and_the_run_succeeds(lake, tmp_path, monkeypatch):
    from incremental_assets.steps import hourly
    from incremental_assets.steps.hourly_compute import compute

    attempts = []

    def conflicting_once(warehouse, start, end, **scope):
        attempts.append(start)
        if len(attempts) == 1:
            raise CommitFailedError("Commit failed: a concurrent transaction deleted the same data")
        return compute(warehouse, start, end, **scope)

    monkeypatch.setattr(hourly, "compute", conflicting_once)
    lines: list[str] = []
    report = run_in_process(FIRST_RUN, lake, tmp_path / "warehouse", echo=lines.append)
    assert report.success, lines
    assert len(attempts) == 2
    history = ManifestStore(str(tmp_path / "warehouse" / MANIFEST)).records(["base_events/2026-01-05-00:00"])
    assert [r.state for r in history] == [State.PROCESSING, State.FAILED, State.RESOLVED, State.PROCESSING,
                                          State.PROCESSED]


def test_materialized_rows_lost_mid_write_retry_the_step_and_the_tables_are_right(
        lake, after_first_run, second_run_tables, tmp_path, monkeypatch):
    """The executor holding the step's filtered rows dies after base_events, the sessions and
    the state tables are written: the last write fails, the step runs again from the tables."""
    from incremental_assets.steps import hourly
    from incremental_assets.steps.hourly_compute import compute
    from resources.materialized import release

    attempts = []

    def losing_filtered_rows_once(warehouse, start, end, **scope):
        results = compute(warehouse, start, end, **scope)
        attempts.append(start)
        if len(attempts) == 1:
            release(results.filtered)  # what the executor's death does to them
        return results

    monkeypatch.setattr(hourly, "compute", losing_filtered_rows_once)
    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    lines: list[str] = []
    report = run_in_process(SECOND_RUN, lake, warehouse, echo=lines.append)
    assert report.success, lines
    assert len(attempts) == 2
    item = "filtered_events/" + SECOND_RUN.replace(hour=1).strftime("%Y-%m-%d-%H:%M")
    history = ManifestStore(str(warehouse / MANIFEST)).records([item])
    assert [r.state for r in history][-4:] == [State.FAILED, State.RESOLVED, State.PROCESSING, State.PROCESSED]
    assert "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND" in history[-4].payload["reason"]
    assert_same_tables(snapshot(warehouse), second_run_tables)
