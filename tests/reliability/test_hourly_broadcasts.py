"""What the hourly step broadcasts. The touched sessions' stored events are picked out of
base_events with a broadcast join when those sessions are few (an hour's): Spark sizes a
checkpoint by the plan that made it, so without the hint each such join shuffles days of stored
events. The check broadcasts the window's ids only when they are few: an hour's, or a big
window's counted kept rows up to the bound (docs/performance.md)."""

from __future__ import annotations

import pytest

from tests.reliability.helpers import SECOND_RUN, copy_warehouse, run_in_process

pytestmark = [pytest.mark.spark]

BROADCASTS = "spark.sql.autoBroadcastJoinThreshold"


def plans_reading_stored_events(lake, after_first_run, tmp_path, monkeypatch) -> list[str]:
    """The physical plans of the sets the hourly step materializes that pick the touched
    sessions' events out of base_events, over the second run's window (its sessions continue
    the first run's)."""
    from pyspark.sql import SparkSession

    from incremental_assets.steps import hourly_compute as hourly_step
    from resources.materialized import MaterializedSets

    plans = []

    class Recorded(MaterializedSets):
        def __call__(self, df, **kwargs):
            plans.append(df._jdf.queryExecution().executedPlan().toString())
            return super().__call__(df, **kwargs)

    monkeypatch.setattr(hourly_step, "MaterializedSets", Recorded)
    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    # Spark broadcasts by its own estimate below this threshold: at 1 byte it does so for no set,
    # as at scale, where it estimates a checkpoint of a few sessions by the days it came from.
    spark = SparkSession.getActiveSession()
    threshold = spark.conf.get(BROADCASTS)
    spark.conf.set(BROADCASTS, "1")
    try:
        report = run_in_process(SECOND_RUN, lake, warehouse)
    finally:
        spark.conf.set(BROADCASTS, threshold)
    assert report.success, report.runs
    # A stored-events read joined with the touched sessions: a file scan beside the checkpoint
    # that holds each session's scan_from.
    return [plan for plan in plans if "FileScan" in plan and "scan_from#" in plan]


def test_an_hours_sessions_are_broadcast_to_the_stored_events(lake, after_first_run, tmp_path, monkeypatch):
    plans = plans_reading_stored_events(lake, after_first_run, tmp_path, monkeypatch)
    assert plans, "the window's sessions continue earlier ones: their stored events are read"
    for plan in plans:
        assert "SortMergeJoin" not in plan and "BroadcastHashJoin" in plan, plan


def test_many_sessions_are_joined_as_spark_chooses(lake, after_first_run, tmp_path, monkeypatch):
    from incremental_assets.steps import hourly_compute as hourly_step

    monkeypatch.setattr(hourly_step, "BROADCAST_KEYS_MAX_ROWS", -1)  # every count is over it
    plans = plans_reading_stored_events(lake, after_first_run, tmp_path, monkeypatch)
    assert plans and all("SortMergeJoin" in plan for plan in plans)


# A limit of 0 values writes the window's wide sets as files, as a big window's are; the default
# holds an hour's in memory (checkpoints, not counted: few by their estimate).
@pytest.mark.parametrize("values_max, bound, broadcast", [("0", 10**6, True), ("0", -1, False),
                                                          ("50000000", -1, True)])
def test_the_check_broadcasts_a_big_windows_ids_only_when_counted_few(lake, after_first_run, tmp_path, monkeypatch,
                                                                     values_max, bound, broadcast):
    from incremental_assets.steps import hourly
    from incremental_assets.steps import hourly_compute as hourly_step

    decided = []

    def keeping_the_decision(warehouse, start, end, **scope):
        results = hourly_step.compute(warehouse, start, end, **scope)
        decided.append(results.few_rows)
        return results

    monkeypatch.setattr(hourly, "compute", keeping_the_decision)
    monkeypatch.setattr(hourly_step, "BROADCAST_KEYS_MAX_ROWS", bound)
    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    report = run_in_process(SECOND_RUN, lake, warehouse, INCREMENTAL_CHECKPOINT_VALUES_MAX=values_max)
    assert report.success, report.runs
    assert decided == [broadcast]
